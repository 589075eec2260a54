// Capacity sweeps: for each GPU type and count, the best plan that fits, its speed, time and cost to train a budget.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hardware_catalog.h"
#include "model_spec.h"
#include "search.h"
#include "training.h"

namespace shardplan {

// Note [Practical points]: a point that fits can still be useless — one H100 with CPU offload trains llama3-8b's
// 1e12 tokens in 7 years (2,567 days). The sweep flags every fitting point whose days to train the budget exceed a
// threshold (--max-days; default a year: a run the planner should not headline) and headlines the smallest
// practical count.
inline constexpr double kDefaultMaxPracticalDays = 365;

struct CapacityOptions {
  std::vector<std::string> gpus;       // catalog names
  int gpus_per_node = 0;               // 0: each GPU's default
  int min_gpus = 1;
  int max_gpus = 4096;
  double tokens = 1e12;                // the training budget
  std::int64_t global_batch_tokens = 0;  // 0: one micro-batch per rank (weak scaling); else fixed (strong scaling)
  std::string fabric;                  // "" : each GPU's default fabric
  // Note [Pinned knobs] (search.h): the knobs fixed at every point; the others each point's search tries
  // (search_options_for: tensor-parallel 1, 2, 4, 8 and the expert-parallel degrees the point takes).
  KnobPins pins;
  // Note [Memory headroom] (memory_headroom.h): each point's search keeps this share of the GPU's memory free.
  double memory_headroom_fraction = 0;
  // Note [Practical points]: a fitting point that needs more days than this to train `tokens` is flagged impractical
  // and is not the headline's smallest count.
  double max_practical_days = kDefaultMaxPracticalDays;
  // Calibrated profiles (shardplan.profile/v1 documents, with the file each came from): a profile applies to the
  // points of the GPU type it was measured on (its "device"); other types keep the catalog's defaults.
  std::vector<std::pair<nlohmann::json, std::string>> profiles;
  // Note [Parallel sweep] (capacity.cpp): points searched at once; the result is the same for any count. The CLI's
  // --jobs (default: the machine's cores).
  std::size_t threads = 1;
  // Called after each point with (done, total), from whichever thread finished it (one call at a time); the CLI draws a progress line when a sweep takes over a second.
  std::function<void(std::size_t, std::size_t)> progress;
};

struct CapacityPoint {
  std::string gpu;
  int gpus = 0;
  int nodes = 0;
  bool fits = false;
  std::string why_not;  // when it does not fit: the dominant memory term, host memory, or the batch being too small
  std::string knobs;    // the best plan's settings
  int pipeline_parallel = 1;  // its pipeline ranks (Note [Capacity answers] in capacity.cpp): 1 for FSDP's plans
  // Note [Capacity limits]: what limits the point — "memory" (GPU), "host_memory", "batch" or "pinned" (a knob the
  // user pinned that this point cannot take, e.g. a TP degree above its GPUs) when it does not fit;
  // "pipeline_bubble" when the best plan is a pipeline whose ranks idle a quarter of the step or more on average;
  // "communication" when a quarter or more of the best plan's step is exposed communication, else "compute".
  std::string limit;
  double step_time_s = 0;
  double compute_time_s = 0;  // the best plan's compute stream busy time
  double exposed_comm_s = 0;  // the part of its step the compute stream waits on communication or copies
  std::int64_t host_memory_bytes_per_node = 0;  // its offloaded states per node (0 without offload)
  double tokens_per_s = 0;
  double mfu = 0;
  std::int64_t peak_memory_bytes = 0;
  std::int64_t device_peak_bytes = 0;  // reserved + overhead, what the fits test compares (Note [Memory headroom])
  double days = 0;      // to train `tokens`
  bool practical = false;  // fits and days <= max_practical_days (Note [Practical points])
  double cost_usd = 0;  // days × 24 × GPUs × price per GPU-hour
  bool pareto = false;  // not dominated in (days, cost) by another fitting point
};

struct CapacityResult {
  std::vector<CapacityPoint> points;
  std::vector<std::pair<std::string, int>> smallest_fitting;  // per GPU type: the fewest GPUs that fit (0: none)
  std::vector<std::pair<std::string, int>> smallest_practical;  // the fewest that fit and are practical (0: none)
  double max_practical_days = 0;
  double memory_headroom_fraction = 0;
  double seconds = 0;
};

// GPU counts swept: powers of two from min to max; counts above one node must be whole nodes.
std::vector<int> capacity_counts(int min_gpus, int max_gpus, int gpus_per_node);

// Note [Capacity limits]: the share of a step spent waiting on communication above which a point counts as limited
// by it. At a quarter, adding GPUs (weak scaling) returns at most three quarters of their compute as throughput.
inline constexpr double kCommunicationLimitedShare = 0.25;

CapacityResult capacity_sweep(const ModelSpec& model, const HardwareCatalog& catalog, const TrainingConfig& training,
                              const CapacityOptions& options);

nlohmann::json to_json(const CapacityResult& result);

}  // namespace shardplan
