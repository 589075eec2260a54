// Per-rank memory terms: totals, names, the dominant term, and the breakdown of bytes by category.
#include "memory_model.h"

#include <algorithm>

namespace shardplan {

std::int64_t MemoryBreakdown::total_bytes() const {
  std::int64_t total = 0;
  for (const auto& [name, bytes] : terms()) total += bytes;
  return total;
}

std::vector<std::pair<std::string, std::int64_t>> MemoryBreakdown::terms() const {
  return {{"sharded_params", sharded_params_bytes},
          {"sharded_grads", sharded_grads_bytes},
          {"optimizer_states", optimizer_states_bytes},
          {"unsharded_params", unsharded_params_bytes},
          {"root_unit", root_unit_bytes},
          {"unsharded_grads", unsharded_grads_bytes},
          {"comm_buffers", comm_buffers_bytes},
          {"activations", activation_bytes},
          {"overhead", overhead_bytes}};
}

std::string MemoryBreakdown::dominant_term() const {
  const auto all = terms();
  return std::max_element(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.second < b.second; })
      ->first;
}

MemoryBreakdown breakdown_from_categories(const MemoryByCategory& bytes, std::int64_t padding_elements) {
  const auto at = [&](MemoryCategory category) { return bytes[static_cast<std::size_t>(category)]; };
  MemoryBreakdown breakdown;
  breakdown.sharded_params_bytes = at(MemoryCategory::sharded_params);
  breakdown.sharded_grads_bytes = at(MemoryCategory::sharded_grads);
  breakdown.optimizer_states_bytes = at(MemoryCategory::optimizer_states);
  breakdown.unsharded_params_bytes = at(MemoryCategory::unsharded_params);
  breakdown.root_unit_bytes = at(MemoryCategory::root_unit);
  breakdown.unsharded_grads_bytes = at(MemoryCategory::unsharded_grads);
  breakdown.comm_buffers_bytes = at(MemoryCategory::comm_buffers);
  breakdown.activation_bytes = at(MemoryCategory::activations);
  breakdown.overhead_bytes = at(MemoryCategory::overhead);
  breakdown.padding_elements = padding_elements;
  return breakdown;
}

nlohmann::json to_json(const MemoryBreakdown& breakdown) {
  nlohmann::json document = nlohmann::json::object();
  for (const auto& [name, bytes] : breakdown.terms()) document[name + "_bytes"] = bytes;
  document["model_states_bytes"] = breakdown.model_states_bytes();
  document["padding_elements"] = breakdown.padding_elements;
  document["total_bytes"] = breakdown.total_bytes();
  document["dominant_term"] = breakdown.dominant_term();
  return document;
}

}  // namespace shardplan
