// Assembles and renders the `estimate` result: the default plan's simulated peak and the one fits verdict.
#include "estimate.h"

#include "finetune_apply.h"
#include "memory_headroom.h"
#include "plan.h"
#include "step_analysis.h"
#include "unmeasured_rates.h"
#include "unit_layout.h"

#include <cstdio>
#include <sstream>

namespace shardplan {
namespace {

std::string gib(std::int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%9.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return text;
}

// "79.65 GiB", for figures inside a sentence.
std::string gib_inline(std::int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return text;
}

std::string with_commas(std::int64_t value) {
  std::string digits = std::to_string(value);
  for (int pos = static_cast<int>(digits.size()) - 3; pos > 0; pos -= 3) digits.insert(static_cast<std::size_t>(pos), ",");
  return digits;
}

// What each term means, shown beside it in the human table.
const char* term_help(const std::string& term) {
  if (term == "sharded_params") return "this rank's parameter shard";
  if (term == "sharded_grads") return "this rank's gradient shard";
  if (term == "optimizer_states") return "master weights + optimizer states of the shard";
  if (term == "unsharded_params") return "gathered units in flight (current + prefetched)";
  if (term == "root_unit") return "root unit, gathered from forward to backward";
  if (term == "unsharded_grads") return "full-size gradients of units in backward";
  if (term == "comm_buffers") return "all-gather input / reduce-scatter output";
  if (term == "activations") return "kept for backward (+ recompute working set)";
  if (term == "overhead") return "runtime context and workspaces";
  return "";
}

}  // namespace

EstimateResult run_estimate(const EstimateRequest& request) {
  EstimateResult result{request, {}, {}, {}};
  const int world_size = request.cluster.world_size();
  MemoryEstimate& memory = result.memory;
  validate_training(request.training, request.model);  // its errors come first, as they always have
  memory.layout = resolve_sharding(request.strategy, world_size, request.cluster.gpus_per_node);
  memory.units = resolve_units(request.model, request.wrapping);
  memory.param_count = request.model.param_count();
  memory.capacity_bytes = request.cluster.gpu.memory_bytes;
  Plan plan = default_plan(request.model, request.training, request.strategy, request.wrapping, world_size);
  plan.offload.params = request.offload_params;
  memory.grad_accumulation_steps = plan.grad_accumulation_steps;
  result.simulation = analyze_step(request.model, request.cluster, request.profile, plan, false).simulation.summary;
  // The padding is the lowering's own: the unit sizes it allocates (unit_layout.h).
  result.layouts = unit_layouts(plan, request.model, world_size, request.cluster.gpus_per_node);
  memory.breakdown = breakdown_from_categories(result.simulation.memory_at_peak, padding_elements(result.layouts));
  if (request.model_states_only) {
    MemoryBreakdown states;
    states.sharded_params_bytes = result.memory.breakdown.sharded_params_bytes;
    states.sharded_grads_bytes = result.memory.breakdown.sharded_grads_bytes;
    states.optimizer_states_bytes = result.memory.breakdown.optimizer_states_bytes;
    states.padding_elements = result.memory.breakdown.padding_elements;
    result.memory.breakdown = states;
  }
  const MemoryHeadroom headroom{memory.capacity_bytes, request.memory_headroom_fraction};
  result.headroom_bytes = headroom.headroom_bytes();
  result.fits = request.model_states_only ? memory.breakdown.total_bytes() <= headroom.usable_bytes()
                                          : headroom.fits(result.simulation);
  return result;
}

namespace {

// What the simulated step's collectives move on one rank: count and bytes (nccl-tests' S) by kind.
nlohmann::json collectives_per_step(const SimulationSummary& simulation) {
  nlohmann::json totals = nlohmann::json::object();
  for (const auto& collective : simulation.collectives) {
    totals[collective.kind] = {{"count", collective.count}, {"bytes", collective.bytes}};
  }
  return totals;
}

}  // namespace

nlohmann::json to_json(const EstimateResult& result) {
  const auto& request = result.request;
  const auto& memory = result.memory;
  nlohmann::json memory_json = to_json(memory.breakdown);
  memory_json["capacity_bytes"] = memory.capacity_bytes;
  // Note [Memory headroom]: fits when device_peak_bytes (reserved + overhead, never below total_bytes) is within
  // capacity_bytes less memory_headroom_bytes.
  memory_json["fits"] = result.fits;
  memory_json["memory_headroom_bytes"] = result.headroom_bytes;
  memory_json["model_states_only"] = request.model_states_only;
  memory_json["peak_op"] = result.simulation.peak_op;
  // Note [Reserved memory] (planner/memory_walk.cpp): the caching allocator's own reserved peak
  // (torch.cuda.max_memory_reserved) and the device's (nvidia-smi: that plus the overhead term).
  memory_json["reserved_peak_bytes"] = result.simulation.reserved_peak_bytes;
  memory_json["device_peak_bytes"] = result.simulation.device_peak_bytes;
  nlohmann::json strategy = {{"name", to_string(memory.layout.kind)},
                             {"param_shard_group", memory.layout.param_group},
                             {"grad_shard_group", memory.layout.grad_group},
                             {"optimizer_shard_group", memory.layout.optimizer_group},
                             {"reshard_after_forward", memory.layout.reshard_after_forward}};
  nlohmann::json units = nlohmann::json::array();
  for (std::size_t id = 0; id < memory.units.size(); ++id) {
    const UnitInfo& unit = memory.units[id];
    units.push_back({{"name", unit.name}, {"layers", unit.layers.size()}, {"params", unit.param_count},
                     {"padded_params", result.layouts[id].padded_elements}, {"root", unit.is_root}});
  }
  // Per layer, what the memory model and the FLOP count read of it under this training config: the module path, the
  // forward FLOPs per token (causal skipping where the layer is causal and the kernel is flash), and the bytes it keeps
  // for backward per micro-batch under the default plan's checkpointing (what the torch bridge's tests compare with
  // autograd's own count).
  nlohmann::json layers = nlohmann::json::array();
  const TrainingConfig& training = request.training;
  std::size_t block = 0;
  for (std::size_t index = 0; index < request.model.layers.size(); ++index) {
    const LayerSpec& layer = request.model.layers[index];
    const ActivationCheckpointing mode = layer.kind == LayerKind::transformer_block
                                             ? block_checkpointing(training, block++)
                                             : ActivationCheckpointing::none;
    layers.push_back({{"name", layer.name},
                      {"kind", to_string(layer.kind)},
                      {"params", layer.param_count()},
                      {"causal_attention", layer.flops.causal_attention},
                      {"tokens_per_sample", layer.tokens_per_sample(training.seq_len)},
                      {"forward_flops_per_token", layer.forward_flops_per_token(training.seq_len,
                                                                                training.flash_attention)},
                      {"kept_activation_bytes", kept_activation_bytes(request.model, training, index, mode)}});
  }
  return {{"schema", "shardplan.estimate/v1"},
          {"model", request.model.name},
          {"layers", std::move(layers)},
          {"params", memory.param_count},
          {"trainable_params", trainable_param_count(request.model)},
          {"cpu_offload", request.offload_params},
          {"cluster", to_json(request.cluster)},
          {"training", to_json(request.training, request.cluster.world_size())},
          {"strategy", std::move(strategy)},
          {"units_policy", request.units_policy},
          {"units", std::move(units)},
          {"memory", std::move(memory_json)},
          {"collectives_per_step", collectives_per_step(result.simulation)},
          {"unmeasured_rates", unmeasured_rates_json(request.profile)}};
}

std::string render_text(const EstimateResult& result) {
  const auto& request = result.request;
  const auto& memory = result.memory;
  const auto& breakdown = memory.breakdown;
  std::ostringstream out;
  out << "model     " << request.model.name << ": " << with_commas(memory.param_count) << " parameters, "
      << request.model.layers.size() << " layers (" << request.model.block_count() << " blocks)";
  const FinetuneConfig& finetune = request.training.finetune;
  if (!finetune.trains_all()) {
    out << "; " << to_string(finetune.mode) << " fine-tuning: " << with_commas(trainable_param_count(request.model))
        << " trainable";
    if (finetune.uses_lora()) {
      out << " (r=" << finetune.lora.r << " on";
      for (const auto& target : lora_target_modules(request.model, finetune)) out << " " << target;
      out << ")";
    }
    out << ", FSDP" << finetune.fsdp.version;
  }
  out << "\n";
  out << "cluster   " << request.cluster.describe() << "\n";
  out << unmeasured_rates_line(request.profile);
  out << "training  seq " << request.training.seq_len << ", micro-batch " << request.training.micro_batch
      << ", grad-accum " << memory.grad_accumulation_steps << ", " << request.training.precision.name << ", "
      << to_string(request.training.optimizer) << ", AC " << to_string(request.training.checkpointing)
      << (request.training.checkpoint_every_blocks > 1
              ? " on blocks " + std::to_string(request.training.checkpoint_every_blocks) + ", " +
                    std::to_string(2 * request.training.checkpoint_every_blocks) + ", ..."
              : "")
      << (request.training.attention_kernel == AttentionKernel::eager ? ", eager attention"
          : !request.training.flash_attention                            ? ", materialised attention"
          : request.training.attention_kernel == AttentionKernel::triton ? ", Triton FlashAttention"
                                                                          : ", flash attention")
      << (request.training.torch_compile ? ", torch.compile" : "")
      << (request.offload_params ? ", CPU offload" : "")
      << (request.training.expert_parallel_degree > 1
              ? ", expert parallel " + std::to_string(request.training.expert_parallel_degree)
              : "")
      << "\n";
  const std::string recipe = recipe_text(request.training);  // Note [Fine-tuning losses], [8-bit optimizers]
  if (!recipe.empty()) out << "recipe    " << recipe << "\n";
  out << "strategy  " << to_string(memory.layout.kind) << " (params/grads/optimizer sharded over "
      << memory.layout.param_group << "/" << memory.layout.grad_group << "/" << memory.layout.optimizer_group
      << " ranks), units " << request.units_policy << ": " << memory.units.size() << " incl. root, padding "
      << with_commas(breakdown.padding_elements) << " elements\n\n";
  out << "per-rank memory" << (request.model_states_only ? " (model states only)" : " at peak") << "\n";
  for (const auto& [term, bytes] : breakdown.terms()) {
    if (request.model_states_only && bytes == 0) continue;
    char line[160];
    std::snprintf(line, sizeof line, "  %-18s %s   %s\n", term.c_str(), gib(bytes).c_str(), term_help(term));
    out << line;
  }
  char total[240];
  std::snprintf(total, sizeof total, "  %-18s %s   %s\n", "total", gib(breakdown.total_bytes()).c_str(),
                request.model_states_only ? "model states" : "allocated at the peak");
  out << total;
  if (!request.model_states_only) {
    // Note [Reserved memory] (memory_walk.cpp): what the device holds — the caching allocator's reserved peak plus the
    // overhead outside it — never below the allocated total, and what the verdict compares.
    std::snprintf(total, sizeof total, "  %-18s %s   reserved by the caching allocator + overhead (nvidia-smi)\n",
                  "reserved", gib(result.simulation.device_peak_bytes).c_str());
    out << total;
  }
  // Note [Memory headroom]: one verdict, against the capacity less the headroom.
  const std::int64_t compared =
      request.model_states_only ? breakdown.total_bytes() : result.simulation.device_peak_bytes;
  std::snprintf(total, sizeof total, "  verdict: %s — %s %s = %.1f%% of %s; fits within %s (%g%% headroom kept)\n",
                result.fits ? "FITS" : "DOES NOT FIT", request.model_states_only ? "model states" : "reserved",
                gib_inline(compared).c_str(),
                100.0 * static_cast<double>(compared) / static_cast<double>(memory.capacity_bytes),
                gib_inline(memory.capacity_bytes).c_str(),
                gib_inline(memory.capacity_bytes - result.headroom_bytes).c_str(),
                100 * request.memory_headroom_fraction);
  out << total << "  dominant term: " << breakdown.dominant_term() << "\n";
  if (request.training.finetune.mode == FinetuneMode::qlora) {
    std::int64_t constants = 0;
    for (const LayerSpec& layer : request.model.layers) {
      constants += layer.finetune ? layer.finetune->quant_constant_bytes : 0;
    }
    out << "  sharded_params include QLoRA's quantisation constants, " << gib(constants)
        << ", whole on every rank (bitsandbytes keeps them beside each weight; FSDP shards only parameters)\n";
  }
  if (!request.model_states_only) {
    out << "  peak at: " << (result.simulation.peak_op.empty() ? "step start" : result.simulation.peak_op)
        << " (simulated step " << result.simulation.step_time_s << " s)\n";
    // What one rank's collectives move per step (an MoE model's all-gathers carry every expert it gathers).
    out << "\ncollectives per step (one rank)\n";
    for (const auto& collective : result.simulation.collectives) {
      if (collective.count == 0) continue;
      std::snprintf(total, sizeof total, "  %-18s %6d ops %s   (%s bytes)\n", collective.kind.c_str(), collective.count,
                    gib(collective.bytes).c_str(), with_commas(collective.bytes).c_str());
      out << total;
    }
  }
  return out.str();
}

}  // namespace shardplan
