// Writer and reader of a layer's exact description (Note [Exact layers] in layer_json.h).
#include "layer_json.h"

#include <array>

#include "errors.h"
#include "input_limits.h"

namespace shardplan {
namespace {

// Note [Input limits]: the bounds a written value is read back within; far beyond any real layer.
constexpr std::int64_t kMaxFeatures = std::int64_t{1} << 40;   // a GEMM's width (derived ones fuse many projections)
constexpr std::int64_t kMaxHeadDim = std::int64_t{1} << 20;
constexpr std::int64_t kMaxKernelCount = std::int64_t{1} << 20;
constexpr std::int64_t kMaxExperts = std::int64_t{1} << 20;
constexpr std::int64_t kMaxLayerElements = std::int64_t{1} << 44;  // as model_json.cpp's per-layer parameter bound
constexpr double kMaxCapacityFactor = 1e6;

struct ActivationField {
  const char* name;
  double ActivationFootprint::*member;
};
// Every double of ActivationFootprint, under its C++ name: one table, so the writer and the reader cannot disagree.
constexpr std::array<ActivationField, 19> kActivationFields{{
    {"elements_per_token", &ActivationFootprint::elements_per_token},
    {"mask_bytes_per_token", &ActivationFootprint::mask_bytes_per_token},
    {"score_elements_per_token_per_position", &ActivationFootprint::score_elements_per_token_per_position},
    {"score_mask_bytes_per_token_per_position", &ActivationFootprint::score_mask_bytes_per_token_per_position},
    {"flash_stat_bytes_per_token", &ActivationFootprint::flash_stat_bytes_per_token},
    {"fp32_bytes_per_token", &ActivationFootprint::fp32_bytes_per_token},
    {"checkpoint_elements_per_token", &ActivationFootprint::checkpoint_elements_per_token},
    {"selective_op_elements_per_token", &ActivationFootprint::selective_op_elements_per_token},
    {"compiled_recomputed_elements_per_token", &ActivationFootprint::compiled_recomputed_elements_per_token},
    {"compiled_unread_selective_op_elements_per_token",
     &ActivationFootprint::compiled_unread_selective_op_elements_per_token},
    {"forward_workspace_fp32_per_token", &ActivationFootprint::forward_workspace_fp32_per_token},
    {"backward_workspace_fp32_per_token", &ActivationFootprint::backward_workspace_fp32_per_token},
    {"backward_workspace_elements_per_token", &ActivationFootprint::backward_workspace_elements_per_token},
    {"forward_workspace_elements_per_token", &ActivationFootprint::forward_workspace_elements_per_token},
    {"eager_norm_elements_per_token", &ActivationFootprint::eager_norm_elements_per_token},
    {"eager_norm_fp32_elements_per_token", &ActivationFootprint::eager_norm_fp32_elements_per_token},
    {"eager_upcast_elements_per_token", &ActivationFootprint::eager_upcast_elements_per_token},
    {"eager_attention_elements_per_token", &ActivationFootprint::eager_attention_elements_per_token},
    {"eager_score_fp32_elements_per_token_per_position",
     &ActivationFootprint::eager_score_fp32_elements_per_token_per_position},
}};
// A field added to ActivationFootprint must join the table, or a written model loses it silently (issue 35's defect).
static_assert(sizeof(ActivationFootprint) == (kActivationFields.size() + 1) * sizeof(double),
              "every ActivationFootprint double is in kActivationFields (the +1: fp32_tensor_count, padded)");

nlohmann::json flops_to_json(const LayerFlops& flops) {
  return {{"matmul_flops_per_token", flops.matmul_flops_per_token},
          {"attention_flops_per_token_per_position", flops.attention_flops_per_token_per_position},
          {"frozen_weight_flops_per_token", flops.frozen_weight_flops_per_token},
          {"causal", flops.causal_attention},
          {"attention_window", flops.attention_window},
          {"attention_chunked", flops.attention_chunked}};
}

// A chunk is a window a query attends within (Note [Chunked attention]): chunked without a window is no attention at
// all, refused rather than read as full attention.
std::int64_t read_window(const JsonObjectReader& reader, const char* window_key, const char* chunked_key,
                         bool& chunked) {
  const std::int64_t window = reader.optional_int_in_range(window_key, 0, limits::kMaxPositions).value_or(0);
  chunked = reader.boolean(chunked_key, false);
  if (chunked && window == 0) reader.fail(chunked_key, std::string("false when ") + window_key + " is 0 or absent");
  return window;
}

void read_flops(const JsonObjectReader& reader, LayerFlops& flops) {
  reader.reject_unknown_keys({"matmul_flops_per_token", "attention_flops_per_token_per_position",
                              "frozen_weight_flops_per_token", "causal", "attention_window", "attention_chunked"});
  const limits::Range range{0, limits::kMaxLayerFlopsPerToken};
  reader.update("matmul_flops_per_token", flops.matmul_flops_per_token, range);
  reader.update("attention_flops_per_token_per_position", flops.attention_flops_per_token_per_position, range);
  reader.update("frozen_weight_flops_per_token", flops.frozen_weight_flops_per_token, range);
  flops.causal_attention = reader.boolean("causal", flops.causal_attention);
  flops.attention_window = read_window(reader, "attention_window", "attention_chunked", flops.attention_chunked);
}

nlohmann::json activations_to_json(const ActivationFootprint& activations) {
  nlohmann::json object = nlohmann::json::object();
  for (const ActivationField& field : kActivationFields) object[field.name] = activations.*field.member;
  object["fp32_tensor_count"] = activations.fp32_tensor_count;
  return object;
}

void read_activations(const JsonObjectReader& reader, ActivationFootprint& activations) {
  std::vector<std::string> keys{"fp32_tensor_count"};
  for (const ActivationField& field : kActivationFields) keys.emplace_back(field.name);
  reader.reject_unknown_keys(keys);
  for (const ActivationField& field : kActivationFields) {
    reader.update(field.name, activations.*field.member, {0, limits::kMaxActivationElementsPerToken});
  }
  activations.fp32_tensor_count = static_cast<int>(
      reader.optional_int_in_range("fp32_tensor_count", 1, kMaxKernelCount).value_or(activations.fp32_tensor_count));
}

nlohmann::json traffic_to_json(const ElementwiseTraffic& traffic) {
  return {{"act_elements", traffic.act_elements},
          {"fp32_elements", traffic.fp32_elements},
          {"byte_elements", traffic.byte_elements},
          {"kernels", traffic.kernels}};
}

ElementwiseTraffic read_traffic(const JsonObjectReader& reader) {
  reader.reject_unknown_keys({"act_elements", "fp32_elements", "byte_elements", "kernels"});
  ElementwiseTraffic traffic;
  const limits::Range range{0, limits::kMaxActivationElementsPerToken};
  reader.update("act_elements", traffic.act_elements, range);
  reader.update("fp32_elements", traffic.fp32_elements, range);
  reader.update("byte_elements", traffic.byte_elements, range);
  traffic.kernels = static_cast<int>(reader.optional_int_in_range("kernels", 0, kMaxKernelCount).value_or(0));
  return traffic;
}

nlohmann::json kernels_to_json(const LayerKernelSpec& kernels) {
  // A base model's kernels (Note [Exact layers]): fine-tuning and tensor parallelism are applied after reading.
  SHARDPLAN_CHECK(kernels.tensor_parallel_degree == 1 && kernels.tp_forward.empty() && kernels.tp_backward.empty(),
                  "a model is written before tensor parallelism shards it");
  nlohmann::json projections = nlohmann::json::array();
  for (const ProjectionSpec& projection : kernels.projections) {
    SHARDPLAN_CHECK(!projection.frozen_weight && !projection.quantized && projection.lora_rank == 0,
                    "a model is written before fine-tuning resolves it");
    projections.push_back({{"name", projection.name},
                           {"in_features", projection.in_features},
                           {"out_features", projection.out_features},
                           {"saved_by_op_policy", projection.saved_by_op_policy}});
  }
  nlohmann::json elementwise = nlohmann::json::array();
  for (const ElementwiseSpec& spec : kernels.elementwise) {
    elementwise.push_back({{"name", spec.name},
                           {"forward", traffic_to_json(spec.forward)},
                           {"backward", traffic_to_json(spec.backward)},
                           {"recomputed_by_op_policy", spec.recomputed_by_op_policy}});
  }
  nlohmann::json object = {{"projections", std::move(projections)},
                           {"elementwise", std::move(elementwise)},
                           {"embedding_lookup", kernels.embedding_lookup}};
  if (const auto& attention = kernels.attention) {
    object["attention"] = {{"heads", attention->heads},       {"head_dim", attention->head_dim},
                           {"causal", attention->causal},     {"window", attention->window},
                           {"chunked", attention->chunked}};
  }
  return object;
}

LayerKernelSpec read_kernels(const JsonObjectReader& reader) {
  reader.reject_unknown_keys({"projections", "attention", "elementwise", "embedding_lookup"});
  LayerKernelSpec kernels;
  const auto projections = reader.has("projections") ? reader.array("projections", true) : std::vector<nlohmann::json>{};
  for (std::size_t i = 0; i < projections.size(); ++i) {
    const JsonObjectReader projection = reader.element("projections", i, projections[i]);
    projection.reject_unknown_keys({"name", "in_features", "out_features", "saved_by_op_policy"});
    kernels.projections.push_back({projection.string("name"), projection.int_in_range("in_features", 1, kMaxFeatures),
                                   projection.int_in_range("out_features", 1, kMaxFeatures),
                                   projection.boolean("saved_by_op_policy", false)});
  }
  if (reader.has("attention")) {
    const JsonObjectReader attention = reader.object("attention");
    attention.reject_unknown_keys({"heads", "head_dim", "causal", "window", "chunked"});
    AttentionSpec spec{attention.int_in_range("heads", 1, limits::kMaxHeads),
                       attention.int_in_range("head_dim", 1, kMaxHeadDim), attention.boolean("causal", true)};
    spec.window = read_window(attention, "window", "chunked", spec.chunked);
    kernels.attention = spec;
  }
  const auto elementwise = reader.has("elementwise") ? reader.array("elementwise", true) : std::vector<nlohmann::json>{};
  for (std::size_t i = 0; i < elementwise.size(); ++i) {
    const JsonObjectReader entry = reader.element("elementwise", i, elementwise[i]);
    entry.reject_unknown_keys({"name", "forward", "backward", "recomputed_by_op_policy"});
    ElementwiseSpec spec;
    spec.name = entry.string("name");
    spec.forward = read_traffic(entry.object("forward"));
    spec.backward = read_traffic(entry.object("backward"));
    spec.recomputed_by_op_policy = entry.boolean("recomputed_by_op_policy", true);
    kernels.elementwise.push_back(std::move(spec));
  }
  kernels.embedding_lookup = reader.boolean("embedding_lookup", false);
  return kernels;
}

nlohmann::json moe_to_json(const MoeLayerRouting& moe) {
  return {{"num_experts", moe.num_experts},
          {"experts_per_token", moe.experts_per_token},
          {"capacity_factor", moe.capacity_factor},
          {"hidden_size", moe.hidden_size},
          {"routed_expert_elements", moe.routed_expert_elements}};
}

MoeLayerRouting read_moe(const JsonObjectReader& reader) {
  reader.reject_unknown_keys(
      {"num_experts", "experts_per_token", "capacity_factor", "hidden_size", "routed_expert_elements"});
  MoeLayerRouting moe;
  moe.num_experts = reader.int_in_range("num_experts", 1, kMaxExperts);
  moe.experts_per_token = reader.int_in_range("experts_per_token", 1, moe.num_experts);
  moe.capacity_factor =
      reader.optional_number_in_range("capacity_factor", 0, kMaxCapacityFactor).value_or(kDroplessCapacityFactor);
  if (moe.capacity_factor <= 0) reader.fail("capacity_factor", "a positive number");
  moe.hidden_size = reader.int_in_range("hidden_size", 1, limits::kMaxHiddenSize);
  moe.routed_expert_elements = reader.int_in_range("routed_expert_elements", 0, kMaxLayerElements);
  return moe;
}

}  // namespace

nlohmann::json layer_detail_to_json(const LayerSpec& layer) {
  nlohmann::json object = {{"flops", flops_to_json(layer.flops)}, {"activations", activations_to_json(layer.activations)}};
  if (layer.kernels) object["kernels"] = kernels_to_json(*layer.kernels);
  if (layer.moe) object["moe"] = moe_to_json(*layer.moe);
  return object;
}

void read_layer_detail(const JsonObjectReader& entry, LayerSpec& layer) {
  if (entry.has("flops")) read_flops(entry.object("flops"), layer.flops);
  if (entry.has("activations")) read_activations(entry.object("activations"), layer.activations);
  if (entry.has("kernels")) layer.kernels = read_kernels(entry.object("kernels"));
  if (entry.has("moe")) layer.moe = read_moe(entry.object("moe"));
}

}  // namespace shardplan
