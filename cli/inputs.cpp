// Registration and resolution of the flags that several subcommands share.
#include "inputs.h"

#include <cmath>
#include <iostream>

#include "errors.h"
#include "finetune_apply.h"
#include "flag_checks.h"
#include "input_limits.h"
#include "json_input.h"
#include "loss.h"
#include "model_source.h"
#include "name_suggest.h"
#include "plan.h"
#include "precision.h"
#include "sharding.h"

namespace shardplan::cli {

void add_catalog_flag(CLI::App& command, std::string& catalog_file) {
  command.add_option("--catalog", catalog_file, "JSON file adding or overriding GPU and fabric entries");
}

void add_memory_headroom_flag(CLI::App& command, double& percent) {
  // Note [Memory headroom] (planner/memory_headroom.h) and Note [Error bands] (costmodel/error_band.h): when omitted,
  // the command takes the memory error band's headroom (choose_memory_headroom), so no default is captured here.
  command
      .add_option("--memory-headroom", percent,
                  "percent of the GPU's memory (or --memory-cap) a plan must leave free: it fits when the caching "
                  "allocator's reserved peak plus the runtime overhead stays within the rest. Default: the memory "
                  "error band's largest underestimate of the reserved peak against published runs like this one "
                  "(benchmarks/published-runs), rounded up; printed with the source")
      ->check(finite_range(0, 50));
}

void add_model_cluster_flags(CLI::App& command, ModelClusterFlags& flags) {
  command.add_option("--model,-m", flags.model, "preset name, model JSON, or Hugging Face config.json")->required();
  command.add_option("--cluster,-c", flags.cluster, "e.g. 8xH100-80GB, 4x8xH100-80GB, or a cluster JSON")
      ->required();
  add_catalog_flag(command, flags.catalog_file);
  command.add_option("--price", flags.price_per_gpu_hour, "price per GPU-hour in USD (default: the catalog's)")
      ->check(finite_range(0, limits::kMostPricePerGpuHour));
  command.add_option("--profile", flags.profile_file, "calibrated hardware profile JSON (shardplan.profile/v1)");
}

void add_training_flags(CLI::App& command, TrainingFlags& flags) {
  // Note [Input limits]: ranges checked as the flags are parsed; validate_training checks their products.
  command.add_option("--seq-len", flags.seq_len, "tokens per sequence (default: the model's training length)")
      ->check(int_range(1, limits::kMaxSeqLen));
  command.add_option("--micro-batch", flags.micro_batch, "sequences per rank per forward/backward")
      ->capture_default_str()
      ->check(int_range(1, limits::kMaxMicroBatch));
  command.add_option("--global-batch", flags.global_batch,
                     "sequences per optimizer step (default: one micro-batch per rank)")
      ->check(int_range(1, limits::kMaxGlobalBatch));
  // Every recipe precision_recipe() accepts, from its own table, so the list cannot fall behind it.
  std::string recipes;
  for (const std::string& name : precision_recipe_names()) recipes += (recipes.empty() ? "" : " | ") + name;
  command.add_option("--precision", flags.precision, recipes)->capture_default_str();
  command
      .add_option("--optimizer", flags.optimizer,
                  "adamw | sgd-momentum | sgd | adamw8bit | paged-adamw8bit (bitsandbytes) | cpu-adamw (DeepSpeed "
                  "CPU-Adam over CPU-offloaded states; deepspeed exports carry it)")
      ->capture_default_str();
  command.add_option("--ac", flags.ac, "activation checkpointing: none | full | selective")->capture_default_str();
  command.add_option("--ac-every", flags.ac_every,
                     "apply --ac to every k-th block only (blocks k, 2k, ...; torchtitan's selective_ac_option k)")
      ->capture_default_str();
  command.add_flag("--no-flash-attention", flags.no_flash_attention, "materialise attention scores (s² memory)");
  command.add_option("--attention", flags.attention,
                     "attention kernel: flash (FlashAttention-2, SDPA) | triton (Triton FlashAttention, llm-foundry's "
                     "attn_impl: triton) | eager (HF attn_implementation=\"eager\": materialised scores, and what "
                     "autograd keeps for each composite op)");
  command.add_flag("--no-sync", flags.no_sync, "keep unsharded gradients across accumulation micro-batches");
  command.add_flag("--compile", flags.torch_compile,
                   "torch.compile each transformer block (AOTAutograd keeps less for backward; kernels as eager); "
                   "the fsdp2 and fsdp1 exports compile, deepspeed exports and `run` refuse it");
  command
      .add_option("--loss", flags.loss,
                  "the output head's loss: cross-entropy (logits upcast to fp32 whole) | chunked-ce (torchtune's "
                  "CEWithChunkedOutputLoss, 8 chunks upcast one at a time) | linear-ce (Liger's fused linear "
                  "cross-entropy: logits never materialised beyond a chunk); fsdp2 exports carry it")
      ->capture_default_str();
  command.add_flag("--activation-offload", flags.activation_offload,
                   "torchtune's activation offloading: each layer's kept activations (but the output head's) to "
                   "pinned host memory after its forward, back before its backward; fsdp2 exports carry it");
  command.add_flag("--optimizer-in-backward", flags.optimizer_in_backward,
                   "torchtune's optimizer_in_bwd: each unit's parameters stepped as their gradients are reduced, so "
                   "the gradients are never held all at once; one micro-batch per step, no CPU offload, no tensor or "
                   "pipeline parallelism; fsdp2 and torchtitan exports carry it");
  command.add_option("--expert-parallel", flags.expert_parallel,
                     "MoE models: split each block's experts over groups of this many ranks, tokens exchanged by "
                     "all-to-all (default 1; plan searches it when not given)")
      ->check(int_range(1, limits::kMaxWorldSize));
  command.add_option("--finetune", flags.finetune,
                     "full | frozen (--freeze patterns) | lora | qlora (LoRA over 4-bit base weights); default full");
  command.add_option("--freeze", flags.freeze,
                     "freeze the parameters whose full name matches this glob (e.g. 'model.embed_tokens*'); repeatable");
  command.add_option("--lora-r", flags.lora_r, "LoRA rank r (peft.LoraConfig r; default 8)");
  command.add_option("--lora-alpha", flags.lora_alpha, "LoRA alpha (lora_alpha; default 8)");
  command.add_option("--lora-dropout", flags.lora_dropout, "dropout on the adapters' input (lora_dropout; default 0)");
  command.add_option("--lora-target-modules", flags.lora_target_modules,
                     "comma-separated module names (target_modules), e.g. q_proj,k_proj,v_proj,o_proj,gate_proj,"
                     "up_proj,down_proj or, GPT-2, c_attn,c_proj,c_fc; default PEFT's for the model family");
  command.add_option("--bnb-4bit-quant-type", flags.bnb_quant_type, "QLoRA: nf4 | fp4 (default nf4)");
  command.add_flag("--bnb-4bit-use-double-quant", flags.bnb_double_quant,
                   "QLoRA: quantise the quantisation constants too (QLoRA's double quantisation)");
  command.add_option("--bnb-4bit-quant-storage", flags.bnb_quant_storage,
                     "QLoRA: uint8 | bf16 | fp16 | fp32, the dtype FSDP shards the 4-bit weights in; must be the "
                     "param dtype (default: it)");
  command.add_option("--bnb-4bit-compute-dtype", flags.bnb_compute_dtype,
                     "QLoRA: bf16 | fp16 | fp32, what weights are dequantised to (default: the param dtype)");
  command.add_option("--fsdp-version", flags.fsdp_version,
                     "FSDP front end: 2 (fully_shard: compute waits for each previous reduce-scatter) or 1 "
                     "(FullyShardedDataParallel's FlatParameter: its rules for frozen parameters, no such waits)")
      ->capture_default_str()
      ->check(int_range(1, 2));
  command.add_option("--use-orig-params", flags.use_orig_params,
                     "FSDP1: true (units may mix frozen and trainable parameters) | false (they may not)");
}

namespace {

// --tensor-parallel's degree (any positive number; validate_tensor_parallel_degree checks it against a cluster).
int parse_tensor_parallel(const std::string& text) {
  int degree = 0;
  try {
    std::size_t used = 0;
    degree = std::stoi(text, &used);
    if (used != text.size()) degree = 0;
  } catch (const std::exception&) {
    degree = 0;
  }
  if (degree < 1) throw InputError("--tensor-parallel '" + text + "': expected auto or a degree (1, 2, 4, 8)");
  return degree;
}

}  // namespace

void add_search_knob_flags(CLI::App& command, SearchKnobFlags& flags) {
  // Note [Pinned knobs]: the training flags' own help says what estimate and simulate do with them; here each says
  // what the search does when it is given and when it is not. No default is shown for a searched knob.
  command.get_option("--ac")
      ->description("activation checkpointing, fixed when given: none | full | selective-op | selective (attention "
                    "core); searched when omitted: none, full on the first 25/50/75 % of the blocks, full, "
                    "selective-op (and selective without flash attention)")
      ->default_str("");
  command.get_option("--ac-every")
      ->description("with --ac: apply it to every k-th block only (torchtitan's selective_ac_option k)")
      ->default_str("");
  command.get_option("--micro-batch")
      ->description("sequences per rank per forward/backward, fixed when given; searched when omitted: the powers of "
                    "two dividing the sequences a data-parallel rank runs per step (with --global-batch or tensor "
                    "parallelism; else 1)")
      ->default_str("");
  command.get_option("--precision")
      ->description(command.get_option("--precision")->get_description() +
                    " (not searched: the recipe given, bf16-mixed when omitted)");
  command.get_option("--expert-parallel")
      ->description("MoE models: split each block's experts over groups of this many ranks, tokens exchanged by "
                    "all-to-all; fixed when given, searched when omitted (1 and the powers of two within a node that "
                    "divide every MoE block's experts)");
  command.add_option("--strategy", flags.strategy,
                     "sharding strategy, fixed when given: full_shard | shard_grad_op | no_shard | hybrid_shard[:G] "
                     "| hybrid_shard_zero2[:G] | zero1 | zero2 | zero3; searched when omitted (full_shard, "
                     "shard_grad_op, no_shard, hybrid shard groups within and across nodes)");
  command.add_option("--tensor-parallel", flags.tensor_parallel,
                     "tensor-parallel degree, fixed when given (1: FSDP alone); searched when omitted or auto: 1, 2, "
                     "4, 8 where the model and node take them")
      ->capture_default_str();
  command.add_flag("--cpu-offload", flags.cpu_offload,
                   "FSDP's CPU offload (parameter and gradient shards and the optimizer in host memory), fixed when "
                   "given (--cpu-offload=false pins it off); searched when omitted, as a last resort when no plan fits "
                   "the GPUs");
  command.footer("Knobs: one given is fixed, one omitted is searched — --strategy, --ac/--ac-every, --micro-batch, "
                 "--tensor-parallel, --expert-parallel, --cpu-offload. --precision is not searched.");
}

KnobPins resolve_knob_pins(const CLI::App& command, const SearchKnobFlags& flags, const TrainingConfig& training) {
  KnobPins pins;
  if (command.count("--strategy") > 0) pins.strategy = parse_strategy(flags.strategy);
  if (command.count("--ac-every") > 0 && command.count("--ac") == 0) {
    throw InputError("--ac-every " + std::to_string(training.checkpoint_every_blocks) +
                     ": only with --ac (full, selective-op or selective), the mode it applies every k-th block");
  }
  pins.checkpointing = command.count("--ac") > 0;
  pins.micro_batch = command.count("--micro-batch") > 0;
  if (command.count("--cpu-offload") > 0) pins.offload = flags.cpu_offload;
  // Note [8-bit optimizers]: the states are modelled on the GPU, so offload is not searched either.
  // cpu-adamw steps offloaded states only: offload is pinned on, refused where pinned off.
  const bool cpu_adam = training.optimizer == OptimizerKind::cpu_adamw;
  check_optimizer_offload(training, pins.offload.value_or(cpu_adam), "--cpu-offload");
  if (is_8bit(training.optimizer)) pins.offload = false;
  if (cpu_adam) pins.offload = true;
  if (flags.tensor_parallel != "auto") pins.tensor_parallel = parse_tensor_parallel(flags.tensor_parallel);
  if (training.activation_offload) {  // Note [Activation offloading]: FSDP alone
    check_activation_offload_tensor_parallel(true, pins.tensor_parallel.value_or(1));
    pins.tensor_parallel = 1;
  }
  if (training.optimizer_in_backward) {  // Note [Optimizer in backward]: FSDP alone, on the device
    if (pins.offload.value_or(false)) {
      throw InputError("--optimizer-in-backward with --cpu-offload: a host optimizer step per unit is not modelled; "
                       "expected no CPU offload, or no --optimizer-in-backward");
    }
    if (pins.tensor_parallel.value_or(1) != 1) {
      throw InputError("--optimizer-in-backward with --tensor-parallel " + std::to_string(*pins.tensor_parallel) +
                       ": modelled for FSDP alone; expected --tensor-parallel 1, or no --optimizer-in-backward");
    }
    pins.offload = false;
    pins.tensor_parallel = 1;
  }
  if (training.loss != LossKind::cross_entropy) {  // Note [Fine-tuning losses]: on the whole vocabulary only
    check_loss_tensor_parallel(training.loss, pins.tensor_parallel.value_or(1));
    pins.tensor_parallel = 1;
  }
  // TrainingFlags::expert_parallel is 0 when not given.
  if (command.count("--expert-parallel") > 0) pins.expert_parallel = training.expert_parallel_degree;
  return pins;
}

namespace {

// A flag's number, all of the text: "--lora-r 8x" is refused, not read as 8.
double parse_number(const std::string& flag, const std::string& text, bool integer) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = integer ? static_cast<double>(std::stoll(text, &used)) : std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) {
    throw InputError(flag + " '" + text + "': expected " + (integer ? "an integer" : "a number"));
  }
  return value;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> items;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto comma = text.find(',', start);
    items.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return items;
}

