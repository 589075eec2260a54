// ErrorBand: how far off a step-time or memory prediction typically is, from the published-runs check's residuals
// for runs like the one predicted (Note [Error bands]); the memory band also sets --memory-headroom's default.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardplan {

// Note [Error bands]: benchmarks/published-runs/run_dev_set.py predicts each published FSDP run (dev-runs.csv) and
// compares: step-time error = predicted / published step − 1, memory error = predicted / published reserved peak − 1
// (torch.cuda.max_memory_reserved, on the rows that publish it). benchmarks/published-runs/error_bands.py groups those
// residuals by GPU class (the catalog name before its first '-': "A100" holds A100-40GB and A100-80GB) and run kind
// (single-node or multi-node pre-training: every published run is pre-training) and writes, per group and metric, the
// runs, the median |error| and the largest underestimate into error_band_data.cpp; the meson test `error-bands`
// fails when that file differs from what the runs give now, so the bands cannot go stale.
//
// The band printed is the median |error| — "typically": half of the published runs like this one came within it (the
// statistic of README's accuracy targets, robust to the few long-sequence outliers). A group with fewer than
// kMinBandRuns runs is not used: the GPU class over all run kinds stands in, and where the class has too few too (or
// the GPU no published run), the whole set — the overall band, said so in the label.
//
// The memory headroom's default (Note [Memory headroom] in planner/memory_headroom.h) is the memory band's largest
// underestimate rounded up to a whole percent: a plan predicted to fill the rest is measured within the cap on every
// published run of the band. The median would leave half of them over it.
struct ErrorBand {
  double relative_error = 0;         // median |predicted / published − 1| of the runs
  double largest_underestimate = 0;  // the largest −error (prediction below the published figure), ≥ 0
  int runs = 0;
  // "on H100, multi-node pre-training", "on H100, all run kinds — only 3 single-node pre-training",
  // "the overall band — none on RTX4090"
  std::string group_label;
  bool overall = false;  // the whole set stands in
};

// The bands of one prediction: the step time and the reserved peak.
struct PredictionErrorBands {
  ErrorBand step_time;
  ErrorBand memory;
};

// A group with fewer runs is not used (Note [Error bands]): the median of fewer than 5 values rests on one or two
// runs; from 5 on, two runs lie on each side of it.
inline constexpr int kMinBandRuns = 5;

// The run kind the bands tell apart.
struct RunKind {
  int nodes = 1;
  bool fine_tuning = false;  // no published run is: a fine-tuning plan gets its GPU class's or the overall band
};

// The bands for a prediction on `gpu_name` (a catalog name: "H100-80GB") of this run kind.
PredictionErrorBands error_bands_for(const std::string& gpu_name, const RunKind& kind);

// --memory-headroom's default, in percent (Note [Error bands]): the memory band's largest underestimate, rounded up.
double memory_headroom_percent(const ErrorBand& memory);

// "typically ±11.4 %, from 13 published runs on H100, multi-node pre-training"
std::string describe(const ErrorBand& band);

// {"relative_error", "largest_underestimate", "runs", "group", "overall"}
nlohmann::json to_json(const ErrorBand& band);
// {"step_time": band, "memory": band, "statistic", "min_runs_per_group", "source"}
nlohmann::json to_json(const PredictionErrorBands& bands);

// The data error_bands.py writes (error_band_data.cpp).
enum class ErrorMetric { step_time, memory };
struct ErrorBandGroup {
  ErrorMetric metric = ErrorMetric::step_time;
  std::string gpu_class;  // "": every class
  std::string run_kind;   // "single-node pre-training", "multi-node pre-training"; "": every kind
  int runs = 0;
  double median_abs_error = 0;
  double largest_underestimate = 0;
};
struct GpuClass {
  std::string name;                    // "H100"
  std::vector<std::string> gpu_names;  // the published GPU names it holds: "H100-80GB", "H100-96GB"
};
std::vector<ErrorBandGroup> published_error_band_groups();
std::vector<GpuClass> published_gpu_classes();

}  // namespace shardplan
