// FragmentCache (Note [Wrap fragments]): the plan template's windows lowered once and cut into the edge, unit and pair
// fragments WrapFragments serves, cached by the window's blocks. Private to the planner's wrap search.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "errors.h"
#include "fragment.h"
#include "fragment_folding.h"
#include "lowering.h"
#include "memory_certainty.h"
#include "op_placement.h"
#include "wrap_fragments.h"

namespace shardplan {

// A lowered window: its schedule, each op's base duration and overlap slowdown, what is certainly live in it.
struct Window {
  StepSchedule schedule;
  OpDurations durations;
  MemoryCertainty certainty;  // every unit's buffers but the excluded units'
  unsigned excluded = 0;      // bit u: window unit u's buffers are accounted outside the window (its neighbours)

  // The mark of (micro-batch, pass, unit) and the fragment from it to the next mark (or the schedule's end).
  std::size_t mark(int micro, FragmentPass pass, int unit) const {
    for (std::size_t index = 0; index < schedule.fragments.size(); ++index) {
      const FragmentMark& at = schedule.fragments[index];
      if (at.micro_batch == micro && at.pass == pass && (pass == FragmentPass::step || at.unit == unit)) return index;
    }
    throw InternalError("wrap fragments: a window has no mark for micro-batch " + std::to_string(micro));
  }
  int begin(std::size_t mark) const { return schedule.fragments[mark].first_op; }
  int end(std::size_t mark) const {
    return mark + 1 < schedule.fragments.size() ? schedule.fragments[mark + 1].first_op
                                                : static_cast<int>(schedule.ops.size());
  }
  // Where micro-batch `micro` ends: the next one's start mark, or the schedule's end.
  int micro_end(int micro) const {
    for (const FragmentMark& at : schedule.fragments) {
      if (at.micro_batch == micro + 1 && at.pass == FragmentPass::step) return at.first_op;
    }
    return static_cast<int>(schedule.ops.size());
  }
  Fragment fragment(int micro, FragmentPass pass, int unit, int slot = -1) const {
    const std::size_t at = mark(micro, pass, unit);
    return extract_fragment(schedule, begin(at), end(at), durations, certainty, slot, excluded);
  }
};

class FragmentCache {
 public:
  FragmentCache(const ModelSpec& model, const Plan& plan_template, const HardwareProfile& profile, int world_size,
                int gpus_per_node);

  // Whether this cache's fragments are those of `plan_template` (the same knobs but per-layer checkpointing).
  bool serves(const Plan& plan_template, int world_size, int gpus_per_node) const;
  int signature(std::size_t block, ActivationCheckpointing mode) const {
    return shape_class_[block] * kCheckpointingModes + static_cast<int>(mode);
  }
  std::uint64_t run(const std::vector<int>& signatures) {
    return runs_.emplace(signatures, runs_.size()).first->second;
  }
  const EdgeFragments& edge(std::uint64_t key, unsigned relaxation_code, const TimingRelaxation& relaxation,
                            const UnitChoice& unit, const std::vector<int>& signatures);
  const UnitFragments& unit(std::uint64_t key, const UnitChoice& unit, const std::vector<int>& signatures);
  static std::uint64_t pair_key(std::uint64_t left_key, std::uint64_t right_key, unsigned relaxation_code) {
    return (left_key << 32 | right_key << 3) | relaxation_code;  // keys are numbered densely from 0, far below 2^29
  }
  const PairFragments* find_pair(std::uint64_t key) const {
    const auto found = pairs_.find(key);
    return found == pairs_.end() ? nullptr : found->second.get();
  }
  const PairFragments& pair(std::uint64_t left_key, std::uint64_t right_key, unsigned relaxation_code,
                            const TimingRelaxation& relaxation, const EdgeFragments& below,
                            const EdgeFragments& above, const UnitFragments& left_unit,
                            const UnitFragments& right_unit, bool left_kept);
  double optimizer_base_s(std::int64_t shard_elements) const {
    return base_duration_s(optimizer_step_op(shard_elements, template_),
                           template_.training.precision.param_compute_bytes, profile_);
  }

  const ModelSpec& model_;
  Plan template_;
  HardwareProfile profile_;
  int world_size_, gpus_per_node_;
  int micro_batches_ = 1;
  std::vector<std::size_t> blocks_;       // model layer of each block
  std::vector<int> shape_class_;          // equal for blocks whose layers lower alike
  // Note [Uniform requires_grad] (plan.h): per block, the first block of its run of blocks that may share a unit
  // (all trainable or all frozen, under a front end that requires it; else 0 for every block).
  std::vector<std::size_t> shareable_from_;
  std::vector<std::size_t> before_blocks_, after_blocks_;  // the root's layers
  std::int64_t constant_bytes_ = 0;
  std::int64_t root_optimizer_elements_ = 0;
  bool keep_choice_ = false, template_kept_ = false;

 private:
  // The window of `units` with the views' checkpointing of their blocks (`signatures`: per block), lowered with
  // `micro_batches` micro-batches per step (Note [Folded windows]).
  Window lower_window(const std::vector<UnitChoice>& units, const std::vector<int>& signatures, unsigned excluded,
                      int micro_batches) const;
  std::unique_ptr<EdgeFragments> edge_from_window(const UnitChoice& unit, const std::vector<int>& signatures,
                                                  int micro_batches) const;
  std::unique_ptr<UnitFragments> unit_from_windows(const UnitChoice& unit, const std::vector<int>& signatures,
                                                   const EdgeFragments& own, int micro_batches) const;
  int folded_micro_batches() const { return std::min(micro_batches_, kFoldedMicroBatches); }

  std::map<std::vector<int>, std::uint64_t> runs_;  // runs of block signatures, interned
  std::unordered_map<std::uint64_t, std::unique_ptr<EdgeFragments>> edges_;  // by (key, relaxation)
  std::unordered_map<std::uint64_t, std::unique_ptr<UnitFragments>> units_;  // by key
  std::unordered_map<std::uint64_t, std::unique_ptr<PairFragments>> pairs_;  // by (keys, relaxation)
};

}  // namespace shardplan