DType parse_dtype(const std::string& flag, const std::string& text, const std::vector<DType>& allowed) {
  try {
    return dtype_from_string(text, allowed);
  } catch (const InputError& error) {
    throw InputError(flag + " " + error.what());
  }
}

FinetuneConfig resolve_finetune(const TrainingFlags& flags) {
  FinetuneConfig config;
  config.mode = flags.finetune.empty() ? (flags.freeze.empty() ? FinetuneMode::full : FinetuneMode::frozen)
                                       : finetune_mode_from_string(flags.finetune);
  config.freeze = flags.freeze;
  const auto only_with = [&](bool given, const char* flag, bool allowed, const char* modes) {
    if (given && !allowed) {
      throw InputError(std::string(flag) + ": only with --finetune " + modes + ", got --finetune " +
                       to_string(config.mode));
    }
  };
  const bool lora = config.uses_lora(), qlora = config.mode == FinetuneMode::qlora;
  only_with(!flags.lora_r.empty(), "--lora-r", lora, "lora or qlora");
  only_with(!flags.lora_alpha.empty(), "--lora-alpha", lora, "lora or qlora");
  only_with(!flags.lora_dropout.empty(), "--lora-dropout", lora, "lora or qlora");
  only_with(!flags.lora_target_modules.empty(), "--lora-target-modules", lora, "lora or qlora");
  only_with(!flags.bnb_quant_type.empty(), "--bnb-4bit-quant-type", qlora, "qlora");
  only_with(flags.bnb_double_quant, "--bnb-4bit-use-double-quant", qlora, "qlora");
  only_with(!flags.bnb_quant_storage.empty(), "--bnb-4bit-quant-storage", qlora, "qlora");
  only_with(!flags.bnb_compute_dtype.empty(), "--bnb-4bit-compute-dtype", qlora, "qlora");
  if (!flags.lora_r.empty()) config.lora.r = static_cast<std::int64_t>(parse_number("--lora-r", flags.lora_r, true));
  if (!flags.lora_alpha.empty()) config.lora.alpha = parse_number("--lora-alpha", flags.lora_alpha, false);
  if (!flags.lora_dropout.empty()) config.lora.dropout = parse_number("--lora-dropout", flags.lora_dropout, false);
  if (!flags.lora_target_modules.empty()) config.lora.target_modules = split_commas(flags.lora_target_modules);
  if (!flags.bnb_quant_type.empty()) config.bnb.quant_type = flags.bnb_quant_type;
  config.bnb.use_double_quant = flags.bnb_double_quant;
  if (!flags.bnb_quant_storage.empty()) {
    config.bnb.quant_storage = parse_dtype("--bnb-4bit-quant-storage", flags.bnb_quant_storage,
                                           {DType::uint8, DType::bf16, DType::fp16, DType::fp32});
  }
  if (!flags.bnb_compute_dtype.empty()) {
    config.bnb.compute_dtype =
        parse_dtype("--bnb-4bit-compute-dtype", flags.bnb_compute_dtype, {DType::bf16, DType::fp16, DType::fp32});
  }
  config.fsdp.version = flags.fsdp_version;
  if (!flags.use_orig_params.empty()) {
    if (flags.use_orig_params != "true" && flags.use_orig_params != "false") {
      throw InputError("--use-orig-params '" + flags.use_orig_params + "': expected true or false");
    }
    config.fsdp.use_orig_params = flags.use_orig_params == "true";
  }
  return config;
}

}  // namespace

