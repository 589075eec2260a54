// The fuzz tests' deterministic mutations of input documents: text (truncations, byte replacements, deletions,
// duplicated chunks) and structure (every value replaced by odd values, every key deleted or renamed).
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fuzz_mutations {

using nlohmann::json;

// Every value's JSON pointer in a document (objects and arrays, depth first), the root excluded.
inline void collect_pointers(const json& value, const json::json_pointer& at, std::vector<json::json_pointer>& out) {
  if (value.is_object()) {
    for (const auto& item : value.items()) {
      const auto child = at / item.key();
      out.push_back(child);
      collect_pointers(item.value(), child, out);
    }
  } else if (value.is_array()) {
    for (std::size_t i = 0; i < value.size(); ++i) {
      const auto child = at / i;
      out.push_back(child);
      collect_pointers(value[i], child, out);
    }
  }
}

// Keys whose value is a layer count: a huge one builds that many layers (see the report of this test's author),
// so they get the large-integer replacement capped at the most layers a model may have (limits::kMaxLayers), which
// still builds quickly.
inline bool is_layer_count(const json::json_pointer& pointer) {
  const std::string key = pointer.back();
  return key == "num_layers" || key == "num_hidden_layers" || key == "n_layer";
}

inline std::vector<json> replacement_values(bool layer_count) {
  return {json(-1),
          json(0),
          json(1),
          json(1e308),
          json(-1e308),
          json(1.5),
          json(layer_count ? std::int64_t{10000} : std::int64_t{4611686018427387904}),
          json(18446744073709551615ULL),
          json("str"),
          json(""),
          json(nullptr),
          json::array(),
          json::object(),
          json(true),
          json::array({1, 2})};
}

// Text mutations of one file: truncations, byte replacements, deletions and chunk duplications.
inline std::vector<std::string> text_mutations(const std::string& text, std::mt19937& rng) {
  std::vector<std::string> out;
  const std::size_t n = text.size();
  if (n == 0) return out;
  const std::size_t step = std::max<std::size_t>(1, n / 80);  // ~80 truncation points per file
  for (std::size_t cut = 0; cut < n; cut += step) out.push_back(text.substr(0, cut));
  static constexpr char kReplacements[] = "}\"-0x\0,[:9 \\\n\xff{";  // '\0' and an invalid UTF-8 byte included
  const std::string replacements(kReplacements, sizeof kReplacements - 1);
  for (int i = 0; i < 60; ++i) {
    const std::size_t at = rng() % n;
    for (char c : replacements) {
      std::string mutated = text;
      mutated[at] = c;
      out.push_back(std::move(mutated));
    }
  }
  for (int i = 0; i < 80; ++i) {
    std::string mutated = text;
    mutated.erase(rng() % n, 1);
    out.push_back(std::move(mutated));
  }
  for (int i = 0; i < 60; ++i) {
    const std::size_t from = rng() % n;
    const std::size_t length = 1 + rng() % std::min<std::size_t>(40, n - from);
    std::string mutated = text;
    mutated.insert(rng() % (n + 1), text.substr(from, length));
    out.push_back(std::move(mutated));
  }
  return out;
}

// Structural mutations: every value replaced by each of the odd values, every key deleted, every key renamed.
inline std::vector<json> value_mutations(const json& document) {
  std::vector<json> out;
  std::vector<json::json_pointer> pointers;
  collect_pointers(document, json::json_pointer(), pointers);
  for (const auto& pointer : pointers) {
    for (const auto& value : replacement_values(is_layer_count(pointer))) {
      json mutated = document;
      mutated[pointer] = value;
      out.push_back(std::move(mutated));
    }
    json removed = document;
    json& parent = removed[pointer.parent_pointer()];
    if (parent.is_object()) {
      parent.erase(pointer.back());
      out.push_back(std::move(removed));
      json renamed = document;
      json& renamed_parent = renamed[pointer.parent_pointer()];
      renamed_parent[pointer.back() + "_"] = renamed_parent[pointer.back()];
      renamed_parent.erase(pointer.back());
      out.push_back(std::move(renamed));
    } else if (parent.is_array()) {
      parent.erase(static_cast<std::size_t>(std::stoul(pointer.back())));
      out.push_back(std::move(removed));
    }
  }
  // Whole-document replacements.
  for (const auto& value : replacement_values(false)) out.push_back(value);
  return out;
}

}  // namespace fuzz_mutations
