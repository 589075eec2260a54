// Timeline queries: distinct streams and ranks, the span of a step, and the memory peak of one rank.
#include "timeline.h"

#include <algorithm>
#include <numeric>

namespace shardplan {

long long MemorySample::total_bytes() const { return std::accumulate(bytes.begin(), bytes.end(), 0LL); }

std::vector<std::string> Timeline::streams() const {
  // First-seen order (not sorted) so "compute" stays the first lane and thread ids stay stable across write/read.
  std::vector<std::string> names;
  for (const auto& event : events) {
    if (std::find(names.begin(), names.end(), event.stream) == names.end()) names.push_back(event.stream);
  }
  return names;
}

std::vector<int> Timeline::ranks() const {
  // A rank that only reported memory (no ops) is still a rank of the run.
  std::vector<int> result;
  for (const auto& event : events) result.push_back(event.rank);
  for (const auto& sample : memory) result.push_back(sample.rank);
  std::sort(result.begin(), result.end());
  result.erase(std::unique(result.begin(), result.end()), result.end());
  return result;
}

double Timeline::span_s() const {
  // Events need not be in time order (they are grouped per stream), so take the extremes over all of them.
  if (events.empty()) return 0;
  double first = events.front().start_s;
  double last = events.front().end_s;
  for (const auto& event : events) {
    first = std::min(first, event.start_s);
    last = std::max(last, event.end_s);
  }
  return last - first;
}

long long Timeline::peak_memory_bytes(int rank) const {
  long long peak = 0;
  for (const auto& sample : memory) {
    if (sample.rank == rank) peak = std::max(peak, sample.total_bytes());
  }
  return peak;
}

}  // namespace shardplan
