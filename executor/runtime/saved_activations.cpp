// SavedActivations: named fp32 tensors kept by forward for backward, and their byte count.
#include "saved_activations.h"

#include "errors.h"

namespace shardplan::runtime {

std::vector<float>& SavedActivations::put(std::string name, std::vector<float> values) {
  for (auto& [stored_name, stored] : tensors_) {
    if (stored_name == name) {
      stored = std::move(values);
      return stored;
    }
  }
  tensors_.emplace_back(std::move(name), std::move(values));
  return tensors_.back().second;
}

const std::vector<float>& SavedActivations::get(std::string_view name) const {
  for (const auto& [stored_name, stored] : tensors_) {
    if (stored_name == name) return stored;
  }
  throw InternalError("saved activations hold no tensor '" + std::string(name) + "'");
}

bool SavedActivations::has(std::string_view name) const {
  for (const auto& entry : tensors_) {
    if (entry.first == name) return true;
  }
  return false;
}

std::vector<std::string> SavedActivations::names() const {
  std::vector<std::string> result;
  for (const auto& entry : tensors_) result.push_back(entry.first);
  return result;
}

std::int64_t SavedActivations::bytes() const {
  std::size_t total = input.size() * sizeof(float) + ids.size() * sizeof(std::int32_t);
  for (const auto& entry : tensors_) total += entry.second.size() * sizeof(float);
  return static_cast<std::int64_t>(total);
}

}  // namespace shardplan::runtime
