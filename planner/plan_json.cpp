// Reading and writing `shardplan.plan/v1` documents.
#include "plan_json.h"

#include "errors.h"
#include "finetune_apply.h"
#include "finetune_json.h"
#include "input_limits.h"
#include "json_input.h"

namespace shardplan {
namespace {

constexpr const char* kPlanSchema = "shardplan.plan/v1";

std::string strategy_text(const ShardingStrategy& strategy) {
  std::string text = to_string(strategy.kind);
  if (strategy.shard_group_size > 0) text += ":" + std::to_string(strategy.shard_group_size);
  return text;
}

// Unit ids as written: an id past the units (4294967298, which an int would read as 2) reaches validate_plan intact
// and is named there; only ids beyond any possible unit count are refused here.
std::vector<int> read_ids(const JsonObjectReader& unit, const char* key) {
  std::vector<int> ids;
  if (!unit.has(key)) return ids;
  for (const auto& value : unit.array(key, true)) {
    const auto id = JsonObjectReader::integer_in(value, 0, limits::kMaxLayers);
    if (!id) unit.fail(key, "an array of unit ids in 0.." + std::to_string(limits::kMaxLayers));
    ids.push_back(static_cast<int>(*id));
  }
  return ids;
}

ActivationCheckpointing read_ac(const JsonObjectReader& reader, const std::string& text, const char* key) {
  try {
    return checkpointing_from_string(text);
  } catch (const InputError&) {
    reader.fail(key, "\"none\", \"full\", \"selective-op\" or \"selective\"");
  }
}

TrainingConfig read_training(const JsonObjectReader& block, int& accumulation_steps) {
  block.reject_unknown_keys({"seq_len", "micro_batch", "grad_accumulation_steps", "precision", "optimizer",
                             "flash_attention", "attention_kernel", "no_sync", "expert_parallel_degree",
                             "torch_compile", "loss", "activation_offload",
                             "optimizer_in_backward"});
  TrainingConfig training;
  // Note [Input limits]: in range as read; validate_training and validate_plan check the products.
  training.seq_len = block.int_in_range("seq_len", 1, limits::kMaxSeqLen);
  training.micro_batch = block.optional_int_in_range("micro_batch", 1, limits::kMaxMicroBatch).value_or(1);
  accumulation_steps = static_cast<int>(
      block.optional_int_in_range("grad_accumulation_steps", 1, limits::kMaxLayerPassesPerStep).value_or(1));
  try {
    training.precision = precision_recipe(block.optional_string("precision").value_or("bf16-mixed"));
  } catch (const InputError&) {
    block.fail("precision", "fp32, bf16-mixed, pure-bf16 or zero-fp16");
  }
  try {
    training.optimizer = optimizer_from_string(block.optional_string("optimizer").value_or("adamw"));
  } catch (const InputError&) {
    block.fail("optimizer", "adamw, sgd-momentum, sgd, adamw8bit or paged-adamw8bit");
  }
  training.flash_attention = block.boolean("flash_attention", true);
  try {
    training.attention_kernel =
        attention_kernel_from_string(block.optional_string("attention_kernel").value_or("flash"));
  } catch (const InputError&) {
    block.fail("attention_kernel", "\"flash\", \"triton\" or \"eager\"");
  }
  training.no_sync_accumulation = block.boolean("no_sync", false);
  training.torch_compile = block.boolean("torch_compile", false);  // Note [Compiled blocks]; absent: eager
  try {  // Note [Fine-tuning losses]; absent: the plain cross-entropy
    training.loss = loss_from_string(block.optional_string("loss").value_or("cross-entropy"));
  } catch (const InputError&) {
    block.fail("loss", "\"cross-entropy\", \"chunked-ce\" or \"linear-ce\"");
  }
  // Note [Activation offloading] (activation_offload.h); absent: the activations stay on the GPU.
  training.activation_offload = block.boolean("activation_offload", false);
  // Note [Optimizer in backward] (optimizer_in_backward.h); absent: one optimizer step after backward.
  training.optimizer_in_backward = block.boolean("optimizer_in_backward", false);
  // Note [Expert parallelism]: absent in plans of models without experts; validate_plan checks it against the model.
  training.expert_parallel_degree = static_cast<int>(
      block.optional_int_in_range("expert_parallel_degree", 1, limits::kMaxWorldSize).value_or(1));
  return training;
}

PlanUnit read_unit(const JsonObjectReader& entry, std::size_t id, const ModelSpec& model,
                   std::vector<ActivationCheckpointing>& checkpointing) {
  entry.reject_unknown_keys({"id", "name", "root", "first_layer", "last_layer", "strategy", "reshard_after_forward",
                             "forward_prefetch", "backward_prefetch", "ac", "ac_layers"});
  PlanUnit unit;
  unit.is_root = entry.boolean("root", false);
  unit.name = entry.optional_string("name").value_or(unit.is_root ? "root" : "unit " + std::to_string(id));
  if (entry.has("id") && entry.raw().at("id") != static_cast<int>(id)) entry.fail("id", std::to_string(id) + " (its position)");
  if (!unit.is_root) {
    if (!entry.has("first_layer")) entry.fail("first_layer", "the index of the unit's first layer");
    const auto layers = static_cast<std::int64_t>(model.layers.size());
    const std::int64_t first = entry.int_in_range("first_layer", 0, layers - 1);
    const std::int64_t last = entry.optional_int_in_range("last_layer", first, layers - 1).value_or(first);
    unit.layers = {static_cast<std::size_t>(first), static_cast<std::size_t>(last) + 1};
  }
  try {
    unit.strategy = parse_strategy(entry.optional_string("strategy").value_or("full_shard"));
  } catch (const InputError& error) {
    entry.fail("strategy", "a strategy name (full_shard, hybrid_shard:8, ...)");
  }
  if (entry.has("reshard_after_forward")) {
    const auto& value = entry.raw().at("reshard_after_forward");
    if (value.is_boolean()) {
      unit.reshard_after_forward.enabled = value.get<bool>();
    } else if (const auto group = JsonObjectReader::integer_in(value, 1, limits::kMaxWorldSize)) {
      unit.reshard_after_forward.group_size = static_cast<int>(*group);
    } else {
      entry.fail("reshard_after_forward", "true, false or a positive shard group size");
    }
  } else {
    unit.reshard_after_forward.enabled = !unit.is_root && reshards_after_forward(unit.strategy.kind);
  }
  unit.forward_prefetch = read_ids(entry, "forward_prefetch");
  unit.backward_prefetch = read_ids(entry, "backward_prefetch");
  if (!unit.is_root) {
    const std::size_t count = unit.layers.end - unit.layers.begin;
    if (entry.has("ac_layers")) {
      const auto modes = entry.array("ac_layers");
      if (modes.size() != count) entry.fail("ac_layers", std::to_string(count) + " entries, one per layer of the unit");
      for (std::size_t i = 0; i < count; ++i) {
        if (!modes[i].is_string()) entry.fail("ac_layers", "strings");
        checkpointing[unit.layers.begin + i] = read_ac(entry, modes[i].get<std::string>(), "ac_layers");
      }
    } else if (const auto mode = entry.optional_string("ac")) {
      const ActivationCheckpointing parsed = read_ac(entry, *mode, "ac");
      for (std::size_t layer = unit.layers.begin; layer < unit.layers.end; ++layer) checkpointing[layer] = parsed;
    }
  }
  return unit;
}

// Note [Pipeline policy] (plan.h): {"degree", "schedule", "stages_per_rank", "stages": [{"first_layer",
// "last_layer"}, ...]}; lower_pipeline checks that the stages cover the model in order.
PipelinePolicy read_pipeline(const JsonObjectReader& reader, const ModelSpec& model) {
  reader.reject_unknown_keys({"degree", "schedule", "stages_per_rank", "stages"});
  PipelinePolicy pipeline;
  pipeline.degree = static_cast<int>(reader.int_in_range("degree", 1, limits::kMaxWorldSize));
  if (const auto schedule = reader.optional_string("schedule")) {
    pipeline.schedule = pipeline_schedule_from_string(*schedule, reader.field_path("schedule"));
  }
  pipeline.stages_per_rank =
      static_cast<int>(reader.optional_int_in_range("stages_per_rank", 1, limits::kMaxWorldSize).value_or(1));
  const auto last_layer = static_cast<std::int64_t>(model.layers.size()) - 1;
  if (pipeline.degree > 1) {
    const auto stages = reader.array("stages");
    for (std::size_t index = 0; index < stages.size(); ++index) {
      const JsonObjectReader stage = reader.element("stages", index, stages[index]);
      stage.reject_unknown_keys({"first_layer", "last_layer"});
      const auto first = static_cast<std::size_t>(stage.int_in_range("first_layer", 0, last_layer));
      const auto last = static_cast<std::size_t>(stage.int_in_range("last_layer", static_cast<std::int64_t>(first),
                                                                     last_layer));
      pipeline.stages.push_back({first, last + 1});
    }
  }
  return pipeline;
}

}  // namespace

Plan plan_from_json(const nlohmann::json& document, const std::string& origin, const ModelSpec& model) {
  const JsonObjectReader root(document, origin);
  root.reject_unknown_keys(
      {"schema", "name", "model", "training", "finetune", "max_inflight_all_gathers", "offload", "units",
       "tensor_parallel_degree", "pipeline", "context_parallel_degree"});
  if (!root.has("schema") || root.raw().at("schema") != kPlanSchema) {
    root.fail("schema", std::string("\"") + kPlanSchema + "\"");
  }
  Plan plan;
  plan.name = root.optional_string("name").value_or("plan");
  plan.model = root.optional_string("model").value_or(model.name);
  // A plan's units, batch and degrees are its model's: another model would run it with its own layers under units cut
  // for different ones (llama3-8b's 33 units over llama3-70b's 82 layers put 49 of them in the root).
  if (plan.model != model.name) {
    root.fail("model", "'" + model.name + "' (the model given: a plan runs on the model it was made for)");
  }
  plan.training = read_training(root.object("training"), plan.grad_accumulation_steps);
  if (root.has("finetune")) {
    plan.training.finetune = finetune_from_json(root.object("finetune"), plan.training.precision);
    // The checks that need the model's names, with the plan's field names in their messages.
    (void)finetuned_model(model, plan.training.finetune, FinetuneFieldNames::json(origin));
  }
  plan.max_inflight_all_gathers = static_cast<int>(
      root.optional_int_in_range("max_inflight_all_gathers", 0, limits::kMaxInflightAllGathers).value_or(2));
  // Note [Tensor parallel degree]: range only here; validate_plan checks it against the model and the cluster.
  plan.tensor_parallel_degree = static_cast<int>(
      root.optional_int_in_range("tensor_parallel_degree", 1, limits::kMaxWorldSize).value_or(1));
  if (plan.tensor_parallel_degree != 1 && plan.training.activation_offload) {
    root.fail("tensor_parallel_degree", "1 with training.activation_offload (Note [Activation offloading]: modelled "
                                        "for FSDP alone)");
  }
  if (plan.tensor_parallel_degree != 1 && plan.training.loss != LossKind::cross_entropy) {
    root.fail("tensor_parallel_degree", "1 with training.loss " + std::string(to_string(plan.training.loss)) +
                                            " (Note [Fine-tuning losses]: modelled on the whole vocabulary)");
  }
  if (root.has("pipeline")) plan.pipeline = read_pipeline(root.object("pipeline"), model);
  // Note [Context parallel policy] (plan.h); validate_plan checks it against the training and the model.
  plan.context_parallel.degree = static_cast<int>(
      root.optional_int_in_range("context_parallel_degree", 1, limits::kMaxWorldSize).value_or(1));
  if (root.has("offload")) {
    const JsonObjectReader offload = root.object("offload");
    offload.reject_unknown_keys({"params", "optimizer"});
    plan.offload.params = offload.boolean("params", false);
    plan.offload.optimizer = offload.boolean("optimizer", false);
    if ((plan.offload.params || plan.offload.optimizer) && is_8bit(plan.training.optimizer)) {
      offload.fail("params", std::string("false with training.optimizer ") + to_string(plan.training.optimizer) +
                                 " (Note [8-bit optimizers]: the states stay on the GPU)");
    }
  }
  if (!plan.offload.params && !plan.offload.optimizer && plan.training.optimizer == OptimizerKind::cpu_adamw) {
    root.fail("offload", "params or optimizer true with training.optimizer cpu-adamw (Note [CPU optimizer step]: "
                         "DeepSpeed's CPU-Adam steps host-held states)");
  }
  plan.layer_checkpointing.assign(model.layers.size(), ActivationCheckpointing::none);
  const auto entries = root.array("units");
  for (std::size_t id = 0; id < entries.size(); ++id) {
    plan.units.push_back(read_unit(root.element("units", id, entries[id]), id, model, plan.layer_checkpointing));
  }
  return plan;
}

Plan read_plan_file(const std::string& path, const ModelSpec& model) {
  // Note [Inline JSON]: the plan itself may be given in place of its file.
  return plan_from_json(read_json_argument(path, "plan"), json_argument_origin(path, "plan"), model);
}

nlohmann::json to_json(const Plan& plan, const ModelSpec& model) {
  nlohmann::json units = nlohmann::json::array();
  for (std::size_t id = 0; id < plan.units.size(); ++id) {
    const PlanUnit& unit = plan.units[id];
    nlohmann::json entry = {{"id", id}, {"name", unit.name}, {"root", unit.is_root},
                            {"strategy", strategy_text(unit.strategy)}};
    if (!unit.is_root) {
      entry["first_layer"] = unit.layers.begin;
      entry["last_layer"] = unit.layers.end - 1;
      nlohmann::json modes = nlohmann::json::array();
      for (std::size_t layer = unit.layers.begin; layer < unit.layers.end; ++layer) {
        modes.push_back(to_string(plan.layer_checkpointing.at(layer)));
      }
      entry["ac_layers"] = std::move(modes);
    }
    if (unit.reshard_after_forward.keeps_partial_copy()) {
      entry["reshard_after_forward"] = unit.reshard_after_forward.group_size;
    } else {
      entry["reshard_after_forward"] = unit.reshard_after_forward.enabled;
    }
    entry["forward_prefetch"] = unit.forward_prefetch;
    entry["backward_prefetch"] = unit.backward_prefetch;
    units.push_back(std::move(entry));
  }
  nlohmann::json document = {{"schema", kPlanSchema},
          {"name", plan.name},
          {"model", plan.model.empty() ? model.name : plan.model},
          {"training",
           {{"seq_len", plan.training.seq_len},
            {"micro_batch", plan.training.micro_batch},
            {"grad_accumulation_steps", plan.grad_accumulation_steps},
            {"precision", plan.training.precision.name},
            {"optimizer", to_string(plan.training.optimizer)},
            {"flash_attention", plan.training.flash_attention},
            {"attention_kernel", to_string(plan.training.attention_kernel)},
            {"no_sync", plan.training.no_sync_accumulation}}},
          {"max_inflight_all_gathers", plan.max_inflight_all_gathers},
          {"offload", {{"params", plan.offload.params}, {"optimizer", plan.offload.optimizer}}},
          {"units", std::move(units)}};
  // FSDP alone (degree 1) writes no field, so plans from before tensor parallelism existed write as they did.
  if (plan.tensor_parallel_degree != 1) document["tensor_parallel_degree"] = plan.tensor_parallel_degree;
  if (plan.pipeline.enabled()) {  // plans without a pipeline read and write as before
    nlohmann::json stages = nlohmann::json::array();
    for (const LayerRange& stage : plan.pipeline.stages) {
      stages.push_back({{"first_layer", stage.begin}, {"last_layer", stage.end - 1}});
    }
    document["pipeline"] = {{"degree", plan.pipeline.degree},
                            {"schedule", to_string(plan.pipeline.schedule)},
                            {"stages_per_rank", plan.pipeline.stages_per_rank},
                            {"stages", std::move(stages)}};
  }
  // Plans without context parallelism read and write as before.
  if (plan.context_parallel.enabled()) document["context_parallel_degree"] = plan.context_parallel.degree;
  if (plan.training.torch_compile) document["training"]["torch_compile"] = true;  // eager plans write as before
  if (plan.training.loss != LossKind::cross_entropy) document["training"]["loss"] = to_string(plan.training.loss);
  if (plan.training.activation_offload) document["training"]["activation_offload"] = true;  // as before when off
  if (plan.training.optimizer_in_backward) document["training"]["optimizer_in_backward"] = true;
  if (plan.training.expert_parallel_degree > 1) {  // plans without expert parallelism read and write as before
    document["training"]["expert_parallel_degree"] = plan.training.expert_parallel_degree;
  }
  // Full training writes no block: plans from before fine-tuning existed read and write as they did.
  if (!plan.training.finetune.trains_all()) {
    document["finetune"] = finetune_to_json(plan.training.finetune, plan.training.precision, model);
  }
  return document;
}

}  // namespace shardplan
