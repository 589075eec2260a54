// Wrapping: which consecutive layers form one FSDP unit; the layers left over form the root unit (FSDP's root module).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model_spec.h"

namespace shardplan {

struct LayerRange {
  std::size_t begin = 0;  // first layer
  std::size_t end = 0;    // one past the last layer
  bool operator==(const LayerRange&) const = default;
};

// Note [Root unit]: as in FSDP, every layer not covered by an explicit unit belongs to the root unit (the embedding,
// final norm and head in the usual wrapping). The root unit runs first in forward and last in backward, and FSDP keeps
// it unsharded from forward to backward because it is needed again at once (torch FSDP2 `fully_shard` on the root
// sets reshard_after_forward=False; FSDP1 never reshards the root's flat parameter after forward).
struct Wrapping {
  std::vector<LayerRange> units;  // explicit units, in layer order, non-overlapping
};

// One unit as the memory model and the schedule see it. Unit 0 is the root unit (possibly with no layers).
struct UnitInfo {
  std::string name;                 // "root", "model.layers.0", "model.layers.0-3"
  std::vector<std::size_t> layers;  // in model order
  std::int64_t param_count = 0;
  bool is_root = false;
  // Its padding and shards are the lowering's (planner/unit_layout.h, UnitLayout::padded_elements), the one padding
  // rule: FSDP2 pads each dtype group of a fine-tuned unit on its own.
};

Wrapping wrap_per_block(const ModelSpec& model);               // one unit per transformer block
Wrapping wrap_whole(const ModelSpec& model);                   // everything in the root unit
Wrapping wrap_blocks(const ModelSpec& model, std::size_t n);   // n consecutive blocks per unit
// "per-block", "whole", "N-blocks" (e.g. "4-blocks"). InputError otherwise.
Wrapping parse_units_policy(const std::string& text, const ModelSpec& model);

// Checks ranges (in bounds, ordered, non-overlapping, non-empty) and tied layers (both ends in one unit), then lists
// the units with the root first. InputError names the offending unit.
std::vector<UnitInfo> resolve_units(const ModelSpec& model, const Wrapping& wrapping);

}  // namespace shardplan
