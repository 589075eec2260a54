// What each export format can express (TP and EP degrees), the search restricted to it, and the exporters' check.
#include <string>

#include "errors.h"
#include "plan_export.h"

namespace shardplan {

// Note [Export constrains the search]: a script is only worth the plan it runs, so `plan --export F` searches only
// plans F can write, and never prints one plan and writes another (issue 31, item 2). Per format:
// - tensor parallelism: only the FSDP2 export writes it (parallelize_module on the "tp" slice of its one root mesh,
//   Note [Exported tensor parallelism] in export_tensor_parallel.cpp), and only where its Llama plan names real nn.Linear
//   modules: a llama-family model (MoE models take no TP at all: validate_plan), trained without LoRA adapters
//   (PEFT's lora.Linear is not an nn.Linear, and ColwiseParallel/RowwiseParallel refuse anything else:
//   "ColwiseParallel currently only support nn.Linear and nn.Embedding!", torch/distributed/tensor/parallel/style.py).
//   FSDP1 and a DeepSpeed ZeRO config have no TP (export_fsdp1.cpp, export_deepspeed.cpp). The torchtitan export
//   writes it as [parallelism] tensor_parallel_degree, under the same conditions: torchtitan's apply_tp is the same
//   Llama plan (torchtitan/models/llama3/infra/parallelize.py), and it trains no adapters.
// - expert parallelism: no export writes it yet. FSDP2 alone on an MoE model gathers every expert on every rank, so a
//   script for an EP plan would run out of the memory the plan was sized for (mixtral-8x7b on 2x8 H100: 79.4 GiB
//   planned with EP 8, 86.3 GiB for FSDP alone by the same estimate). Every format therefore searches EP 1 only.
// - pipeline parallelism (a plan's pipeline, Note [Pipeline policy]): only the torchtitan export writes it
//   ([parallelism] pipeline_parallel_*, Note [Exported pipeline] in export_torchtitan.cpp). The FSDP2 and FSDP1
//   scripts do not build torch.distributed.pipelining stages yet, and the DeepSpeed ZeRO config has no pipeline
//   (DeepSpeed's PipelineModule is not written), so those exports refuse a pipeline plan; `plan` searches none yet.
// - CPU offload: the plan's offload moves parameter shards to the host, which DeepSpeed does at ZeRO stage 3 only
//   (offload_param; stages 1 and 2 offload the optimizer alone), so `--export deepspeed` searches offload with
//   stage-3 strategies alone (restrict_offload_to_export in export_deepspeed.cpp).
// The exporters check the same table (check_export_support), so a library caller handing them a plan the format
// cannot express gets the same one-line InputError.
ExportSupport export_support(const std::string& format, const ModelSpec& model, const TrainingConfig& training) {
  ExportSupport support;
  support.expert_parallel_why = "no export writes expert parallelism yet (each would shard the experts with FSDP "
                                "alone, gathering every expert on every rank)";
  if (format != "fsdp2" && format != "torchtitan") {
    support.tensor_parallel_why = format == "fsdp1" ? "FSDP1 has no tensor parallelism in this export"
                                                    : "a DeepSpeed ZeRO config has no tensor parallelism";
    return support;
  }
  const bool llama = model.architecture && model.architecture->family == DecoderArchitecture::Family::llama;
  const bool adapters = training.finetune.mode == FinetuneMode::lora || training.finetune.mode == FinetuneMode::qlora;
  if (!llama) {
    support.tensor_parallel_why = "its TP plan names Llama's nn.Linear modules, and this is not a llama-family model";
  } else if (adapters) {
    support.tensor_parallel_why = "LoRA's wrapped projections are not the nn.Linear modules ColwiseParallel shards";
  } else {
    support.tensor_parallel = true;
  }
  return support;
}

void restrict_search_to_export(const std::string& format, const ModelSpec& model, const TrainingConfig& training,
                               bool tensor_parallel_pinned, std::vector<int>& tensor_parallel_degrees,
                               std::vector<int>& expert_parallel_degrees) {
  const ExportSupport support = export_support(format, model, training);
  const int pinned_tp = tensor_parallel_pinned && !tensor_parallel_degrees.empty() ? tensor_parallel_degrees.front() : 1;
  if (!support.tensor_parallel && pinned_tp > 1) {
    throw InputError("--tensor-parallel " + std::to_string(pinned_tp) + " with --export " + format + ": " +
                     support.tensor_parallel_why + " (expected --tensor-parallel 1, or --export fsdp2)");
  }
  if (training.expert_parallel_degree > 1 && !support.expert_parallel) {
    throw InputError("--expert-parallel " + std::to_string(training.expert_parallel_degree) + " with --export " +
                     format + ": " + support.expert_parallel_why + " (expected --expert-parallel 1)");
  }
  if (!support.tensor_parallel) tensor_parallel_degrees = {1};
  if (!support.expert_parallel) expert_parallel_degrees = {1};
}

void check_export_support(const std::string& format, const Plan& plan, const ModelSpec& model) {
  const ExportSupport support = export_support(format, model, plan.training);
  if (plan.tensor_parallel_degree > 1 && !support.tensor_parallel) {
    throw InputError("--export " + format + ": the plan has tensor_parallel_degree " +
                     std::to_string(plan.tensor_parallel_degree) + ", but " + support.tensor_parallel_why +
                     (format == "fsdp2" ? "" : " (expected --export fsdp2 for a 2-D TP x FSDP plan)"));
  }
  if (plan.pipeline.enabled() && format != "torchtitan") {
    const std::string script = format == "fsdp1" ? "FSDP1" : "FSDP2";
    const std::string why = format == "deepspeed"
                                ? "this DeepSpeed ZeRO config has no pipeline stages"
                                : "the " + script + " script does not build torch.distributed.pipelining stages yet";
    throw InputError("--export " + format + ": the plan has a pipeline (pipeline_parallel_degree " +
                     std::to_string(plan.pipeline.degree) + "), but " + why + " (expected --export torchtitan)");
  }
  if (plan.context_parallel.enabled() && format != "torchtitan") {
    throw InputError("--export " + format + ": the plan has context_parallel_degree " +
                     std::to_string(plan.context_parallel.degree) + ", but the " + format +
                     " output does not shard sequences with torch's context_parallel yet (expected --export "
                     "torchtitan)");
  }
  if (plan.training.expert_parallel_degree > 1 && !support.expert_parallel) {
    throw InputError("--export " + format + ": the plan has expert_parallel_degree " +
                     std::to_string(plan.training.expert_parallel_degree) + ", but " + support.expert_parallel_why +
                     " (expected a plan made with --expert-parallel 1, e.g. by `plan --export " + format + "`)");
  }
}

}  // namespace shardplan
