// Note [Compute floor] and Note [Activation floor]: the lower bounds of a knob setting's step time and peak memory
// that the plan search orders settings by and prunes with (search.cpp), from one small lowering.
#include <algorithm>
#include <array>
#include <span>

#include "communication_floor.h"
#include "compute_cost.h"
#include "lowering.h"
#include "op_placement.h"
#include "search.h"
#include "unit_layout.h"

namespace shardplan {

// Note [Compute floor]: a lower bound of the step time of every plan of a knob setting, whatever its wrapping, kept
// units or prefetch depth: the compute stream runs one op at a time, so a step lasts at least the sum of its forward,
// recompute and backward kernels (pass_time_s, the simulator's own cost of them, without the gradient buffer fills),
// times the overlap slowdown where that is below 1 (a calibrated profile may fit one). Those kernels depend on the
// layer, its checkpointing and the micro-batch only, not on the units, and every micro-batch runs the same ones: one
// micro-batch is lowered and its sum multiplied by the accumulation steps, so the bound costs one small lowering even
// where a step has hundreds of micro-batches. Each of those ops also costs the host's dispatch overhead
// (HardwareProfile::op_dispatch_overhead_s, added per op that does work as OpWalk::place adds it; on a calibrated CPU
// profile it is most of a small model's step, and without it the floor pruned almost nothing there). The optimizer
// step (its shard depends on the wrapping's padding) and everything on other streams are left out, which only lowers
// the bound.
//
// Note [Activation floor]: a lower bound of the allocated peak of every plan of a knob setting, less its persistent
// memory: the most activation bytes the compute stream's forward, recompute and backward ops hold at once in one
// micro-batch. Those ops allocate and free activations by layer, checkpointing and micro-batch alone, in the same
// order for every wrapping (one stream runs them one at a time, Note [Schedule order]); every other allocation a plan
// makes (gathered parameters, gradients, buffers) only adds to what is live beside them, and the caching allocator's
// reserved bytes are never below the allocated ones. So the states floor (states_floor_layout's persistent memory)
// plus this is at most any wrapping's device peak, and a setting whose sum exceeds the cap has no plan that fits
// (the search skips it as it skips settings whose states alone exceed it). Activations allocated by other ops are
// left out (a lower bound still); if an op off the compute stream freed activations the compute ops allocated, the
// walk could not see them go, so the floor is 0 there. The same walk gives the activations live where the
// micro-batch's first backward-side op starts (SettingFloors::turnaround_activation_bytes): what forward saved, live
// beside every unit kept gathered (Note [Regather floor] in communication_floor.h).
MicroBatchFloors micro_batch_floors(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                                    const TrainingConfig& training, const KnobSetting& knobs, int context_parallel) {
  Plan one_micro_batch = plan_for_knobs(model, cluster, training, knobs);
  const int accumulation = one_micro_batch.grad_accumulation_steps;
  one_micro_batch.grad_accumulation_steps = 1;
  if (context_parallel > 1) {
    // The whole sequence back, lowered as one CP rank's program (lower_plan: context_parallel_rank_plan + the ring).
    one_micro_batch.training.seq_len = training.seq_len * context_parallel;
    one_micro_batch.training.global_batch = 0;
    one_micro_batch.context_parallel.degree = context_parallel;
  }
  LoweringOptions lowering;
  lowering.world_size = cluster.world_size();
  lowering.gpus_per_node = cluster.gpus_per_node;
  lowering.flatten_memory_effects = false;  // read op by op below, never simulated
  const StepSchedule schedule = lower_plan(one_micro_batch, model, lowering);
  const auto activation_bytes = [](std::span<const MemoryChange> changes) {
    std::int64_t bytes = 0;
    for (const MemoryChange& change : changes) {
      if (change.category == MemoryCategory::activations) bytes += change.bytes;
    }
    return bytes;
  };
  double kernels_s = 0;
  std::size_t dispatched_ops = 0;
  const double slowdown = std::min(1.0, profile.overlap_compute_slowdown);
  std::vector<double> layer_compute_s(model.layers.size(), 0.0), layer_forward_s(model.layers.size(), 0.0);
  std::vector<double> layer_dispatch_s(model.layers.size(), 0.0);
  std::vector<std::array<double, kStreamCount>> layer_stream_s(model.layers.size());
  std::vector<std::int64_t> layer_held_bytes(model.layers.size(), 0);
  std::int64_t live_bytes = 0, peak_bytes = 0, turnaround_bytes = -1;
  bool freed_elsewhere = false;
  std::array<double, kStreamCount> floors_stream_s{};
  for (const Op& op : schedule.ops) {
    const bool pass = op.stream == StreamKind::compute && is_layer_pass(op.kind);
    if (runs_per_micro_batch(op.stream)) {
      const double op_s = base_duration_s(op, schedule.compute_element_bytes, profile);
      floors_stream_s[static_cast<std::size_t>(op.stream)] += op_s;
      if (op.layer >= 0 && static_cast<std::size_t>(op.layer) < layer_stream_s.size()) {
        layer_stream_s[static_cast<std::size_t>(op.layer)][static_cast<std::size_t>(op.stream)] += op_s;
      }
    }
    if (!pass) {
      freed_elsewhere = freed_elsewhere || activation_bytes(op.frees) > 0 || activation_bytes(op.frees_at_start) > 0;
      continue;
    }
    const double op_kernels_s = op.kernels ? pass_time_s(*op.kernels, schedule.compute_element_bytes, profile) : 0.0;
    kernels_s += op_kernels_s;
    if (does_compute_work(op.kind)) ++dispatched_ops;
    if (op.layer >= 0 && static_cast<std::size_t>(op.layer) < layer_compute_s.size()) {
      const auto layer = static_cast<std::size_t>(op.layer);
      const double dispatch_s = does_compute_work(op.kind) ? profile.op_dispatch_overhead_s : 0.0;
      const double op_floor_s = op_kernels_s * slowdown + dispatch_s;
      layer_compute_s[layer] += op_floor_s;
      layer_dispatch_s[layer] += dispatch_s;
      if (op.kind == OpKind::forward) layer_forward_s[layer] += op_floor_s;
      if (op.kind != OpKind::forward) {
        layer_held_bytes[layer] +=
            activation_bytes(op.frees) + activation_bytes(op.frees_at_start) - activation_bytes(op.allocates);
      }
    }
    live_bytes -= activation_bytes(op.frees_at_start);
    if (op.kind != OpKind::forward && turnaround_bytes < 0) turnaround_bytes = live_bytes;  // the first backward op
    live_bytes += activation_bytes(op.allocates);
    peak_bytes = std::max(peak_bytes, live_bytes);
    live_bytes -= activation_bytes(op.frees);
  }
  MicroBatchFloors one;
  SettingFloors& floors = one.floors;
  floors.kernels_s = kernels_s;
  floors.dispatch_s = static_cast<double>(dispatched_ops) * profile.op_dispatch_overhead_s;
  floors.compute_s = kernels_s * slowdown + floors.dispatch_s;
  floors.micro_batch_stream_s = floors_stream_s;
  floors.activation_peak_bytes = freed_elsewhere ? 0 : peak_bytes;
  floors.turnaround_activation_bytes = freed_elsewhere ? 0 : std::max<std::int64_t>(0, turnaround_bytes);
  floors.layer_compute_s = std::move(layer_compute_s);
  floors.layer_forward_s = std::move(layer_forward_s);
  floors.layer_dispatch_s = std::move(layer_dispatch_s);
  floors.layer_stream_s = std::move(layer_stream_s);
  if (freed_elsewhere) std::fill(layer_held_bytes.begin(), layer_held_bytes.end(), 0);  // as the activation floor
  floors.layer_held_activation_bytes = std::move(layer_held_bytes);
  one.accumulation_steps = accumulation;
  return one;
}

void scale_to_micro_batches(SettingFloors& floors, int micro_batches) {
  const auto count = static_cast<double>(micro_batches);
  floors.compute_s *= count;
  floors.kernels_s *= count;
  floors.dispatch_s *= count;
  for (double& stream_s : floors.micro_batch_stream_s) stream_s *= count;
}

SettingFloors setting_floors(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                             const TrainingConfig& training, const KnobSetting& knobs) {
  MicroBatchFloors one = micro_batch_floors(model, cluster, profile, training, knobs);
  scale_to_micro_batches(one.floors, one.accumulation_steps);  // every micro-batch runs the same kernels
  return std::move(one.floors);
}

std::int64_t states_floor_bytes(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                                const TrainingConfig& training, const KnobSetting& knobs) {
  const UnitLayout layout =
      states_floor_layout(knobs.strategy, model, training, cluster.world_size(), cluster.gpus_per_node);
  Plan states_only;
  states_only.training = training;
  states_only.offload.params = knobs.offload;
  const MemoryByCategory persistent = persistent_memory({layout}, states_only, profile.context_overhead_bytes);
  std::int64_t bytes = 0;
  for (const std::int64_t category_bytes : persistent) bytes += category_bytes;
  return bytes;
}

double compute_floor_s(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                       const TrainingConfig& training, const KnobSetting& knobs) {
  return setting_floors(model, cluster, profile, training, knobs).compute_s;
}

}  // namespace shardplan
