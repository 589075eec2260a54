// WrapFragments: the fragments a wrap search places — each unit's part of the step lowered once by the lowering from
// a small window of the plan template, cached — and the memory each unit holds while other units' fragments run
// (Note [Wrap fragments]).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "fragment.h"
#include "hardware_profile.h"
#include "inline_vector.h"
#include "model_spec.h"
#include "plan.h"

namespace shardplan {

// One non-root unit of a wrapping: blocks [first_block, first_block + length), kept gathered from forward to backward
// (reshard_after_forward = false) or not.
struct UnitChoice {
  std::size_t first_block = 0;
  std::size_t length = 1;
  bool kept = false;
  bool operator==(const UnitChoice&) const = default;
};

// Note [Wrap fragments]: a step of a wrapping u₁ … u_K is, per micro-batch m, the fragments (Note [Fragments])
//   start(u₁) head(u₁) F(u₁|u₂) … F(u_{K−1}|u_K) last(u_K) turn(u_K) B(u_K|u_{K−1}) … B(u₂|u₁) close(u₁)
// in time order: the micro-batch's root all-gather; the embedding's forward with u₁'s gather; each unit's forward,
// which issues the next unit's gather; the last unit's forward with the head's; the head's backward, which issues
// u_K's gather; each unit's backward, which issues the gather of the unit below and its own reduction; the first
// unit's backward with the embedding's, the root's reduction and (after the last micro-batch) the optimizer step.
// What a unit's forward F(u|v) needs of the next unit v is only v's gather, and its backward B(u|w) only the gather of
// the unit w below (or, when w stays gathered, that there is none): the lowering emits a unit's gather the same
// wherever it is issued. So each unit's fragments are lowered once, from windows — plans of the template's knobs over
// the root's layers and the unit alone (`edge`), or between one-block neighbours whose gathers are its fragments'
// slots — and placed with the real neighbour's gather in the slot. Windows are cached by their units' blocks
// (identical blocks, with the same checkpointing, share entries — across the searches of one strategy, micro-batch
// and offload, whatever their checkpointing pattern or relaxation). Memory: a window's fragments count the root's and
// their own unit's buffers; every other unit holds, while a fragment of micro-batch m runs, a constant — before its
// forward `before[m]` (accumulated gradients under no_sync), between its forward and backward `span[m]` (activations,
// parameters kept gathered), after its reduction handed its buffers over `after[m]` — except that the reduction of
// the unit right above a unit's backward holds that unit's gradient until the unit's own reduction takes it over
// (`held_at_end`, Note [Reduction buffers]). All of these are certainly live bytes of the lowered windows (Note
// [Certainly live]).
struct EdgeFragments {  // one unit alone
  std::vector<Fragment> start, head, last_forward, turn, close;           // per micro-batch
  std::vector<FragmentTiming> start_idle, head_idle, last_forward_idle, turn_idle, close_idle;  // from the idle state
  std::vector<std::int64_t> before, span, after;                          // per micro-batch, the unit's own bytes
  // Per micro-batch, the unit's gather as the unit before it issues it in forward and the unit above in backward
  // (the head's and the turn's prefetch here; none in backward when the unit stays gathered).
  std::vector<std::vector<FragmentOp>> forward_gather, backward_gather;
  std::int64_t persistent_bytes = 0;      // its shards (parameters, gradients, optimizer states)
  std::int64_t optimizer_elements = 0;    // of its optimizer shard
};
struct UnitFragments {  // a unit with neighbours, their gathers in the slots
  std::vector<Fragment> forward;              // per micro-batch: F(u|·), the next unit's gather in the slot
  std::vector<Fragment> backward;             // B(u|·), the gather of the unit below in the slot
  std::vector<Fragment> backward_below_kept;  // B(u|·) when the unit below stays gathered (kept units only)
  std::vector<std::int64_t> held_at_end;      // what u's reductions hold when the backward of the unit below starts
};
struct PairFragments {  // `left` right below `right`
  struct Micro {  // per micro-batch
    FragmentTiming forward_left_idle, backward_right_idle;  // from the idle state
    std::int64_t forward_left_certain = 0, backward_right_certain = 0;  // certainly live peaks, with the neighbour
    std::int64_t right_held = 0;  // what right's reduction holds when left's backward starts
    const Fragment* backward_fragment = nullptr;
    FragmentInputs backward_inputs;
  };
  InlineVector<Micro, 1> micro;
  // What a label adds for the pair from the idle state, in time order: each micro-batch's forward_left_idle and, but
  // the last's, backward_right_idle (WrapContext::extend adds them one by one, as it did per micro-batch); and whether
  // all of them are exact and end idle (Note [Fragments in time order]).
  std::vector<double> idle_durations_s;
  bool idle_exact = true;
  // right's backward of a micro-batch placed from `state` (the chain of Note [Fragments in time order]). The label
  // DP places the same fragment from the same few states along many partial wrappings: the timing only (no peak, no
  // held bytes) of the last micro-batch's is remembered by its state.
  FragmentTiming place_backward_right(int micro, const BoundaryState& state, FragmentPlacer& placer,
                                      std::int64_t held_bytes, bool with_peak) const;

