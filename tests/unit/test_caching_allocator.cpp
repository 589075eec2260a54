// Tests of the caching allocator's size-class model (Note [Allocator size classes]): the pool by hand, a schedule's
// reserved peak by hand, and the largest tensor per token of real layers.
#include <doctest/doctest.h>

#include "caching_allocator.h"
#include "errors.h"
#include "model_presets.h"
#include "schedule_fixtures.h"
#include "simulator.h"
#include "tensor_parallel.h"

using namespace shardplan;
using namespace shardplan::testing;

namespace {

constexpr std::int64_t GiB = std::int64_t{1} << 30;

// Two layers' forward and backward on the compute stream, 1 ms each: a block (6 GiB with a 4 GiB workspace freed at
// its end), then the loss (10 GiB, 3 of them workspace), the loss's backward (2 GiB in, 9 out), the block's (5 in,
// 7 out). Allocated peaks at 12 GiB (the block's 2 kept + the loss's 10).
StepSchedule two_layer_schedule(std::vector<std::int64_t> activation_tensor_bytes) {
  StepSchedule schedule;
  const auto add = [&](OpKind kind, int layer, std::int64_t in_gib, std::int64_t out_gib) {
    Op op;
    op.id = static_cast<int>(schedule.ops.size());
    op.kind = kind;
    op.stream = StreamKind::compute;
    op.layer = layer;
    if (op.id > 0) op.deps = {op.id - 1};
    op.allocates = {{MemoryCategory::activations, in_gib * GiB}};
    op.frees = {{MemoryCategory::activations, out_gib * GiB}};
    schedule.ops.push_back(op);
  };
  add(OpKind::forward, 0, 6, 4);
  add(OpKind::forward, 1, 10, 3);
  add(OpKind::backward, 1, 2, 9);
  add(OpKind::backward, 0, 5, 7);
  schedule.activation_tensor_bytes = std::move(activation_tensor_bytes);
  return schedule;
}

HardwareProfile millisecond_ops() {
  HardwareProfile profile = round_profile();
  profile.op_dispatch_overhead_s = 1e-3;
  return profile;
}

}  // namespace

TEST_CASE("size classes: with one class the pool reserves its allocated peak") {
  SizeClassPool pool;
  pool.allocate(10, 5);
  pool.allocate(5, 5);
  pool.free(10, 5);
  pool.allocate(8, 5);  // fits the freed 10
  CHECK(pool.allocated_bytes() == 13);
  CHECK(pool.reserved_bytes() == 15);
}

TEST_CASE("size classes: a larger tensor cannot use a smaller class's freed bytes; a smaller one uses a larger's") {
  SizeClassPool pool;
  pool.allocate(6, 1);
  pool.free(4, 1);       // 4 free in class 1's segments
  pool.allocate(10, 100);  // the loss's tensors: new segments of their own
  CHECK(pool.reserved_bytes() == 16);
  CHECK(pool.allocated_bytes() == 12);
  pool.free(10, 100);
  pool.allocate(9, 1);  // class 1's 4 free bytes first, then 5 of class 100's
  CHECK(pool.reserved_bytes() == 16);
  pool.free(9, 1);  // back where they were taken from: class 100's 10 are whole again
  pool.allocate(10, 100);
  CHECK(pool.reserved_bytes() == 16);
  CHECK(pool.allocated_bytes() == 12);
  // Class 0 (undescribed tensors) goes anywhere free; what lacks grows a region of its own.
  pool.allocate(5, 0);
  CHECK(pool.reserved_bytes() == 17);
  CHECK(pool.allocated_bytes() == 17);
  CHECK_THROWS_AS(pool.free(6, 0), InternalError);
}

TEST_CASE("simulator: the loss's larger tensors reserve on top of the block's freed workspace") {
  // Uniform classes: reserved is the allocated peak.
  const SimulationSummary uniform = simulate(two_layer_schedule({GiB, GiB}), millisecond_ops()).summary;
  CHECK(uniform.peak_memory_bytes == 12 * GiB);
  CHECK(uniform.reserved_peak_bytes == 12 * GiB);
  // The loss's tensors (4 GiB) are larger than the block's (1 GiB): the block's 4 freed GiB stay reserved under them,
  // 6 + 10; the block's backward then fits in what is free (its 4 and the loss's 10).
  const SimulationSummary classed = simulate(two_layer_schedule({GiB, 4 * GiB}), millisecond_ops()).summary;
  CHECK(classed.peak_memory_bytes == 12 * GiB);
  CHECK(classed.reserved_peak_bytes == 16 * GiB);
  CHECK(classed.device_peak_bytes == 16 * GiB);  // no overhead term in this schedule
  // The other way round, the block's tensors larger: the block's free 4 hold part of the loss's 10 (6 new), but the
  // loss's segments cannot hold the block's backward — it finds 4 free beside its kept 2 and grows by 1: 7 + 6.
  // A device of 14 GiB: the failed cudaMalloc releases the unused segments and retries, so reserved stays within it;
  // one smaller than the allocated peak leaves the allocated peak.
  HardwareProfile device = millisecond_ops();
  device.device_memory_bytes = 14 * GiB;
  CHECK(simulate(two_layer_schedule({GiB, 4 * GiB}), device).summary.reserved_peak_bytes == 14 * GiB);
  device.device_memory_bytes = 10 * GiB;
  CHECK(simulate(two_layer_schedule({GiB, 4 * GiB}), device).summary.reserved_peak_bytes == 12 * GiB);
  const SimulationSummary reversed = simulate(two_layer_schedule({4 * GiB, GiB}), millisecond_ops()).summary;
  CHECK(reversed.reserved_peak_bytes == 13 * GiB);
}

// llama3-8b: h 4096, f 14336, V 128256. The block's widest GEMM operand is f wide; the head's logits are V wide and
// the loss's upcast is fp32. Under TP 8 the MLP is split (f/8) but q/o keep h; loss parallel splits V.
TEST_CASE("largest tensor per token: GEMM operands, the loss's fp32 logits, materialised scores") {
  const ModelSpec model = preset_model("llama3-8b");
  const LayerSpec& block = model.layers[1];
  const LayerSpec& head = model.layers.back();
  REQUIRE(block.kind == LayerKind::transformer_block);
  REQUIRE(head.kind == LayerKind::lm_head);
  CHECK(block.largest_tensor_bytes_per_token(8192, 2, AttentionActivations::flash) == 14336.0 * 2);
  CHECK(head.largest_tensor_bytes_per_token(8192, 2, AttentionActivations::flash) == 128256.0 * 4);
  CHECK(head.largest_tensor_bytes_per_token(8192, 4, AttentionActivations::flash) == 128256.0 * 4);  // fp32 logits
  // Materialised scores: 32 heads × s positions per token (bf16), in fp32 under eager's softmax(dtype=float32).
  CHECK(block.largest_tensor_bytes_per_token(8192, 2, AttentionActivations::materialised) == 32.0 * 8192 * 2);
  CHECK(block.largest_tensor_bytes_per_token(8192, 2, AttentionActivations::eager_composite) == 32.0 * 8192 * 4);
  const ModelSpec shard = tensor_parallel_shard(model, pytorch_tensor_parallel(8));
  CHECK(shard.layers[1].largest_tensor_bytes_per_token(8192, 2, AttentionActivations::flash) == 4096.0 * 2);
  CHECK(shard.layers.back().largest_tensor_bytes_per_token(8192, 2, AttentionActivations::flash) == 128256.0 / 8 * 4);
}
