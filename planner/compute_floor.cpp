// Note [Compute floor]: the lower bound of a knob setting's step time that the plan search orders settings by and
// prunes with (search.cpp).
#include <algorithm>

#include "compute_cost.h"
#include "lowering.h"
#include "search.h"

namespace shardplan {

// Note [Compute floor]: a lower bound of the step time of every plan of a knob setting, whatever its wrapping, kept
// units or prefetch depth: the compute stream runs one op at a time, so a step lasts at least the sum of its forward,
// recompute and backward kernels (pass_time_s, the simulator's own cost of them, without the gradient buffer fills),
// times the overlap slowdown where that is below 1 (a calibrated profile may fit one). Those kernels depend on the
// layer, its checkpointing and the micro-batch only, not on the units, and every micro-batch runs the same ones: one
// micro-batch is lowered and its sum multiplied by the accumulation steps, so the bound costs one small lowering even
// where a step has hundreds of micro-batches. The optimizer step (its shard depends on the wrapping's padding) and
// everything on other streams are left out, which only lowers the bound.
double compute_floor_s(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                       const TrainingConfig& training, const KnobSetting& knobs) {
  Plan one_micro_batch = plan_for_knobs(model, cluster, training, knobs);
  const int accumulation = one_micro_batch.grad_accumulation_steps;
  one_micro_batch.grad_accumulation_steps = 1;
  LoweringOptions lowering;
  lowering.world_size = cluster.world_size();
  lowering.gpus_per_node = cluster.gpus_per_node;
  const StepSchedule schedule = lower_plan(one_micro_batch, model, lowering);
  double kernels_s = 0;
  for (const Op& op : schedule.ops) {
    if (op.stream != StreamKind::compute || !op.kernels) continue;
    if (op.kind != OpKind::forward && op.kind != OpKind::recompute && op.kind != OpKind::backward) continue;
    kernels_s += pass_time_s(*op.kernels, schedule.compute_element_bytes, profile);
  }
  return kernels_s * static_cast<double>(accumulation) * std::min(1.0, profile.overlap_compute_slowdown);
}

}  // namespace shardplan