 private:
  struct StateHash {
    std::size_t operator()(const BoundaryState& state) const;
  };
  mutable std::unordered_map<BoundaryState, FragmentTiming, StateHash> timing_by_state_;
};

// The windows lowered for plan templates that differ only in their per-layer checkpointing, and the placements of
// their fragments per relaxation: what WrapFragments of those templates share.
class FragmentCache;

class WrapFragments {
 public:
  // `plan_template` gives every knob but the units (its root, its unit 1 and its per-layer checkpointing are read).
  // `shared`: the cache of another WrapFragments whose template differs from this one at most in checkpointing.
  WrapFragments(const ModelSpec& model, const Plan& plan_template, const HardwareProfile& profile, int world_size,
                int gpus_per_node, const TimingRelaxation& relaxation = {},
                std::shared_ptr<FragmentCache> shared = nullptr);
  ~WrapFragments();
  WrapFragments(const WrapFragments&) = delete;
  WrapFragments& operator=(const WrapFragments&) = delete;

  std::shared_ptr<FragmentCache> cache() const { return cache_; }
  std::size_t block_count() const;
  std::size_t first_layer_of_block(std::size_t block) const;
  int micro_batches() const;
  const HardwareProfile& profile() const;
  const TimingRelaxation& relaxation() const { return relaxation_; }

  const EdgeFragments& edge(const UnitChoice& unit);
  const UnitFragments& unit(const UnitChoice& unit);
  const PairFragments& pair(const UnitChoice& left, const UnitChoice& right);
  // The same by the units' keys (key_of), which a search computes once per unit.
  const EdgeFragments& edge(const UnitChoice& unit, std::uint64_t key);
  const PairFragments& pair(const UnitChoice& left, const UnitChoice& right, std::uint64_t left_key,
                            std::uint64_t right_key);
  std::uint64_t key_of(const UnitChoice& unit);  // its blocks' run (with checkpointing) and kept flag
  // What the reduction of `above` (the unit right after `unit`) still holds at unit's last backward (Note [Wrap floor]).
  std::int64_t held_by_reduction_above(const UnitChoice& unit, const UnitChoice& above);
  // The root's shards and the runtime overhead: held by every wrapping throughout.
  std::int64_t constant_bytes() const;
  std::int64_t root_optimizer_elements() const;
  // The optimizer step's base duration over that many shard elements (the lowering's op, the simulator's cost).
  double optimizer_base_s(std::int64_t shard_elements) const;
  // Whether blocks [first_block, first_block + length) may form one unit (Note [Uniform requires_grad] in plan.h).
  bool may_share_unit(std::size_t first_block, std::size_t length) const;
  // Whether the unit may be kept gathered at all (its strategy reshards after forward and gathers its parameters).
  bool keep_choice() const;
  bool template_kept() const;

 private:

  std::shared_ptr<FragmentCache> cache_;
  TimingRelaxation relaxation_;
  unsigned relaxation_code_ = 0;
  std::vector<int> block_signature_;  // per block: its shape class and checkpointing (FragmentCache::signature)
  // The last pairs looked up, direct-mapped by their keys: the DPs look up the same few pairs at every position.
  struct RecentPair {
    std::uint64_t key = ~0ull;
    const PairFragments* pair = nullptr;
  };
  std::array<RecentPair, 1024> recent_pairs_{};
  // The run of units of at most kShortUnit blocks, by first_block · kShortUnit + length − 1 (-1: not yet interned):
  // the searches' units, looked up millions of times.
  static constexpr std::size_t kShortUnit = 16;
  std::vector<std::int64_t> short_run_at_;
};

}  // namespace shardplan
