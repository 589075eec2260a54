// Counter-based (SplitMix64 + Box–Muller) parameter initialisation over any slice of the model's flat parameter.
#include "param_init.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "counter_rng.h"
#include "errors.h"

namespace shardplan::runtime {
namespace {

enum class InitRule { normal, ones, zeros, kaiming_uniform };

InitRule rule_for(const TensorSlot& slot) {
  const std::string_view adapter = slot.name;
  if (adapter.ends_with("lora_A.weight")) return InitRule::kaiming_uniform;
  if (adapter.ends_with("lora_B.weight")) return InitRule::zeros;
  if (slot.shape.size() >= 2) return InitRule::normal;
  const std::string_view name = slot.name;
  return name.ends_with("bias") ? InitRule::zeros : InitRule::ones;
}

}  // namespace

double counter_normal(std::uint64_t seed, std::uint64_t index) {
  // 53 random bits each; u1 in (0, 1] keeps log() finite, u2 in [0, 1).
  const double scale = 1.0 / 9007199254740992.0;  // 2^-53
  const double u1 = static_cast<double>((splitmix64(seed, 2 * index) >> 11) + 1) * scale;
  const double u2 = static_cast<double>(splitmix64(seed, 2 * index + 1) >> 11) * scale;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

void init_parameters(const ModelLayout& layout, const InitOptions& options, std::int64_t first_element,
                     std::span<float> out) {
  const std::int64_t last_element = first_element + static_cast<std::int64_t>(out.size());
  if (first_element < 0 || last_element > layout.element_count) {
    throw InternalError("init range [" + std::to_string(first_element) + ", " + std::to_string(last_element) +
                        ") outside the model's " + std::to_string(layout.element_count) + " elements");
  }
  for (std::size_t layer = 0; layer < layout.layers.size(); ++layer) {
    for (const TensorSlot& slot : layout.layers[layer].tensors) {
      const std::int64_t begin = layout.layer_offsets_elements[layer] + slot.offset_elements;
      const std::int64_t lo = std::max(begin, first_element);
      const std::int64_t hi = std::min(begin + slot.element_count, last_element);
      const InitRule rule = rule_for(slot);
      // kaiming_uniform_(a=√5) on an [r × in] weight: bound 1/√fan_in with fan_in = in (its shape[1]).
      const double bound =
          rule == InitRule::kaiming_uniform ? 1.0 / std::sqrt(static_cast<double>(slot.shape.at(1))) : 0.0;
      for (std::int64_t element = lo; element < hi; ++element) {
        float value = rule == InitRule::ones ? 1.0f : 0.0f;
        if (rule == InitRule::normal) {
          const double z = counter_normal(options.seed, static_cast<std::uint64_t>(element));
          value = static_cast<float>(options.matrix_std * z);
        } else if (rule == InitRule::kaiming_uniform) {
          // 53 random bits: u in [0, 1).
          const std::uint64_t bits = splitmix64(options.seed, 2 * static_cast<std::uint64_t>(element)) >> 11;
          const double u = static_cast<double>(bits) / 9007199254740992.0;
          value = static_cast<float>(bound * (2.0 * u - 1.0));
        }
        out[static_cast<std::size_t>(element - first_element)] = value;
      }
    }
  }
}

std::vector<float> init_model_parameters(const ModelLayout& layout, const InitOptions& options) {
  std::vector<float> params(static_cast<std::size_t>(layout.element_count));
  init_parameters(layout, options, 0, params);
  return params;
}

}  // namespace shardplan::runtime