HardwareCatalog load_catalog(const std::string& catalog_file) {
  HardwareCatalog catalog = HardwareCatalog::builtin();
  if (!catalog_file.empty()) {  // a file, or the catalog inline (Note [Inline JSON])
    catalog.merge_user_json(read_json_argument(catalog_file, "catalog"), json_argument_origin(catalog_file, "catalog"));
  }
  return catalog;
}

ModelSpec load_searchable_model(const std::string& model_argument, const std::string& command) {
  ModelSpec model = load_model(model_argument);
  if (model.block_count() == 0) {
    throw InputError(json_argument_origin(model_argument, "model") + ": no layer of kind 'transformer_block': " +
                     command + " searches how to wrap the blocks into FSDP units, expected at least one (estimate " +
                     "and simulate take a model without)");
  }
  return model;
}

Cluster resolve_cluster(const ModelClusterFlags& flags) {
  Cluster cluster = parse_cluster(flags.cluster, load_catalog(flags.catalog_file));
  if (!std::isnan(flags.price_per_gpu_hour)) cluster.price_per_gpu_hour = flags.price_per_gpu_hour;  // in range
  return cluster;
}

HardwareProfile resolve_profile(const ModelClusterFlags& flags, const Cluster& cluster) {
  HardwareProfile profile = profile_from_cluster(cluster);
  if (!flags.profile_file.empty()) {
    profile = apply_profile_json(profile, read_json_argument(flags.profile_file, "profile"),
                                 json_argument_origin(flags.profile_file, "profile"));
  }
  return profile;
}

