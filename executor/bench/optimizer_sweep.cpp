// The AdamW sweep: runtime::adamw_step over fp32 shards, timed and turned into bytes-moved samples.
#include "optimizer_sweep.h"

#include <string>

#include "adamw.h"
#include "precision.h"

namespace shardplan::bench {

std::vector<KernelRow> run_optimizer_sweep(const OptimizerSweepOptions& options, comm::Communicator& world,
                                           const std::function<void(const KernelRow&)>& on_row) {
  const PrecisionRecipe fp32 = precision_recipe("fp32");
  // compute_cost.cpp, optimizer_step_time_s: a fused optimizer reads and writes the parameter, reads the gradient,
  // reads and writes the master copy and states (ZeRO's K bytes) — 2·4 + 4 + 2·8 = 28 bytes per fp32 AdamW element.
  const double bytes_per_element = 2.0 * fp32.param_storage_bytes + fp32.grad_storage_bytes +
                                   2.0 * optimizer_bytes_per_param(fp32, OptimizerKind::adamw);
  std::vector<KernelRow> rows;
  for (std::int64_t elements : options.shard_elements) {
    const auto count = static_cast<std::size_t>(elements);
    std::vector<float> params(count, 0.01f), grads(count, 0.001f), exp_avg(count, 0.0f), exp_avg_sq(count, 0.0f);
    std::int64_t step = 0;
    const double time_s = time_iterations_s(world, options.timing, [&] {
      runtime::adamw_step(params, grads, exp_avg, exp_avg_sq, ++step, runtime::AdamWOptions{});
    });
    rows.push_back({"adamw step", KernelClass::memory, elements, 0, bytes_per_element * static_cast<double>(elements),
                    time_s});
    if (on_row) on_row(rows.back());
  }
  return rows;
}

}  // namespace shardplan::bench
