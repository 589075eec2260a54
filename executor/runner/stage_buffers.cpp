// StageBuffers (stage_buffers.h): the pipeline stage's forward cache and returned outputs over one step.
#include "stage_buffers.h"

#include <algorithm>
#include <string>

#include "errors.h"

namespace shardplan::runner {

StageBuffers::StageBuffers(const std::vector<Op>& program, std::int64_t boundary_bytes)
    : boundary_bytes_(boundary_bytes) {
  for (const Op& op : program) {
    if (op.kind != OpKind::forward || op.stage < 0 || op.layer < 0) continue;
    const auto [first, first_new] = first_layer_of_stage_.try_emplace(op.stage, op.layer);
    if (!first_new) first->second = std::min(first->second, op.layer);
    const auto [last, last_new] = last_layer_of_stage_.try_emplace(op.stage, op.layer);
    if (!last_new) last->second = std::max(last->second, op.layer);
  }
}

std::int64_t StageBuffers::aliased_input_bytes(const Op& op) const {
  const auto found = first_layer_of_stage_.find(op.stage);
  const bool receives = op.stage > 0 && found != first_layer_of_stage_.end() && found->second == op.layer;
  return receives ? boundary_bytes_ : 0;
}

void StageBuffers::keep_stage_output(const Op& send, TrackingAllocator& tracker, std::span<const float> output) {
  TrackedBuffer kept(tracker, MemoryCategory::activations, static_cast<std::int64_t>(output.size()));
  std::copy(output.begin(), output.end(), kept.values().begin());
  stage_outputs_[{send.stage, send.micro_batch}] = std::move(kept);
}

void StageBuffers::release_stage_output(const Op& backward) {
  const auto last = last_layer_of_stage_.find(backward.stage);
  if (last != last_layer_of_stage_.end() && last->second == backward.layer) {
    stage_outputs_.erase({backward.stage, backward.micro_batch});
  }
}

void StageBuffers::keep_returned_output(TrackingAllocator& tracker, std::int64_t elements) {
  returned_outputs_.emplace_back(tracker, MemoryCategory::activations, elements);
}

std::span<float> StageBuffers::park_weight_gradients(std::size_t key, TrackingAllocator& tracker,
                                                    std::int64_t elements, const Op& input_part) {
  const auto [parked, added] = parked_weight_gradients_.try_emplace(key);
  SHARDPLAN_CHECK(added, "a layer's input part parks its weight gradients once before its weight part");
  parked->second = {std::vector<float>(static_cast<std::size_t>(elements), 0.0f), &tracker,
                    input_part.kept_gradient_bytes};
  tracker.allocate(MemoryCategory::activations, input_part.kept_gradient_bytes);
  return parked->second.values;
}

void StageBuffers::add_parked_weight_gradients(std::size_t key, std::span<float> into) {
  const auto found = parked_weight_gradients_.find(key);
  SHARDPLAN_CHECK(found != parked_weight_gradients_.end() && found->second.values.size() <= into.size(),
                  "a layer's weight part follows its input part, over the same unit's gradients");
  const std::vector<float>& parked = found->second.values;  // the unit's trainable region, at the buffer's start
  for (std::size_t index = 0; index < parked.size(); ++index) into[index] += parked[index];
  found->second.tracker->release(MemoryCategory::activations, found->second.tracked_bytes);
  parked_weight_gradients_.erase(found);
}

}  // namespace shardplan::runner