TrainingConfig resolve_training(const TrainingFlags& flags, const ModelSpec& model) {
  TrainingConfig training;
  training.seq_len = flags.seq_len > 0 ? flags.seq_len : model.default_seq_len;
  training.micro_batch = flags.micro_batch;
  training.global_batch = flags.global_batch;
  training.precision = precision_recipe(flags.precision);
  training.optimizer = optimizer_from_string(flags.optimizer);
  training.checkpointing = checkpointing_from_string(flags.ac);
  training.checkpoint_every_blocks = flags.ac_every;
  training.flash_attention = !flags.no_flash_attention;
  if (!flags.attention.empty()) {
    if (flags.no_flash_attention && flags.attention != "eager") {
      throw InputError("--attention " + flags.attention + " contradicts --no-flash-attention");
    }
    if (flags.attention == "eager") {
      training.flash_attention = false;
      training.attention_kernel = AttentionKernel::eager;
    } else {
      try {
        training.attention_kernel = attention_kernel_from_string(flags.attention);
      } catch (const InputError&) {
        throw InputError("--attention '" + flags.attention + "': expected flash, triton or eager" +
                         did_you_mean(flags.attention, {"flash", "triton", "eager"}));
      }
    }
  }
  training.no_sync_accumulation = flags.no_sync;
  training.torch_compile = flags.torch_compile;
  training.loss = loss_from_string(flags.loss);
  training.activation_offload = flags.activation_offload;
  training.optimizer_in_backward = flags.optimizer_in_backward;
  training.expert_parallel_degree = flags.expert_parallel > 0 ? flags.expert_parallel : 1;
  training.finetune = resolve_finetune(flags);
  validate_training(training, model);
  return training;
}

