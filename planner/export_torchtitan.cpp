// The torchtitan export: the plan as torchtitan's job-config TOML, or the one-line reason torchtitan cannot run it.
#include "export_torchtitan.h"

#include <cstdint>
#include <cstdio>
#include <sstream>
#include <vector>

#include "errors.h"
#include "export_torchtitan_stages.h"

namespace shardplan {

// Note [What torchtitan runs]: the fields and their meanings are torchtitan's job config
// (torchtitan/config/job_config.py at pytorch/torchtitan@e347b1e5e6b6941d789d16d340145294d82dc71e, the last commit
// configured by TOML: #2386 replaced it with Python dataclass registries) and what its Llama trainer does with them
// (torchtitan/models/llama3/infra/parallelize.py parallelize_llama, apply_fsdp; torchtitan/distributed/
// activation_checkpoint.py). What a shardplan plan can say that torchtitan cannot, and is therefore refused rather
// than written without it:
// - a model torchtitan does not define (it trains its own model classes, by [model] name and flavor);
// - reductions in bf16 ([training] mixed_precision_reduce is Literal["float32"]), fp16 (no such dtype), SGD
//   ([optimizer] name: "Adam" or "AdamW", torchtitan/components/optimizer.py);
// - fine-tuning (LoRA, QLoRA, frozen parameters): torchtitan trains every parameter;
// - gradient accumulation without gradient sync (its loop reduce-scatters every micro-batch's backward);
// - attention other than SDPA's flash kernel;
// - strategies FSDP2 has no form for (ZeRO-1, ZeRO-2: parameters replicated, gradients or states sharded), DDP
//   beside tensor parallelism ("DDP has not supported > 1D parallelism", parallelize_llama), optimizer-only offload
//   ([training] enable_cpu_offload offloads parameters, gradients and optimizer states together);
// - wrapping other than torchtitan's (apply_fsdp: one fully_shard per transformer block, then tok_embeddings and
//   [norm, output] as units of their own and the root): multi-block units, per-unit reshard_after_forward, a
//   partial-copy reshard (an integer), explicit prefetch deeper than FSDP2's implicit one unit ahead;
// - checkpointing other than [activation_checkpoint] mode none, full, selective "op" (torchtitan's per-op policy,
//   Note [Selective-op checkpointing]) or selective "k" (full AC on every k-th block, counted from 1:
//   _apply_layer_sac's `_layer_sac_count % ac_freq == 0`); Korthikanti's attention-core recompute has no mode.
// The one difference written down, not refused: shardplan's root unit holds the embedding, final norm and head,
// which torchtitan shards as two more units; the file's header says so.
//
// Note [Exported pipeline]: a pipeline plan (Note [Pipeline policy]) is [parallelism] pipeline_parallel_degree,
// pipeline_parallel_schedule (torch's names, which get_schedule_class reads) and pipeline_parallel_microbatch_size
// (the plan's micro-batch; its grad_accumulation_steps micro-batches make local_batch_size). The stages: torchtitan's
// pipeline_llm (torchtitan/distributed/pipeline_parallel.py) counts ceil((blocks + 2) / layers_per_stage) stages
// when pipeline_parallel_layers_per_stage is set, else 1 per rank for GPipe and 1F1B and 2 for the looped schedules,
// and splits the blocks by generate_llm_fqn_per_model_part with the embedding and head weighing one block each —
// the split default_pipeline gives. So a plan with that split is written with the layers_per_stage that gives its
// stage count, or without it where torchtitan's default count is the plan's; any other split or count (the search's
// balanced split, Note [Balanced stage split] in stage_balance.h) as [parallelism] module_fqns_per_model_part, the
// modules of each stage by name (tok_embeddings, layers.<i>, norm, output), which pipeline_module_split builds the
// stages from whatever the schedule, num_stages being the lists' count. Under a pipeline torchtitan's "default"
// fsdp_reshard_after_forward keeps blocks gathered (apply_fsdp: `not pp_enabled`) — what the pipeline lowering
// simulates (Note [Pipeline programs]: each unit gathered from its stage's first forward to its last backward) — so a
// pipeline plan is written "default": "always" would run all-gathers and memory the simulated step does not have.

namespace {

const char* const kFormat = "torchtitan";
const char* const kAttentionCoreRefusal =
    "activation checkpointing 'selective' (the attention core recomputed) has no torchtitan mode; expected --ac "
    "full, selective-op or none";

[[noreturn]] void refuse(const std::string& why) { throw InputError(std::string("--export torchtitan: ") + why); }

// TOML basic string: quotes, backslashes and control characters escaped (TOML v1.0.0, "Basic strings").
std::string toml_string(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

const char* toml_bool(bool value) { return value ? "true" : "false"; }

// [training] dtype and mixed_precision_param for the plan's precision recipe (Note [What torchtitan runs]).
struct TorchtitanPrecision {
  std::string dtype;
  std::string param;
};

TorchtitanPrecision torchtitan_precision(const PrecisionRecipe& recipe) {
  if (recipe.name == "zero-fp16") refuse("precision 'zero-fp16': torchtitan has no fp16 training");
  if (recipe.reduce_bytes != 4) {
    refuse("precision '" + recipe.name + "' reduces gradients in " + std::to_string(8 * recipe.reduce_bytes) +
           "-bit, but torchtitan reduces in float32 only ([training] mixed_precision_reduce); expected --precision "
           "bf16-mixed-fp32-reduce, fp8-tensorwise, fp8-rowwise or fp32");
  }
  // bf16-mixed-fp32-reduce and the float8 recipes on it: fp32 sharded parameters, bf16 compute; fp32: no casts.
  if (recipe.param_storage_bytes == 4 && recipe.param_compute_bytes == 2) return {"float32", "bfloat16"};
  if (recipe.param_storage_bytes == 4 && recipe.param_compute_bytes == 4) return {"float32", "float32"};
  refuse("precision '" + recipe.name + "' has no torchtitan [training] dtype / mixed_precision_param pair");
}

// Every transformer block's index among the layers, in model order.
std::vector<std::size_t> block_layers(const ModelSpec& model) {
  std::vector<std::size_t> blocks;
  for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
    if (model.layers[layer].kind == LayerKind::transformer_block) blocks.push_back(layer);
  }
  return blocks;
}

// One non-root unit per transformer block, and every block in one (Note [What torchtitan runs]).
void check_wrapping(const Plan& plan, const ModelSpec& model) {
  std::vector<bool> wrapped(model.layers.size(), false);
  for (std::size_t id = 1; id < plan.units.size(); ++id) {
    const PlanUnit& unit = plan.units[id];
    const std::size_t first = unit.layers.begin, count = unit.layers.end - unit.layers.begin;
    if (count != 1 || model.layers[first].kind != LayerKind::transformer_block) {
      refuse("unit " + std::to_string(id) + " ('" + unit.name + "') holds " + std::to_string(count) +
             " layers, but torchtitan wraps exactly one transformer block per FSDP unit");
    }
    wrapped[first] = true;
  }
  for (std::size_t layer : block_layers(model)) {
    if (!wrapped[layer]) {
      refuse("block '" + model.layers[layer].name +
             "' is left in the root unit, but torchtitan wraps every transformer block as an FSDP unit");
    }
  }
  for (std::size_t id = 0; id < plan.units.size(); ++id) {
    const PlanUnit& unit = plan.units[id];
    if (unit.forward_prefetch.size() > 1 || unit.backward_prefetch.size() > 1) {
      refuse("unit " + std::to_string(id) + " ('" + unit.name +
             "') prefetches more than one unit ahead, but torchtitan relies on FSDP2's implicit one-ahead prefetch");
    }
  }
}

// [parallelism] fsdp_reshard_after_forward: one value for every block.
std::string reshard_policy(const Plan& plan, bool strategy_reshards) {
  if (!strategy_reshards) return "never";  // SHARD_GRAD_OP, HYBRID_SHARD_ZERO2: gathered until backward
  bool any_kept = false, any_freed = false;
  for (std::size_t id = 1; id < plan.units.size(); ++id) {
    const ReshardAfterForward& reshard = plan.units[id].reshard_after_forward;
    if (reshard.keeps_partial_copy()) {
      refuse("unit " + std::to_string(id) + " ('" + plan.units[id].name + "') reshards to groups of " +
             std::to_string(reshard.group_size) + " after forward, which torchtitan's fsdp_reshard_after_forward "
             "(default, always or never) cannot say");
    }
    (reshard.enabled ? any_freed : any_kept) = true;
  }
  if (any_kept && any_freed) {
    refuse("some blocks keep their parameters gathered after forward and others do not, but torchtitan applies one "
           "fsdp_reshard_after_forward policy to every block");
  }
  // "default" without pipeline parallelism: blocks reshard, [norm, output] stay gathered (apply_fsdp).
  return any_kept ? "never" : "default";
}

struct TorchtitanCheckpointing {
  std::string mode = "none";
  std::string selective_ac_option;  // "op" or every k-th block; empty unless mode is selective
};

TorchtitanCheckpointing torchtitan_checkpointing(const Plan& plan, const ModelSpec& model) {
  const auto blocks = block_layers(model);
  for (std::size_t layer = 0; layer < model.layers.size() && layer < plan.layer_checkpointing.size(); ++layer) {
    if (model.layers[layer].kind != LayerKind::transformer_block &&
        plan.layer_checkpointing[layer] != ActivationCheckpointing::none) {
      refuse("layer '" + model.layers[layer].name + "' is checkpointed, but torchtitan checkpoints blocks only");
    }
  }
  auto mode_of = [&](std::size_t block) { return plan.layer_checkpointing[blocks[block]]; };
  TorchtitanCheckpointing result;
  if (blocks.empty()) return result;
  bool uniform = true;
  for (std::size_t block = 1; block < blocks.size(); ++block) uniform = uniform && mode_of(block) == mode_of(0);
  if (uniform) {
    switch (mode_of(0)) {
      case ActivationCheckpointing::none: return result;
      case ActivationCheckpointing::full: return {"full", ""};
      case ActivationCheckpointing::selective_op: return {"selective", "op"};
      case ActivationCheckpointing::selective: break;
    }
    refuse(kAttentionCoreRefusal);
  }
  // Full AC on blocks k, 2k, ... (counted from 1), none on the others: selective_ac_option = "k".
  std::size_t every = 0;
  while (every < blocks.size() && mode_of(every) == ActivationCheckpointing::none) ++every;
  every += 1;
  for (std::size_t block = 0; block < blocks.size(); ++block) {
    const auto expected = (block + 1) % every == 0 ? ActivationCheckpointing::full : ActivationCheckpointing::none;
    if (mode_of(block) != expected) {
      refuse("the blocks' activation checkpointing is neither one mode for all nor full on every k-th block, which "
             "is all torchtitan's [activation_checkpoint] can say");
    }
  }
  return {"selective", std::to_string(every)};
}

}  // namespace

TorchtitanModel torchtitan_model(const std::string& preset) {
  // The presets whose shapes torchtitan's flavors have (torchtitan/models/llama3/__init__.py llama3_args: 8B, 70B
  // and 405B are Llama 3.1's shapes, whose hf_assets the llama3 train configs use; torchtitan/models/qwen3/
  // __init__.py qwen3_args).
  static const std::vector<std::pair<std::string, TorchtitanModel>> table = {
      {"llama3-8b", {"llama3", "8B"}},          {"llama3.1-8b", {"llama3", "8B"}},
      {"llama3-70b", {"llama3", "70B"}},        {"llama3.1-70b", {"llama3", "70B"}},
      {"llama3.3-70b", {"llama3", "70B"}},      {"llama3.1-405b", {"llama3", "405B"}},
      {"qwen3-4b", {"qwen3", "4B"}},            {"qwen3-8b", {"qwen3", "8B"}},
      {"qwen3-32b", {"qwen3", "32B"}},
  };
  for (const auto& [name, model] : table) {
    if (name == preset) return model;
  }
  return {};
}

void check_torchtitan_training(const TrainingConfig& training, const ModelSpec& model) {
  if (torchtitan_model(model.name).name.empty()) {
    refuse("model '" + model.name + "' is not one torchtitan defines (it trains its own model classes by [model] "
           "name and flavor; exported: llama3-8b, llama3-70b, llama3.1-405b and their 3.1/3.3 shapes, qwen3-4b, "
           "qwen3-8b, qwen3-32b)");
  }
  (void)torchtitan_precision(training.precision);
  if (training.optimizer != OptimizerKind::adamw) {
    refuse(std::string("optimizer '") + to_string(training.optimizer) + "': torchtitan's are Adam and AdamW");
  }
  if (!training.finetune.trains_all()) {
    refuse("the plan fine-tunes part of the model (LoRA, QLoRA or frozen parameters), but torchtitan trains every "
           "parameter");
  }
  if (training.checkpointing == ActivationCheckpointing::selective) refuse(kAttentionCoreRefusal);
  if (training.no_sync_accumulation) {
    refuse("gradient accumulation without gradient sync (no_sync): torchtitan reduce-scatters every micro-batch");
  }
  if (!training.flash_attention || training.attention_kernel != AttentionKernel::flash) {
    refuse("the plan's attention is not SDPA's flash kernel, which torchtitan's llama attention runs");
  }
}

void restrict_search_to_torchtitan(SearchOptions& options) {
  options.max_unit_blocks = {1};          // one unit per block
  options.joint_prefetch_depth = false;   // FSDP2's implicit prefetch: one unit ahead
  options.refine = false;                 // no per-unit prefetch depth or reshard_after_forward
  options.per_unit_reshard = false;       // one fsdp_reshard_after_forward for every block
  options.pins.whole_model_checkpointing = true;  // [activation_checkpoint] has no "first half of the blocks"
}

ParallelDims torchtitan_degrees(const Plan& plan, int world_size, int gpus_per_node) {
  const ParallelDims plan_dims = parallel_dims(plan, world_size);  // Note [ParallelDims]
  ParallelDegrees degrees;
  degrees.tp = plan_dims.tp();
  degrees.ep = plan_dims.ep();
  degrees.cp = plan_dims.cp();
  degrees.pp = plan_dims.pp();
  const int data_parallel = plan_dims.data_parallel_world_size();
  const int cp = plan_dims.cp();
  const ShardingStrategy strategy = export_detail::uniform_strategy(plan, kFormat);
  // FSDP shards over dp_shard × cp (Note [ParallelDims]): the plan's shard group holds the cp ranks, torchtitan's
  // data_parallel_shard_degree does not.
  const auto shard_without_cp = [&](int shard_group) {
    if (shard_group % cp != 0) {
      refuse("a shard group of " + std::to_string(shard_group) + " ranks that context_parallel_degree " +
             std::to_string(cp) + " does not divide (torchtitan shards over dp_shard x cp)");
    }
    return shard_group / cp;
  };
  switch (strategy.kind) {
    case StrategyKind::full_shard:
    case StrategyKind::zero3:
    case StrategyKind::shard_grad_op:
      degrees.dp_shard = shard_without_cp(data_parallel);
      break;
    case StrategyKind::hybrid_shard:
    case StrategyKind::hybrid_shard_zero2: {
      const ShardingLayout layout =
          resolve_sharding(strategy, data_parallel, plan_dims.data_parallel_gpus_per_node(gpus_per_node));
      degrees.dp_replicate = layout.replicas;
      degrees.dp_shard = shard_without_cp(layout.param_group);
      break;
    }
    case StrategyKind::no_shard:
      if (degrees.tp > 1 || cp > 1) {
        refuse("no_shard (DDP) beside tensor or context parallelism: torchtitan's DDP is 1-D only");
      }
      degrees.dp_replicate = data_parallel;
      break;
    case StrategyKind::zero1:
    case StrategyKind::zero2:
      refuse("strategy " + export_detail::strategy_label(strategy) +
             " keeps whole parameters on every rank and shards only gradients or optimizer states, which FSDP2 and "
             "torchtitan cannot (expected --export deepspeed)");
  }
  return ParallelDims(degrees, world_size, "--export torchtitan");  // validated: the degrees multiply to the world
}

ExportedFile export_torchtitan(const Plan& plan, const ModelSpec& model, int world_size, int gpus_per_node) {
  validate_plan(plan, model, world_size, gpus_per_node);
  check_export_support(kFormat, plan, model);  // Note [Export constrains the search]: no EP yet
  check_export_optimizer_step(kFormat, plan.training);  // Note [Exported optimizer step]: cpu-adamw refused
  check_torchtitan_training(plan.training, model);
  const TorchtitanModel flavor = torchtitan_model(model.name);
  const TorchtitanPrecision precision = torchtitan_precision(plan.training.precision);
  const ParallelDims degrees = torchtitan_degrees(plan, world_size, gpus_per_node);
  check_wrapping(plan, model);
  // Note [Exported pipeline]: "default" keeps a pipeline plan's blocks gathered, as simulated.
  const std::string reshard = reshard_policy(plan, reshards_after_forward(plan.units.front().strategy.kind));
  const bool pipelined = plan.pipeline.enabled();
  const TorchtitanStages stages = pipelined ? torchtitan_stages(plan, model) : TorchtitanStages{};
  if (plan.offload.optimizer && !plan.offload.params) {
    refuse("the plan offloads optimizer states alone, but torchtitan's enable_cpu_offload offloads parameters, "
           "gradients and optimizer states together (expected --export deepspeed)");
  }
  const TorchtitanCheckpointing checkpointing = torchtitan_checkpointing(plan, model);
  const PrecisionRecipe& recipe = plan.training.precision;
  if (recipe.fp8_all_gather && degrees.fsdp_shard_size() == 1) {  // FSDP shards over dp_shard × cp
    refuse("the float8 all-gather needs FSDP sharding, and this plan has data_parallel_shard_degree 1");
  }
  const int data_parallel = degrees.dp_replicate() * degrees.dp_shard();
  // Under a pipeline the step's micro-batches are torchtitan's pipeline micro-batches of one local batch.
  const std::int64_t local_batch = plan.training.micro_batch * (pipelined ? plan.grad_accumulation_steps : 1);
  const int nodes = world_size / gpus_per_node;

  std::ostringstream toml;
  toml << "# Generated by shardplan: plan " << toml_string(plan.name) << " for " << model.name << " on "
       << world_size << " GPUs (" << nodes << " x " << gpus_per_node << ").\n"
       << "# torchtitan job config: the fields of torchtitan/config/job_config.py at\n"
       << "# pytorch/torchtitan@e347b1e5e6b6941d789d16d340145294d82dc71e (the last torchtitan configured by TOML).\n"
       << "# Run: torchrun --nnodes " << nodes << " --nproc-per-node " << gpus_per_node
       << " -m torchtitan.train --job.config_file <this file>\n"
       << "# Wrapping: one FSDP unit per transformer block, as planned; torchtitan also shards tok_embeddings and\n"
       << "# [norm, output] as units of their own, which the plan keeps in its root unit.\n"
       << "# [training] steps is not part of a plan (torchtitan's default, 10000, applies): set it for the run.\n";
  if (pipelined) {
    toml << "# Pipeline: " << plan.pipeline.stages.size() << " stages split "
         << (stages.module_fqns.empty() ? "as torchtitan's generate_llm_fqn_per_model_part does"
                                        : "as planned (module_fqns_per_model_part)")
         << ", " << plan.grad_accumulation_steps << " micro-batches per step.\n";
  }
  toml << "\n";
  toml << "[job]\n"
       << "description = " << toml_string("shardplan plan " + plan.name + " for " + model.name) << "\n\n";
  toml << "[model]\n"
       << "name = " << toml_string(flavor.name) << "\n"
       << "flavor = " << toml_string(flavor.flavor) << "\n";
  // The float8 converter's registered name (torchtitan/components/quantization/float8.py register_model_converter).
  // At this commit parallelize_llama tests `"float8" in converters` for its float8 TP styles, so under TP the
  // projections' TP collectives stay bf16 — as the cost model prices them (tensor_parallel.cpp has no fp8 collectives).
  if (recipe.uses_fp8()) toml << "converters = [\"quantize.linear.float8\"]\n";
  toml << "\n[optimizer]\n"
       << "name = \"AdamW\"\n";
  // Note [Exported optimizer step]: torchtitan's OptimizersInBackwardContainer, torchtune's optimizer_in_bwd.
  if (plan.training.optimizer_in_backward) toml << "early_step_in_backward = true\n";
  toml << "\n";
  toml << "[training]\n"
       << "local_batch_size = " << local_batch << "\n"
       << "global_batch_size = " << plan.training.micro_batch * plan.grad_accumulation_steps * data_parallel << "\n"
       << "seq_len = " << plan.training.seq_len << "\n"
       << "dtype = " << toml_string(precision.dtype) << "\n"
       << "mixed_precision_param = " << toml_string(precision.param) << "\n"
       << "mixed_precision_reduce = \"float32\"\n"
       << "enable_cpu_offload = " << toml_bool(plan.offload.params) << "\n\n";
  toml << "[parallelism]\n"
       << "data_parallel_replicate_degree = " << degrees.dp_replicate() << "\n"
       << "data_parallel_shard_degree = " << degrees.dp_shard() << "\n"
       << "fsdp_reshard_after_forward = " << toml_string(reshard) << "\n"
       << "tensor_parallel_degree = " << degrees.tp() << "\n"
       << "disable_loss_parallel = false\n"  // shardplan's TP is PyTorch's with loss parallel (tensor_parallel.h)
       << "pipeline_parallel_degree = " << degrees.pp() << "\n"
       << "pipeline_parallel_schedule = " << toml_string(to_string(plan.pipeline.schedule)) << "\n";
  if (pipelined) toml << "pipeline_parallel_microbatch_size = " << plan.training.micro_batch << "\n";
  if (stages.layers_per_stage > 0) {
    toml << "pipeline_parallel_layers_per_stage = " << stages.layers_per_stage << "\n";
  }
  if (!stages.module_fqns.empty()) {
    toml << "module_fqns_per_model_part = [\n";
    for (const std::vector<std::string>& stage : stages.module_fqns) {
      toml << "  [";
      for (std::size_t at = 0; at < stage.size(); ++at) toml << (at == 0 ? "" : ", ") << toml_string(stage[at]);
      toml << "],\n";
    }
    toml << "]\n";
  }
  toml << "context_parallel_degree = " << degrees.cp() << "\n"
       << "expert_parallel_degree = " << degrees.ep() << "\n\n";
  toml << "[activation_checkpoint]\n"
       << "mode = " << toml_string(checkpointing.mode) << "\n";
  if (!checkpointing.selective_ac_option.empty()) {
    toml << "selective_ac_option = " << toml_string(checkpointing.selective_ac_option) << "\n";
  }
  // torchtitan's apply_compile compiles each TransformerBlock (the "model" component), what the plan modelled
  // (Note [Compiled blocks]); the "loss" component is not part of the plan.
  toml << "\n[compile]\n"
       << "enable = " << toml_bool(plan.training.torch_compile) << "\n"
       << "components = [\"model\"]\n";
  if (recipe.uses_fp8()) {
    // Tensorwise is torchao's default Float8LinearConfig (recipe_name unset) with the FSDP float8 all-gather;
    // rowwise is a recipe name, with which torchtitan refuses the float8 all-gather (float8.py). The output head
    // stays in bf16, as the plan's float8 covers the blocks' projections (Note [Float8 training]).
    const bool rowwise = recipe.fp8 == Fp8Scaling::rowwise;
    toml << "\n[quantize.linear.float8]\n";
    if (rowwise) toml << "recipe_name = \"rowwise\"\n";
    toml << "enable_fsdp_float8_all_gather = " << toml_bool(recipe.fp8_all_gather) << "\n"
         << "precompute_float8_dynamic_scale_for_fsdp = " << toml_bool(recipe.fp8_all_gather) << "\n"
         << "filter_fqns = [\"output\"]\n";
  }
  return {"torchtitan_job.toml", toml.str()};
}

}  // namespace shardplan
