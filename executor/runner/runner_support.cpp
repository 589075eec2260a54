// check_executable: the plan features the CPU runner supports, rejected up front with the unit and the reason.
#include "runner_support.h"

#include <source_location>
#include <string>

#include "errors.h"

namespace shardplan::runner {

namespace {

[[noreturn]] void reject(const std::string& message, int rank) {
  throw InputError("plan: " + message + " (the CPU executor cannot run it)", std::source_location::current(), rank);
}

}  // namespace

void check_executable(const Plan& plan, const std::vector<UnitLayout>& layouts, int rank) {
  const PrecisionRecipe& precision = plan.training.precision;
  if (precision.param_storage_bytes != 4 || precision.param_compute_bytes != 4 || precision.grad_compute_bytes != 4 ||
      precision.reduce_bytes != 4 || precision.grad_storage_bytes != 4 || precision.master_weight_bytes != 0) {
    reject("precision '" + precision.name + "' is not fp32; use --precision fp32", rank);
  }
  if (plan.training.optimizer != OptimizerKind::adamw) {
    reject(std::string("optimizer '") + to_string(plan.training.optimizer) + "' is not adamw", rank);
  }
  if (plan.offload.params || plan.offload.optimizer) reject("CPU offload is set", rank);
  for (std::size_t id = 0; id < plan.units.size(); ++id) {
    const std::string unit = "unit " + std::to_string(id) + " ('" + plan.units[id].name + "')";
    if (plan.units[id].reshard_after_forward.keeps_partial_copy()) {
      reject(unit + " reshards after forward to a smaller group", rank);
    }
    const UnitLayout& layout = layouts[id];
    if (layout.param_group != layout.grad_group || layout.grad_group != layout.optimizer_group) {
      reject(unit + " shards parameters, gradients and optimizer states over different groups (ZeRO-1/2)", rank);
    }
  }
}

}  // namespace shardplan::runner
