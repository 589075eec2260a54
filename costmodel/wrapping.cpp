// Wrapping policies (per block, whole model, N blocks per unit) and their resolution into units with padding.
#include "wrapping.h"

#include <charconv>

#include "errors.h"

namespace shardplan {

Wrapping wrap_blocks(const ModelSpec& model, std::size_t n) {
  Wrapping wrapping;
  std::size_t index = 0;
  while (index < model.layers.size()) {
    if (model.layers[index].kind != LayerKind::transformer_block) {
      ++index;
      continue;
    }
    LayerRange range{index, index};
    std::size_t taken = 0;
    while (range.end < model.layers.size() && taken < n &&
           model.layers[range.end].kind == LayerKind::transformer_block) {
      ++range.end;
      ++taken;
    }
    wrapping.units.push_back(range);
    index = range.end;
  }
  return wrapping;
}

Wrapping wrap_per_block(const ModelSpec& model) { return wrap_blocks(model, 1); }

Wrapping wrap_whole(const ModelSpec&) { return Wrapping{}; }

Wrapping parse_units_policy(const std::string& text, const ModelSpec& model) {
  if (text == "per-block") return wrap_per_block(model);
  if (text == "whole") return wrap_whole(model);
  constexpr std::string_view suffix = "-blocks";
  if (text.size() > suffix.size() && text.ends_with(suffix)) {
    std::size_t n = 0;
    const char* last = text.data() + text.size() - suffix.size();
    const auto [end, error] = std::from_chars(text.data(), last, n);
    if (error == std::errc() && end == last && n >= 1) return wrap_blocks(model, n);
  }
  throw InputError("--units '" + text + "': expected per-block, whole or N-blocks (e.g. 4-blocks)");
}

std::vector<UnitInfo> resolve_units(const ModelSpec& model, const Wrapping& wrapping) {
  const std::size_t layer_count = model.layers.size();
  std::vector<int> owner(layer_count, 0);  // unit index of each layer; 0 = root
  std::vector<UnitInfo> units(1);
  units[0].name = "root";
  units[0].is_root = true;
  std::size_t previous_end = 0;
  for (std::size_t u = 0; u < wrapping.units.size(); ++u) {
    const auto& range = wrapping.units[u];
    const std::string label = "unit " + std::to_string(u + 1);
    if (range.begin >= range.end || range.end > layer_count) {
      throw InputError(label + ": layer range [" + std::to_string(range.begin) + ", " + std::to_string(range.end) +
                       ") is empty or beyond the model's " + std::to_string(layer_count) + " layers");
    }
    if (range.begin < previous_end) {
      throw InputError(label + ": layer range [" + std::to_string(range.begin) + ", " + std::to_string(range.end) +
                       ") overlaps or precedes the previous unit");
    }
    previous_end = range.end;
    UnitInfo unit;
    unit.name = model.layers[range.begin].name +
                (range.end - range.begin > 1 ? "-" + model.layers[range.end - 1].name : std::string());
    for (std::size_t layer = range.begin; layer < range.end; ++layer) {
      unit.layers.push_back(layer);
      owner[layer] = static_cast<int>(units.size());
    }
    units.push_back(std::move(unit));
  }
  for (std::size_t layer = 0; layer < layer_count; ++layer) {
    if (owner[layer] == 0) units[0].layers.push_back(layer);
  }
  for (std::size_t layer = 0; layer < layer_count; ++layer) {
    const auto& spec = model.layers[layer];
    if (spec.tied_to_layer && owner[*spec.tied_to_layer] != owner[layer]) {
      throw InputError("unit " + std::to_string(owner[layer]) + ": layer '" + spec.name + "' is tied to '" +
                       model.layers[*spec.tied_to_layer].name + "', which is in another unit; tied layers must " +
                       "share a unit (leave both to the root unit)");
    }
  }
  for (auto& unit : units) {
    for (auto layer : unit.layers) unit.param_count += model.layers[layer].param_count();
  }
  return units;
}

}  // namespace shardplan
