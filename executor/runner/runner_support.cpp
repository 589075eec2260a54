// check_executable: the plan features the CPU runner supports, rejected up front with the unit and the reason.
#include "runner_support.h"

#include <source_location>
#include <string>

#include "errors.h"
#include "simulator.h"

namespace shardplan::runner {

namespace {

[[noreturn]] void reject(const std::string& message, const ExecutorSupport& support, int rank) {
  throw InputError("plan: " + message + " (the " + support.name + " executor cannot run it)",
                   std::source_location::current(), rank);
}

bool same_bytes(const PrecisionRecipe& a, const PrecisionRecipe& b) {
  return a.param_storage_bytes == b.param_storage_bytes && a.param_compute_bytes == b.param_compute_bytes &&
         a.grad_compute_bytes == b.grad_compute_bytes && a.reduce_bytes == b.reduce_bytes &&
         a.grad_storage_bytes == b.grad_storage_bytes && a.master_weight_bytes == b.master_weight_bytes &&
         a.optimizer_state_bytes == b.optimizer_state_bytes;
}

}  // namespace

void check_finetune_supported(const Plan& plan, int rank, const ExecutorSupport& support) {
  const FinetuneConfig& finetune = plan.training.finetune;
  if (finetune.trains_all()) return;
  const std::string mode = std::string("fine-tuning '") + to_string(finetune.mode) + "'";
  if (!support.finetune) {
    reject(mode + " (frozen parameters, LoRA adapters or 4-bit weights) is planned, simulated and exported, not yet "
                  "executed here; run it on CPU ranks (--device cpu)",
           support, rank);
  }
  if (finetune.mode == FinetuneMode::qlora) {
    reject(mode + ": 4-bit base weights are not executed; plan --finetune lora (the same adapters over fp32 base "
                  "weights) to run it",
           support, rank);
  }
  if (finetune.uses_lora() && finetune.lora.dropout != 0.0) {
    reject(mode + ": lora_dropout " + std::to_string(finetune.lora.dropout) + " (the runtime implements no "
                  "dropout); plan --lora-dropout 0 to run it",
           support, rank);
  }
  // Note [Frozen parameters in FSDP] (planner/unit_layout.h): FSDP1 with use_orig_params=True gives a unit that mixes
  // frozen and trainable parameters one gradient over all of it; the runner's shards keep gradients on trainable
  // parameters only (Note [Frozen shards] in flat_param.h).
  if (finetune.fsdp.version == 1 && finetune.fsdp.use_orig_params) {
    reject(mode + " under FSDP1 with use_orig_params=True (full-size gradients over frozen parameters) is not yet "
                  "executed; plan --fsdp-version 2, or FSDP1 with --use-orig-params false",
           support, rank);
  }
}

void check_no_expert_parallel(const Plan& plan, int rank, const ExecutorSupport& support) {
  // Note [Expert parallelism] (planner/unit_layout.h): planned, simulated and exported; no runner has all-to-all yet.
  if (plan.training.expert_parallel_degree > 1) {
    reject("expert parallelism (expert_parallel_degree " + std::to_string(plan.training.expert_parallel_degree) +
               ") is planned and simulated, not yet executed; plan it with --expert-parallel 1",
           support, rank);
  }
}

void check_not_compiled(const Plan& plan, int rank, const ExecutorSupport& support) {
  // Refused rather than run eager: `run` compares what it measures with the plan's prediction, and a compiled plan's
  // prediction keeps less per block than eager kernels do (Note [Compiled blocks] in costmodel/compiled_block.h).
  // Neither runner can compile anything (layer kernels are Eigen on CPU, cuBLAS/CUDA on GPU).
  if (plan.training.torch_compile) {
    reject("training.torch_compile is set (planned with --compile), but the runners execute eager kernels and the "
               "prediction a run is compared with must be eager too; re-plan without --compile to run it",
           support, rank);
  }
}

void check_executable(const Plan& plan, const std::vector<UnitLayout>& layouts, int rank,
                      const ExecutorSupport& support) {
  check_finetune_supported(plan, rank, support);
  check_no_expert_parallel(plan, rank, support);
  check_not_compiled(plan, rank, support);
  if (plan.context_parallel.enabled()) {  // Note [Context-parallel runner]: what the CPU runner's ring runs
    const std::string cp = "context_parallel_degree " + std::to_string(plan.context_parallel.degree);
    if (!support.context_parallel) {
      reject(cp + " (ring attention) is planned, simulated and exported, not yet executed here; run it on CPU ranks "
                  "(--device cpu)", support, rank);
    }
  }
  const PrecisionRecipe& precision = plan.training.precision;
  if (precision.uses_fp8()) {
    reject("precision '" + precision.name + "' (float8 GEMMs and all-gathers) is planned, simulated and exported, not "
               "yet executed",
           support, rank);
  }
  bool supported = false;
  std::string names;
  for (const std::string& name : support.precisions) {
    supported = supported || same_bytes(precision, precision_recipe(name));
    names += (names.empty() ? "" : " or ") + name;
  }
  if (!supported) reject("precision '" + precision.name + "' is not supported; use --precision " + names, support, rank);
  if (plan.training.optimizer != OptimizerKind::adamw) {
    reject(std::string("optimizer '") + to_string(plan.training.optimizer) + "' is not adamw", support, rank);
  }
  if (plan.training.loss != LossKind::cross_entropy) {  // Note [Fine-tuning losses]: the runtimes' loss is plain
    reject(std::string("loss '") + to_string(plan.training.loss) + "' is not cross-entropy", support, rank);
  }
  if (plan.training.activation_offload) {  // Note [Activation offloading]: the runtimes keep activations on device
    reject("activation_offload is set", support, rank);
  }
  if (plan.training.optimizer_in_backward) {  // Note [Optimizer in backward]: the runtimes step after backward
    reject("optimizer_in_backward is set", support, rank);
  }
  if (plan.offload.params || plan.offload.optimizer) reject("CPU offload is set", support, rank);
  if (plan.tensor_parallel_degree > 1 && !support.tensor_parallel) {
    reject("tensor_parallel_degree " + std::to_string(plan.tensor_parallel_degree) +
               ": tensor parallelism is not yet supported; run it on CPU ranks (--device cpu) or plan "
               "tensor_parallel_degree 1",
           support, rank);
  }
  for (std::size_t id = 0; id < plan.units.size(); ++id) {
    const std::string unit = "unit " + std::to_string(id) + " ('" + plan.units[id].name + "')";
    if (plan.units[id].reshard_after_forward.keeps_partial_copy()) {
      reject(unit + " reshards after forward to a smaller group", support, rank);
    }
    const UnitLayout& layout = layouts[id];
    if (layout.param_group != layout.grad_group || layout.grad_group != layout.optimizer_group) {
      reject(unit + " shards parameters, gradients and optimizer states over different groups (ZeRO-1/2)", support, rank);
    }
  }
  // torchtitan's selective-op policy is a PyTorch checkpoint context (exports apply it); the runtime's layer kernels
  // keep or drop a block's activations whole (Note [Kernel driver]).
  for (std::size_t layer = 0; layer < plan.layer_checkpointing.size(); ++layer) {
    if (plan.layer_checkpointing[layer] == ActivationCheckpointing::selective_op) {
      reject("layer " + std::to_string(layer) +
                 " uses selective-op checkpointing; plan it with --ac full or none to run it",
             support, rank);
    }
  }
}

void check_step_batches(const StepSchedule& schedule, std::span<const runtime::Batch> micro_batches, int rank,
                        int context_parallel) {
  const std::int64_t seq_len = schedule.seq_len * context_parallel;
  if (static_cast<int>(micro_batches.size()) != schedule.micro_batches) {
    throw InputError("step: " + std::to_string(micro_batches.size()) + " micro-batches given, the schedule has " +
                         std::to_string(schedule.micro_batches),
                     std::source_location::current(), rank);
  }
  for (const auto& batch : micro_batches) {
    if (batch.micro_batch != schedule.sequences_per_micro_batch || batch.seq_len != seq_len) {
      throw InputError("step: a batch of " + std::to_string(batch.micro_batch) + "×" + std::to_string(batch.seq_len) +
                           ", the plan trains on " + std::to_string(schedule.sequences_per_micro_batch) + "×" +
                           std::to_string(seq_len),
                       std::source_location::current(), rank);
    }
  }
}

TimelineEvent measured_event(const Op& op, const StepSchedule& schedule, int rank) {
  return timeline_event(op, schedule, rank);
}

}  // namespace shardplan::runner