ModelSpec finetuned_for(const ModelSpec& model, const TrainingConfig& training) {
  return model_for_loss(finetuned_model(model, training.finetune, FinetuneFieldNames::cli()), training.loss);
}

// Invalid UTF-8 (a byte string from a flag) is replaced, not thrown halfway through the output.
std::vector<int> tensor_parallel_degrees(const std::string& text, const ModelSpec& model, const Cluster& cluster) {
  if (text == "auto") return {1, 2, 4, 8};  // within a node (Note [2-D plans] in planner/tensor_parallel_view.h)
  const int degree = parse_tensor_parallel(text);
  validate_tensor_parallel_degree(degree, model, cluster.world_size(), cluster.gpus_per_node, "--tensor-parallel");
  return {degree};
}

void check_compile_tensor_parallel(int degree) {
  if (degree != 1) {
    throw InputError("--compile with --tensor-parallel " + std::to_string(degree) +
                     ": not yet modelled (expected --tensor-parallel 1)");
  }
}

void check_loss_tensor_parallel(LossKind loss, int degree) {
  if (loss != LossKind::cross_entropy && degree != 1) {
    throw InputError(std::string("--loss ") + to_string(loss) + " with --tensor-parallel " + std::to_string(degree) +
                     ": not modelled with loss parallel (expected --tensor-parallel 1, or --loss cross-entropy)");
  }
}

void check_activation_offload_tensor_parallel(bool activation_offload, int degree) {
  if (activation_offload && degree != 1) {
    throw InputError("--activation-offload with --tensor-parallel " + std::to_string(degree) +
                     ": modelled for FSDP alone (expected --tensor-parallel 1, or no --activation-offload)");
  }
}

void print_json(const nlohmann::json& document) {
  std::cout << document.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

}  // namespace shardplan::cli
