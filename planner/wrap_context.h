// What the wrap searches share (Note [Wrap DP] in wrap_dp.h): partial wrappings from the right end as labels, the
// transition that places a unit below them (its fragments, Note [Wrap fragments]), the close, lower bounds of the
// rest, and the memory floor. Internal to planner/.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "wrap_fragments.h"
#include "wrap_micro_classes.h"

namespace shardplan::wrap_internal {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::size_t kNone = static_cast<std::size_t>(-1);

// Note [Fragments in time order]: per micro-batch, the fragments of Note [Wrap fragments] follow each other in time.
// The backward of the last micro-batch is placed as a chain — each fragment from the state the one before it left —
// and every other fragment from the idle state, which is its real start when the fragment before it ends idle (the
// streams free, nothing busy after the boundary: what the forward pass and a micro-batch without reductions leave).
// Where one does not — a micro-batch whose reductions run into the next — or a placement is not the walk's
// (collectives slowed beside compute), the sum is a lower bound of the simulated step (Note [Monotone walk]) and the
// label's `exact` says so. The searches never assume which: they read it.

// A partial wrapping from the right end: the units from the leftmost placed one to the last, every fragment that
// depends on them alone placed (Note [Wrap DP]).
struct Label {
  double cost_s = 0;      // the placed fragments' durations
  BoundaryState state;    // the last micro-batch's backward, at the leftmost unit's backward boundary
  unsigned busy = 0;      // busy_streams(state)
  bool exact = true;      // every placement so far from the state it really starts from
  std::int64_t optimizer_elements = 0;  // the placed units' optimizer shards
  std::int64_t persistent_bytes = 0;    // the placed units' shards
  // Per micro-batch class (Note [Wrap floor], Note [Memory classes]), in one vector of three parts: the largest live
  // bytes of a placed fragment, with what every placed unit outside its window holds and what the units placed since
  // hold; and what the placed units right of the leftmost hold before their forward and after their reduction. Three
  // classes (the first, middle and last micro-batches of a step) stay inline.
  InlineVector<std::int64_t, 9> memory;
  std::int64_t& most_live(std::size_t memory_class) { return memory[memory_class]; }
  std::int64_t most_live(std::size_t memory_class) const { return memory[memory_class]; }
  std::int64_t& before_sum(std::size_t memory_class) { return memory[memory.size() / 3 + memory_class]; }
  std::int64_t before_sum(std::size_t memory_class) const { return memory[memory.size() / 3 + memory_class]; }
  std::int64_t& after_sum(std::size_t memory_class) { return memory[memory.size() / 3 * 2 + memory_class]; }
  std::int64_t after_sum(std::size_t memory_class) const { return memory[memory.size() / 3 * 2 + memory_class]; }
  std::size_t parent_state = kNone, parent_label = kNone;
};

// The state's busy streams: labels whose placements depend on the same streams compare on memory (Note [Wrap floor]).
unsigned busy_streams(const BoundaryState& state);

class WrapContext {
 public:
  // `floor_for_any_prefetch_depth`: the floor holds for plans whose prefetch lists differ from one ahead (Note
  // [Prefetch depth] in searcher_setting.cpp): only certainly live bytes, which do not depend on where a gather is issued.
  WrapContext(WrapFragments& fragments, int max_unit_blocks, std::int64_t memory_cap_bytes, bool per_unit_reshard,
              bool floor_for_any_prefetch_depth = false);

  WrapFragments& fragments;
  std::size_t n, m;     // blocks; most blocks per unit
  bool keep_choice;     // each unit chooses reshard_after_forward (Note [Wrap search])
  bool template_kept;   // otherwise every unit is as the template says
  std::int64_t memory_cap_bytes;  // 0: none

  // The kept flags a unit may take. Units kept gathered form a suffix of the model (the last units, whose backward
  // comes first — what FSDP2 users keep, and what bounds the search: any subset explodes the labels), so a unit may
  // be kept only when the unit after it is.
  std::span<const bool> kept_options() const;
  bool may_follow(bool right_kept, bool left_kept) const { return !keep_choice || right_kept || !left_kept; }
  // The units that may stand left of `unit`: 1 to m blocks ending where it begins, with each kept flag the suffix
  // rule allows — the one expansion step every search takes.
  template <class Visit>
  void for_each_left_neighbour(const UnitChoice& unit, Visit&& visit) const {
    for (std::size_t c = 1; c <= m && c <= unit.first_block; ++c) {
      if (!fragments.may_share_unit(unit.first_block - c, c)) continue;
      for (bool left_kept : {false, true}) {
        if ((!keep_choice && left_kept != template_kept) || !may_follow(unit.kept, left_kept)) continue;
        visit(UnitChoice{unit.first_block - c, c, left_kept});
      }
    }
  }
  std::size_t state_index(const UnitChoice& unit) const { return (unit.first_block * (m + 1) + unit.length) * 2 + unit.kept; }
  UnitChoice unit_of(std::size_t state) const {
    return {state / 2 / (m + 1), (state / 2) % (m + 1), state % 2 == 1};
  }

