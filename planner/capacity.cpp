// The capacity sweep: one plan search per (GPU type, count), then days, cost and the Pareto front of time vs cost.
#include "capacity.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <limits>
#include <mutex>

#include "cluster.h"
#include "errors.h"
#include "indexed_pool.h"
#include "memory_headroom.h"
#include "optimizer_in_backward.h"
#include "search.h"
#include "search_context_parallel.h"
#include "search_pipeline.h"
#include "setting_floor_cache.h"

namespace shardplan {
namespace {

struct SweepJob {
  GpuSpec gpu;
  int count;
  int per_node;
};

// Note [Capacity answers]: a point is searched as `plan` searches its cluster, with the sweep's lighter FSDP search
// (below: no tightened floors, prefetch depth by refinement): FSDP's best plan over the context-parallel degrees Note
// [Context-parallel search] tries (search_context_parallel.h: sequences of 16,384 tokens or more), or the pipeline
// grid's (Note [Pipeline search] in search_pipeline.h) at cp 1 and those degrees where one fits and is faster, pruned
// by FSDP's best as there — and the grid alone where no FSDP plan of any TP degree takes a fixed global batch (Note
// [Degrees a batch rules out] in search_2d.cpp: 256 sequences do not split over 4096 GPUs, pp 4 x TP 8 takes them).
// The grid runs with the sweep's pins, headroom and floors, and not where `plan` leaves it out for the model or
// training (pipeline_model_conflict). Weak scaling (one micro-batch per GPU) rarely gives it a point: FSDP's full
// shard already spreads the states over every GPU, and the grid adds a bubble; a fixed batch of many micro-batches
// or at many GPUs is where it answers.
PipelineSearchResult pipeline_point_search(const ModelSpec& model, const Cluster& cluster,
                                           const HardwareProfile& profile, const TrainingConfig& training,
                                           const SearchOptions& search_options,
                                           const std::vector<int>& context_parallel_degrees, double known_step_s) {
  PipelineSearchOptions options;
  options.pipeline_degrees = pipeline_degree_candidates(model, cluster);
  if (options.pipeline_degrees.empty() || !pipeline_model_conflict(model, training, search_options.pins).empty()) {
    return {};
  }
  options.tensor_parallel_degrees = search_options.tensor_parallel_degrees;
  options.expert_parallel_degrees = search_options.expert_parallel_degrees.empty()
                                        ? std::vector<int>{1}
                                        : search_options.expert_parallel_degrees;
  options.pins = search_options.pins;
  const MemoryHeadroom usable{
      search_options.memory_cap_bytes > 0 ? search_options.memory_cap_bytes : cluster.gpu.memory_bytes,
      search_options.memory_headroom_fraction};
  options.usable_bytes = usable.usable_bytes();
  options.threads = search_options.threads;
  options.floor_cache = search_options.floor_cache;
  options.known_step_s = known_step_s;
  options.context_parallel_degrees = {1};
  for (const int degree : context_parallel_degrees) options.context_parallel_degrees.push_back(degree);
  return search_pipeline_plans(model, cluster, profile, training, options);
}

// The point's speed, memory, days and cost from its plan's simulated step.
void price_point(CapacityPoint& point, const CapacityOptions& options, const Cluster& cluster, double tokens_per_s) {
  point.tokens_per_s = tokens_per_s;
  point.days = options.tokens / tokens_per_s / 86400.0;
  point.practical = point.days <= options.max_practical_days;  // Note [Practical points]
  point.cost_usd = point.days * 24.0 * point.gpus * cluster.price_per_gpu_hour;
}

// Note [Capacity answers]: a pipeline plan's point. Its compute is the busiest rank's compute stream, its exposed
// share what that rank waits for beside it (communication and the bubble), and its limit the bubble where the ranks
// idle a quarter of the step or more on average (Note [Capacity limits]).
void pipeline_point(CapacityPoint& point, const CapacityOptions& options, const Cluster& cluster,
                    const PipelineCandidate& best) {
  const PipelineSimulation& simulation = best.analysis.simulation;
  point.fits = true;
  point.why_not.clear();
  point.knobs = best.knobs;
  point.pipeline_parallel = best.plan.pipeline.degree;
  point.step_time_s = simulation.step_time_s;
  point.compute_time_s = 0;
  point.peak_memory_bytes = point.device_peak_bytes = 0;
  for (const PipelineRankSummary& rank : simulation.ranks) {
    point.compute_time_s = std::max(point.compute_time_s, rank.compute_busy_s);
    point.peak_memory_bytes = std::max(point.peak_memory_bytes, rank.peak_memory_bytes);
    point.device_peak_bytes = std::max(point.device_peak_bytes, rank.device_peak_bytes);
  }
  point.exposed_comm_s = std::max(0.0, point.step_time_s - point.compute_time_s);
  point.host_memory_bytes_per_node = 0;  // no offload with a pipeline (pipeline_model_conflict)
  point.mfu = simulation.mfu;
  point.limit = simulation.bubble_fraction >= kCommunicationLimitedShare ? "pipeline_bubble"
                : point.exposed_comm_s >= kCommunicationLimitedShare * point.step_time_s ? "communication"
                                                                                          : "compute";
  price_point(point, options, cluster, simulation.tokens_per_s);
}

// One (GPU type, count) point: its own cluster and plan search, sharing nothing mutable with other points but the
// floors cache (Note [Shared setting floors], safe between threads), so the sweep runs points on several threads
// (Note [Parallel sweep]).
CapacityPoint sweep_point(const ModelSpec& model, const HardwareCatalog& catalog, const TrainingConfig& training,
                          const CapacityOptions& options, const SweepJob& job,
                          const std::shared_ptr<SettingFloorCache>& floor_cache) {
  Cluster cluster;
  cluster.gpu = job.gpu;
  cluster.gpus_per_node = std::min(job.count, job.per_node);
  cluster.nodes = job.count / cluster.gpus_per_node;
  cluster.fabric = catalog.fabric(options.fabric.empty() ? job.gpu.default_fabric : options.fabric);
  cluster.price_per_gpu_hour = job.gpu.price_per_gpu_hour;
  cluster.host_memory_bytes_per_node = job.gpu.host_memory_bytes_per_node;
  CapacityPoint point;
  point.gpu = job.gpu.name;
  point.gpus = job.count;
  point.nodes = cluster.nodes;
  TrainingConfig sized = training;
  // Note [Degrees a batch rules out] (search_2d.cpp): a batch FSDP alone cannot split over the GPUs may still take a
  // TP degree (256 sequences on 1024 GPUs at TP 4), so the search decides; where no degree does, this says why.
  const auto batch_refused = [&] {
    return "global batch of " + std::to_string(sized.global_batch) + " sequences does not divide over " +
           std::to_string(job.count) + " GPUs";
  };
  bool batch_divides = true;
  if (options.global_batch_tokens > 0) {
    sized.global_batch = options.global_batch_tokens / training.seq_len;
    batch_divides = sized.global_batch >= job.count && sized.global_batch % job.count == 0;
    if (sized.global_batch < 1) {
      point.why_not = batch_refused();
      point.limit = "batch";
    }
  }
  // Note [Optimizer in backward]: no gradient accumulation, so a searched micro-batch takes all of a rank's sequences.
  sized = one_micro_batch_per_step(sized, options.pins.micro_batch, job.count);
  SearchOptions search_options;
  search_options.with_baselines = false;
  // A sweep of many configurations: prefetch depth by refinement of each best plan, not jointly (Note [Prefetch
  // depth] doubled the benchmark sweep's time, 5.6 -> 11.4 s).
  search_options.joint_prefetch_depth = false;
  // Nor the tightened-floor searches (Note [Tightened floor]): they made the demo's sweep 6.7 -> 11.5 CPU s, and a
  // sweep's point is priced, not exported; `plan` runs them.
  search_options.tightened_floors = false;
  search_options.memory_headroom_fraction = options.memory_headroom_fraction;
  search_options.floor_cache = floor_cache;
  if (point.why_not.empty()) {
    // Note [Pinned knobs]: a pinned degree this point cannot take (or pins it cannot combine) is why it does not
    // fit; it is never searched without.
    try {
      search_options = search_options_for(options.pins, model, cluster, search_options);
      if (options.pins.tensor_parallel) {
        validate_tensor_parallel_degree(*options.pins.tensor_parallel, model, cluster.world_size(),
                                        cluster.gpus_per_node, "--tensor-parallel");
      }
    } catch (const InputError& error) {
      point.why_not = error.what();
      point.limit = "pinned";
    }
  }
  if (point.why_not.empty()) {
    HardwareProfile profile = profile_from_cluster(cluster);
    for (const auto& [document, origin] : options.profiles) {
      if (document.value("device", std::string()) == job.gpu.name) profile = apply_profile_json(profile, document, origin);
    }
    SearchResult search;
    ContextParallelOutcome context;
    try {
      search = search_with_context_parallel(model, cluster, profile, sized, search_options, 0, context);
    } catch (const InputError&) {
      if (batch_divides) throw;
      point.why_not = batch_refused() + " at any TP degree";
      point.limit = "batch";
      // Note [Capacity answers]: the grid alone. Where every point of it refuses the batch too, the why says so;
      // where some lowered but none fits, that.
      const PipelineSearchResult pipeline =
          pipeline_point_search(model, cluster, profile, sized, search_options,
                                context_parallel_candidates(model, cluster, sized),
                                std::numeric_limits<double>::infinity());
      if (pipeline.feasible) {
        pipeline_point(point, options, cluster, pipeline.best);
      } else if (pipeline.candidates > 0) {
        point.why_not = pipeline.refused == pipeline.candidates
                            ? batch_refused() + " at any TP degree or pipeline (pp x TP)"
                            : point.why_not + "; no pipeline plan fits";
      }
      return point;
    }
    point.fits = search.feasible;
    // Note [Capacity answers]: the grid beside FSDP's best, pruned by it.
    const PipelineSearchResult pipeline =
        pipeline_point_search(model, cluster, profile, sized, search_options, context.searched,
                              search.feasible ? search.best.summary.step_time_s
                                              : std::numeric_limits<double>::infinity());
    if (pipeline.feasible) {
      pipeline_point(point, options, cluster, pipeline.best);
    } else if (search.feasible) {
      const auto& summary = search.best.summary;
      point.knobs = search.best.knobs;
      point.step_time_s = summary.step_time_s;
      point.compute_time_s = summary.compute_time_s;
      point.exposed_comm_s = summary.exposed_comm_s;
      point.limit = summary.exposed_comm_s >= kCommunicationLimitedShare * summary.step_time_s ? "communication"
                                                                                                : "compute";
      point.host_memory_bytes_per_node = search.host_memory.per_node_bytes;
      point.mfu = summary.mfu;
      point.peak_memory_bytes = summary.peak_memory_bytes;
      point.device_peak_bytes = summary.device_peak_bytes;
      price_point(point, options, cluster, summary.tokens_per_s);
    } else if (search.diagnosis.host_memory_limited) {
      const HostMemoryUse& host = search.diagnosis.host_memory;
      point.why_not = "host memory: offloaded states need " + host_bytes_text(host.per_node_bytes) + " per node, " +
                      "a node has " + host_bytes_text(host.node_bytes);
      point.limit = "host_memory";
      point.peak_memory_bytes = search.diagnosis.smallest_peak_bytes;
      point.host_memory_bytes_per_node = host.per_node_bytes;
    } else {
      point.why_not = "memory: " + search.diagnosis.dominant_term + " dominates";
      point.limit = "memory";
      point.peak_memory_bytes = search.diagnosis.smallest_peak_bytes;
    }
  }
  return point;
}

}  // namespace

std::vector<int> capacity_counts(int min_gpus, int max_gpus, int gpus_per_node) {
  std::vector<int> counts;
  for (int count = 1; count <= max_gpus; count *= 2) {
    if (count < min_gpus) continue;
    if (count > gpus_per_node && count % gpus_per_node != 0) continue;  // whole nodes only beyond one node
    counts.push_back(count);
  }
  return counts;
}

CapacityResult capacity_sweep(const ModelSpec& model, const HardwareCatalog& catalog, const TrainingConfig& training,
                              const CapacityOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  if (options.gpus.empty()) throw InputError("--gpus: expected at least one GPU type");
  if (options.max_gpus < 1 || options.max_gpus > 1'000'000) throw InputError("--max-gpus: expected 1..1000000");
  if (!(options.tokens > 0)) throw InputError("--tokens: expected a positive token budget");
  std::vector<SweepJob> jobs;
  for (const auto& name : options.gpus) {
    const GpuSpec& gpu = catalog.gpu(name);
    const int per_node = options.gpus_per_node > 0 ? options.gpus_per_node : gpu.default_gpus_per_node;
    for (int count : capacity_counts(options.min_gpus, options.max_gpus, per_node)) jobs.push_back({gpu, count, per_node});
  }
  // Note [Parallel sweep]: the points are independent searches, so up to options.threads of them run at once (Note
  // [Indexed pool]); every point lands at its own index, so the result is the same for any thread count (a test says
  // so), a failing point's error is the one a sequential sweep throws, and the progress callback is called under a
  // lock in completion order.
  CapacityResult result;
  result.points.resize(jobs.size());
  std::size_t done = 0;
  std::mutex progress_mutex;
  // Note [Shared setting floors]: one model, so every point's searches share one micro-batch's floors.
  const auto floor_cache = std::make_shared<SettingFloorCache>();
  run_indexed(jobs.size(), options.threads, [&](std::size_t index) {
    result.points[index] = sweep_point(model, catalog, training, options, jobs[index], floor_cache);
    const std::lock_guard<std::mutex> lock(progress_mutex);
    ++done;
    if (options.progress) options.progress(done, jobs.size());
  });
  // Pareto front over (days, cost): a fitting point no other fitting point beats on both.
  for (auto& point : result.points) {
    if (!point.fits) continue;
    point.pareto = std::none_of(result.points.begin(), result.points.end(), [&](const CapacityPoint& other) {
      return other.fits && other.days <= point.days && other.cost_usd <= point.cost_usd &&
             (other.days < point.days || other.cost_usd < point.cost_usd);
    });
  }
  for (const auto& name : options.gpus) {
    int smallest = 0, smallest_practical = 0;
    for (const auto& point : result.points) {
      if (point.gpu != catalog.gpu(name).name || !point.fits) continue;
      if (smallest == 0 || point.gpus < smallest) smallest = point.gpus;
      if (point.practical && (smallest_practical == 0 || point.gpus < smallest_practical)) {
        smallest_practical = point.gpus;
      }
    }
    result.smallest_fitting.emplace_back(catalog.gpu(name).name, smallest);
    result.smallest_practical.emplace_back(catalog.gpu(name).name, smallest_practical);
  }
  result.max_practical_days = options.max_practical_days;
  result.memory_headroom_fraction = options.memory_headroom_fraction;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

nlohmann::json to_json(const CapacityResult& result) {
  nlohmann::json points = nlohmann::json::array();
  for (const auto& point : result.points) {
    points.push_back({{"gpu", point.gpu},
                      {"gpus", point.gpus},
                      {"nodes", point.nodes},
                      {"fits", point.fits},
                      {"why_not", point.why_not},
                      {"limit", point.limit},
                      {"plan", point.knobs},
                      {"pipeline_parallel", point.pipeline_parallel},
                      {"step_time_s", point.step_time_s},
                      {"compute_time_s", point.compute_time_s},
                      {"exposed_comm_s", point.exposed_comm_s},
                      {"host_memory_bytes_per_node", point.host_memory_bytes_per_node},
                      {"tokens_per_s", point.tokens_per_s},
                      {"mfu", point.mfu},
                      {"peak_memory_bytes", point.peak_memory_bytes},
                      {"device_peak_bytes", point.device_peak_bytes},
                      {"days", point.days},
                      {"practical", point.practical},
                      {"cost_usd", point.cost_usd},
                      {"pareto", point.pareto}});
  }
  nlohmann::json smallest = nlohmann::json::object();
  for (const auto& [gpu, count] : result.smallest_fitting) smallest[gpu] = count;
  nlohmann::json practical = nlohmann::json::object();
  for (const auto& [gpu, count] : result.smallest_practical) practical[gpu] = count;
  return {{"schema", "shardplan.capacity/v1"},
          {"points", std::move(points)},
          {"smallest_fitting_gpus", std::move(smallest)},
          {"smallest_practical_gpus", std::move(practical)},
          {"max_practical_days", result.max_practical_days},
          {"memory_headroom_fraction", result.memory_headroom_fraction},
          {"seconds", result.seconds}};
}

}  // namespace shardplan
