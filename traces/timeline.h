// Timeline: what an interpreter of a StepSchedule produced — op intervals per rank and stream, and memory over time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "memory_category.h"

namespace shardplan {

// One executed (or simulated) op. Predicted and measured timelines use the same fields so they overlay and subtract.
struct TimelineEvent {
  int op_id = -1;            // the StepSchedule op id; matches predicted to measured
  std::string name;          // "forward model.layers.3", "all_gather unit 4"
  std::string kind;          // "forward", "all_gather", ... (schedule op kind)
  std::string stream;        // "compute", "all_gather", "reduce_scatter", "all_reduce", "h2d", "d2h"
  int rank = 0;
  double start_s = 0;
  double end_s = 0;
  std::int64_t bytes = 0;    // communication payload or copy size
  double flops = 0;
  int unit = -1;
  int layer = -1;
  int micro_batch = 0;
  double duration_s() const { return end_s - start_s; }
};

// Device memory by category on one rank after the change at `time_s`.
struct MemorySample {
  double time_s = 0;
  int rank = 0;
  MemoryByCategory bytes{};
  long long total_bytes() const;
};

struct Timeline {
  std::string source;  // "predicted" (simulator) or "measured" (executor)
  std::vector<TimelineEvent> events;
  std::vector<MemorySample> memory;  // in time order per rank
  nlohmann::json metadata = nlohmann::json::object();  // model, cluster, plan name, summary...

  std::vector<std::string> streams() const;  // distinct stream names in first-seen order
  std::vector<int> ranks() const;            // distinct ranks, sorted
  double span_s() const;                     // last end − first start
  long long peak_memory_bytes(int rank) const;
};

}  // namespace shardplan
