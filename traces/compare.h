// Predicted-vs-measured comparison of two Timelines of the same StepSchedule: by op kind, by stream, step and memory.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "timeline.h"

namespace shardplan {

struct ComparisonRow {
  std::string name;  // op kind or stream
  int ops = 0;
  double predicted_s = 0;  // summed durations
  double measured_s = 0;
  double relative_error() const;  // (predicted − measured) / measured; 0 when both are 0
};

struct OpDifference {
  int op_id = -1;
  std::string name;
  double predicted_s = 0;
  double measured_s = 0;
};

struct Comparison {
  int measured_rank = 0;  // the rank compared (the predicted timeline describes every rank alike)
  std::size_t matched_ops = 0;
  std::size_t unmatched_ops = 0;  // in one timeline but not the other
  std::vector<ComparisonRow> by_kind;
  std::vector<ComparisonRow> by_stream;
  double predicted_step_s = 0;
  double measured_step_s = 0;
  long long predicted_peak_bytes = 0;
  long long measured_peak_bytes = 0;  // the largest over the measured ranks
  std::vector<OpDifference> worst_ops;  // the ten largest |predicted − measured|
  double step_relative_error() const;
  double peak_relative_error() const;
};

// Note [Trace fingerprint] (planner/step_analysis.h): whether two traces are of the same model and plan, by the
// "fingerprint" of their metadata. `mismatch`: what differs ("model llama3-70b (70553706496 parameters) vs
// tiny-llama (803968 parameters)"), empty when they agree; `unchecked`: which trace has no fingerprint (traces of
// older versions, or from other tools), empty when both have one.
struct TraceMatch {
  std::string mismatch;
  std::string unchecked;
};
TraceMatch match_traces(const Timeline& predicted, const Timeline& measured);

// Matches ops by op_id on `rank` of the measured timeline.
Comparison compare_timelines(const Timeline& predicted, const Timeline& measured, int rank = 0);

nlohmann::json to_json(const Comparison& comparison);
std::string render_text(const Comparison& comparison);

}  // namespace shardplan
