// Note [Communication floor], Note [Gathers before reductions] and Note [Step floor] (communication_floor.h): the
// busiest communication stream of the whole model as one unit, and the step floor the search prunes knob settings
// with.
#include "communication_floor.h"

#include <algorithm>
#include <array>
#include <set>
#include <vector>

#include "lowering.h"
#include "op_placement.h"

namespace shardplan {

namespace {

// Ops counted once per unit and step: a unit resharded after forward repeats them in backward, a kept one does not.
bool once_per_unit(OpKind kind) { return kind == OpKind::all_gather || kind == OpKind::host_to_device; }

}  // namespace

bool runs_per_micro_batch(StreamKind stream) {
  return stream == StreamKind::all_to_all || stream == StreamKind::p2p;
}

CommunicationFloor communication_floor(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                                       const TrainingConfig& training, const KnobSetting& knobs) {
  const Plan per_block = plan_for_knobs(model, cluster, training, knobs);
  std::vector<std::size_t> every_layer(model.layers.size());
  for (std::size_t layer = 0; layer < every_layer.size(); ++layer) every_layer[layer] = layer;
  // Note [Uniform requires_grad] (plan.h): a front end that cannot put frozen and trainable parameters in one unit
  // has no whole-model unit; its settings keep the compute floor alone (no communication floor is claimed).
  if (training.finetune.fsdp.uniform_requires_grad() && mixes_requires_grad(model, every_layer)) return {};
  Plan whole = plan_with_units(model, per_block, wrap_whole(model).units);
  whole.grad_accumulation_steps = 1;  // one micro-batch: it synchronises, so its reductions are the step's
  LoweringOptions lowering;
  lowering.world_size = cluster.world_size();
  lowering.gpus_per_node = cluster.gpus_per_node;
  lowering.flatten_memory_effects = false;  // read op by op, never simulated
  const StepSchedule schedule = lower_plan(whole, model, lowering);
  std::set<std::pair<OpKind, int>> counted;  // (kind, unit) of the once-per-unit ops seen
  CommunicationFloor floor;
  floor.compute_element_bytes = schedule.compute_element_bytes;
  floor.micro_batches = std::max(1, per_block.grad_accumulation_steps);
  // The one micro-batch lowered synchronises: its reductions repeat on every synchronising micro-batch of the step.
  const int synchronising = training.no_sync_accumulation ? 1 : floor.micro_batches;
  const bool partial_copies = std::any_of(per_block.units.begin(), per_block.units.end(), [](const PlanUnit& unit) {
    return unit.reshard_after_forward.keeps_partial_copy();
  });
  for (const Op& op : schedule.ops) {
    if (op.stream == StreamKind::compute) {
      if (op.kind == OpKind::optimizer_step) {
        floor.optimizer_step_s += base_duration_s(op, schedule.compute_element_bytes, profile);
      }
      continue;
    }
    if (runs_per_micro_batch(op.stream)) continue;
    if (once_per_unit(op.kind) && !counted.insert({op.kind, op.unit}).second) continue;
    if (op.kind == OpKind::all_gather && !partial_copies && floor.whole_gather.bytes == 0) floor.whole_gather = op;
    const double op_s = base_duration_s(op, schedule.compute_element_bytes, profile);
    if (op.stream == StreamKind::all_gather) floor.first_micro_batch_gather_s += op_s;
    // Gathers and shard copies-in repeat every micro-batch; the reduction streams' ops (and whatever else a stream
    // carries there, e.g. activation copies) on the synchronising ones at least.
    const bool gathers = op.stream == StreamKind::all_gather || op.stream == StreamKind::host_to_device;
    floor.step_stream_s[static_cast<std::size_t>(op.stream)] += op_s * (gathers ? floor.micro_batches : synchronising);
  }
  return floor;
}

double busiest_stream_floor_s(const CommunicationFloor& communication, const SettingFloors& floors,
                              std::int64_t keepable_bytes, const HardwareProfile& profile) {
  std::array<double, kStreamCount> stream_s = communication.step_stream_s;
  // Note [Regather floor]
  if (keepable_bytes >= 0 && communication.whole_gather.bytes > keepable_bytes) {
    Op regather = communication.whole_gather;
    regather.bytes -= keepable_bytes;
    stream_s[static_cast<std::size_t>(StreamKind::all_gather)] +=
        communication.micro_batches * base_duration_s(regather, communication.compute_element_bytes, profile);
  }
  double busiest_s = 0;
  for (std::size_t stream = 0; stream < kStreamCount; ++stream) {
    busiest_s = std::max(busiest_s, stream_s[stream] + floors.micro_batch_stream_s[stream]);
  }
  return busiest_s;
}

double gathers_then_reductions_s(const CommunicationFloor& communication, const SettingFloors& floors) {
  const auto busy_s = [&](StreamKind stream) {
    const auto at = static_cast<std::size_t>(stream);
    return communication.step_stream_s[at] + floors.micro_batch_stream_s[at];
  };
  return communication.first_micro_batch_gather_s +
         std::max(busy_s(StreamKind::reduce_scatter), busy_s(StreamKind::all_reduce));
}

double communication_busy_floor_s(const CommunicationFloor& communication, const SettingFloors& floors,
                                  std::int64_t keepable_bytes, const HardwareProfile& profile) {
  return std::max(busiest_stream_floor_s(communication, floors, keepable_bytes, profile),
                  gathers_then_reductions_s(communication, floors));
}

double least_overlap_compute_slowdown(const HardwareProfile& profile) { return profile.overlap_compute_slowdown; }

double step_floor_s(const SettingFloors& floors, double communication_busy_s, double optimizer_step_s,
                    double least_slowdown) {
  return step_floor_s(floors.kernels_s, floors.dispatch_s + optimizer_step_s, communication_busy_s, least_slowdown);
}

double setting_step_floor_s(const SettingFloors& floors, const CommunicationFloor& communication,
                            std::int64_t keepable_bytes, const HardwareProfile& profile) {
  return step_floor_s(floors, communication_busy_floor_s(communication, floors, keepable_bytes, profile),
                      communication.optimizer_step_s, least_overlap_compute_slowdown(profile));
}

double step_floor_s(double kernels_s, double dispatch_s, double communication_busy_s, double least_slowdown) {
  if (least_slowdown < 1.0) return std::max(communication_busy_s, least_slowdown * kernels_s + dispatch_s);
  const double stretched_s = (1.0 - 1.0 / least_slowdown) * std::max(0.0, communication_busy_s - dispatch_s);
  return std::max(communication_busy_s, kernels_s + dispatch_s + stretched_s);
}

}  // namespace shardplan
