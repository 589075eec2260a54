// Closest-name suggestions by edit distance, used by every "unknown name" error.
#include "name_suggest.h"

#include <algorithm>
#include <cctype>
#include <numeric>

#include "input_limits.h"

namespace shardplan {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> previous(b.size() + 1), current(b.size() + 1);
  std::iota(previous.begin(), previous.end(), std::size_t{0});
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                        std::tolower(static_cast<unsigned char>(b[j - 1]));
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (same ? 0 : 1)});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

namespace {

bool starts_with_ignoring_case(std::string_view name, std::string_view prefix) {
  if (prefix.empty() || prefix.size() > name.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(name[i])) != std::tolower(static_cast<unsigned char>(prefix[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::vector<std::string> closest_names(std::string_view wanted, const std::vector<std::string>& known) {
  // Only the first bytes count (Note [Echoed values]: what an error line shows of it): no known name is that long,
  // and the edit distance of a 3 MB name to every catalog entry took 7.5 s (issue 37).
  wanted = wanted.substr(0, std::min(wanted.size(), limits::kMaxEchoedBytes));
  // A name that `wanted` begins is what a user who typed a shortened name means ("bf16" for bf16-mixed, "h100" for
  // H100-80GB), however many characters it lacks: such names score 0, ahead of every edit-distance match.
  std::vector<std::pair<std::size_t, std::string>> scored;
  for (const auto& name : known) {
    scored.emplace_back(starts_with_ignoring_case(name, wanted) ? 0 : edit_distance(wanted, name), name);
  }
  std::stable_sort(scored.begin(), scored.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> result;
  for (const auto& [distance, name] : scored) {
    const std::size_t longer = std::max(wanted.size(), name.size());
    if (3 * distance <= longer && result.size() < 3) result.push_back(name);
  }
  if (result.empty() && !scored.empty()) result.push_back(scored.front().second);
  return result;
}

std::string did_you_mean(std::string_view wanted, const std::vector<std::string>& known) {
  const auto names = closest_names(wanted, known);
  if (names.empty()) return "";
  std::string text = " (did you mean ";
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) text += (i + 1 == names.size()) ? " or " : ", ";
    text += "'" + names[i] + "'";
  }
  return text + "?)";
}

}  // namespace shardplan