  // The label of the last unit alone: its forward with the head's, the head's backward.
  Label last_unit(const UnitChoice& unit);
  // `left` placed below `unit`, the leftmost unit of `label`: left's forward, unit's backward. `held_above_bytes`:
  // what the reduction of the unit right above `unit` holds at unit's backward (0 where unknown).
  // `exact_memory`: floors from this state's own placement (no dominance is taken on them then).
  Label extend(const Label& label, const UnitChoice& unit, const UnitChoice& left, std::int64_t held_above_bytes = 0,
               bool exact_memory = false);
  // The same with the transition's fragments looked up once for many labels.
  struct Transition {
    const EdgeFragments& below;
    const EdgeFragments& leftmost;
    const PairFragments& pair;
  };
  Transition transition(const UnitChoice& unit, const UnitChoice& left) {
    const std::uint64_t unit_key = key_[state_index(unit)], left_key = key_[state_index(left)];
    return {fragments.edge(left, left_key), fragments.edge(unit, unit_key),
            fragments.pair(left, unit, left_key, unit_key)};
  }
  Label extend(const Label& label, const Transition& transition, std::int64_t held_above_bytes, bool exact_memory);
  // The complete wrapping with `first` (the leftmost unit of `label`) as the first unit: the head, the first unit's
  // backward with the embedding's, the root's reduction and the optimizer.
  struct Closed {
    double step_s = 0;
    bool exact = true;
    std::int64_t floor_bytes = 0;  // a floor of the wrapping's simulated peak
  };
  Closed close(const Label& label, const UnitChoice& first, std::int64_t held_above_bytes = 0,
               bool exact_memory = false);

  // A lower bound of what every completion of `label` (leftmost unit `unit`) still adds to its cost (Note [Wrap
  // bounds]).
  double lower_bound(const UnitChoice& unit, const Label& label) const;
  // A floor of every completion's simulated peak (Note [Wrap floor]).
  std::int64_t floor_bytes(const UnitChoice& unit, const Label& label) const;
  bool fits_floor(const UnitChoice& unit, const Label& label) const {
    return memory_cap_bytes <= 0 || floor_bytes(unit, label) <= memory_cap_bytes;
  }
  // The least shards any wrapping of blocks [0, p) holds, and the least bytes their units hold beside other
  // fragments in micro-batch `micro` (Note [Wrap floor]).
  std::int64_t least_persistent(std::size_t p) const { return least_persistent_[p]; }
  // Note [Memory classes]: the micro-batches whose terms a label keeps once.
  const MicroClasses& memory_classes() const { return classes_; }

  // A fragment's memory term: its placement's live bytes where they are a floor for this state, else its certainly
  // live bytes (Note [Wrap floor]).
  std::int64_t memory_term(std::int64_t certain_peak_bytes, const FragmentTiming& idle, const FragmentTiming* placed,
                           unsigned busy_at_start) const;

 private:
  void add_term(Label& label, int micro, std::int64_t bytes) const;
  // Note [Wrap bounds]: per state (p, b, kept), the least rest with every fragment placed from the idle state; the
  // least rest of the forward part alone (the forwards of the units left of it, the head, and the micro-batches
  // before the last); and per reduction stream, the leftmost unit's own work there in the last micro-batch's backward.
  // Per first block p and stream, the least work there of the units left of p. And the least optimizer step any
  // wrapping has, which follows every reduction stream's work.
  std::vector<double> reset_, forward_rest_;
  std::vector<std::uint64_t> key_;  // per state: its unit's WrapFragments::key_of
  std::vector<std::array<double, kStreamCount>> own_work_, left_work_;
  std::vector<std::int64_t> least_persistent_;
  double least_optimizer_s_ = 0;  // the optimizer step over the least shards any partition of the blocks has
  std::vector<std::vector<std::int64_t>> least_span_;  // [p][micro]
  bool regular_ = true;  // placements' memory is a floor: collectives at their own speed, micro-batches end idle
  bool floor_for_any_depth_ = false;
  int micro_batches_ = 1;
  MicroClasses classes_;  // Note [Memory classes]: the label's memory terms are per class
  FragmentPlacer placer_;
};

}  // namespace shardplan::wrap_internal
