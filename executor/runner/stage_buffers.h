// StageBuffers: the tensors torch.distributed.pipelining keeps beside the layers during one step, as the CPU runner
// holds them on a pipeline rank (Note [Pipeline buffers] in planner/pipeline_schedule.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "schedule.h"
#include "tracking_allocator.h"

namespace shardplan::runner {

// Per step: each non-last stage's output from the forward that sent it to that micro-batch's backward of the stage's
// last layer (the forward cache), and the last stage's outputs until the step returns them (output_chunks). The
// persistent receive buffers are the Runner's (made once).
class StageBuffers {
 public:
  // `program`: the rank's ops, whose forwards name each stage's first and last layers; `boundary_bytes`: one
  // received tensor's bytes (0 without a pipeline).
  StageBuffers(const std::vector<Op>& program, std::int64_t boundary_bytes);

  // The bytes of `op`'s saved input that its stage's receive buffer already holds: the boundary tensor for the
  // forward or recompute of a receiving stage's first layer, else 0.
  std::int64_t aliased_input_bytes(const Op& op) const;
  // A forward's send: the stage output stays in the forward cache until this micro-batch's backward.
  void keep_stage_output(const Op& send, TrackingAllocator& tracker, std::span<const float> output);
  // A backward of the stage's last layer (the stage backward's first) lets its micro-batch's output go.
  void release_stage_output(const Op& backward);
  // The last stage's output of one micro-batch, `elements` floats, kept until return_outputs.
  void keep_returned_output(TrackingAllocator& tracker, std::int64_t elements);
  // step() returns the kept outputs (the schedule's wait of the head after the rank's last pass).
  void return_outputs() { returned_outputs_.clear(); }
  // Note [Split backward lowering] (planner/lowering_split_backward.cpp): a zero-bubble schedule's input part of a
  // layer computes its weight gradients too (the runtime's kernels compute both at once) into a zeroed buffer of
  // `elements` parked under `key`; the layer's weight part adds them into the unit's gradients `into` (whose first
  // `elements` are the trainable region the input part bound) and frees it. torch keeps the weights' output
  // gradients over that span instead: the tracker holds their bytes, `input_part`'s kept_gradient_bytes.
  std::span<float> park_weight_gradients(std::size_t key, TrackingAllocator& tracker, std::int64_t elements,
                                         const Op& input_part);
  void add_parked_weight_gradients(std::size_t key, std::span<float> into);

 private:
  std::map<int, int> first_layer_of_stage_, last_layer_of_stage_;
  std::int64_t boundary_bytes_ = 0;
  std::map<std::pair<int, int>, TrackedBuffer> stage_outputs_;  // by (stage, micro-batch)
  std::vector<TrackedBuffer> returned_outputs_;
  struct ParkedGradients {
    std::vector<float> values;
    TrackingAllocator* tracker = nullptr;
    std::int64_t tracked_bytes = 0;  // torch's kept output gradients
  };
  std::map<std::size_t, ParkedGradients> parked_weight_gradients_;
};

}  // namespace shardplan::runner
