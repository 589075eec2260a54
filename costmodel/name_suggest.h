// Closest-name suggestions for unknown preset, GPU, fabric or enum names ("did you mean 'llama3-8b'?").
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace shardplan {

// Case-insensitive Levenshtein distance (Wagner–Fischer dynamic programme).
std::size_t edit_distance(std::string_view a, std::string_view b);

// The known names closest to `wanted`, best first: names that begin with `wanted` (case-insensitive), then those
// within a third of the longer name's length by edit distance, at most three; if none is that close, the single
// closest one.
std::vector<std::string> closest_names(std::string_view wanted, const std::vector<std::string>& known);

// " (did you mean 'a' or 'b'?)" or "" when `known` is empty.
std::string did_you_mean(std::string_view wanted, const std::vector<std::string>& known);

}  // namespace shardplan
