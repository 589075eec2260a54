// The published-runs check's error bands: written by benchmarks/published-runs/error_bands.py --write, do not edit.
#include "error_band.h"

namespace shardplan {

// Note [Error bands] (error_band.h): 68 rows of benchmarks/published-runs/dev-runs.csv, 0 failed.
std::vector<ErrorBandGroup> published_error_band_groups() {
  // metric, GPU class ("": any), run kind ("": any), runs, median |error|, largest underestimate
  return {
      {ErrorMetric::step_time, "A100", "multi-node pre-training", 25, 0.0619, 0.2950},
      {ErrorMetric::step_time, "A100", "single-node pre-training", 18, 0.0643, 0.1360},
      {ErrorMetric::step_time, "H100", "multi-node pre-training", 13, 0.1826, 0.2551},
      {ErrorMetric::step_time, "H100", "single-node pre-training", 12, 0.0852, 0.2428},
      {ErrorMetric::step_time, "A100", "", 43, 0.0628, 0.2950},
      {ErrorMetric::step_time, "H100", "", 25, 0.1389, 0.2551},
      {ErrorMetric::step_time, "", "", 68, 0.0728, 0.2950},
      {ErrorMetric::memory, "H100", "multi-node pre-training", 4, 0.0077, 0.0213},
      {ErrorMetric::memory, "H100", "single-node pre-training", 3, 0.0048, 0.0189},
      {ErrorMetric::memory, "H100", "", 7, 0.0058, 0.0213},
      {ErrorMetric::memory, "", "", 7, 0.0058, 0.0213},
  };
}

// The published GPU names each class holds.
std::vector<GpuClass> published_gpu_classes() {
  return {
      {"A100", {"A100-40GB", "A100-80GB"}},
      {"H100", {"H100-80GB", "H100-96GB"}},
  };
}

}  // namespace shardplan
