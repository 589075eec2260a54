// run_support: the flags, plan, trace merging and summary `shardplan run` shares between its CPU and GPU executors.
#include "run_support.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "chrome_trace.h"
#include "errors.h"
#include "inputs.h"
#include "lowering.h"
#include "plan_json.h"
#include "runner_support.h"
#include "step_analysis.h"
#include "simulator.h"

namespace shardplan::cli {

Plan run_plan(const RunFlags& flags, const ModelSpec& model, int world_size) {
  if (!flags.plan_file.empty()) {
    Plan plan = read_plan_file(flags.plan_file, model);
    // Before anything lowers it against the model resolved for its fine-tuning (run_model): the CPU executor trains
    // frozen and LoRA plans, the GPU executor full training only (its runner refuses the rest, also under auto).
    const char* executor = flags.device == "gpu" ? "GPU" : flags.device == "cpu" ? "CPU" : "CPU or GPU";
    runner::check_finetune_supported(plan, -1, {executor, {}, false, flags.device != "gpu"});
    runner::check_no_expert_parallel(plan, -1, {executor, {}});
    // Note [Pipeline runner] (executor/runner/pipeline_p2p.h): the CPU runner executes pipeline plans; the GPU
    // executor's runner lowers one schedule for every rank and has no point-to-point on NCCL yet.
    if (plan.pipeline.enabled() && flags.device == "gpu") {
      throw InputError(flags.plan_file + ": pipeline (degree " + std::to_string(plan.pipeline.degree) + ", " +
                       to_string(plan.pipeline.schedule) + ") is not yet executed by the GPU executor; run it on CPU "
                       "ranks (--device cpu)");
    }
    try {
      runner::check_not_compiled(plan, -1, {executor, {}});
    } catch (const InputError& error) {
      throw InputError(flags.plan_file + ": " + error.what());  // the file that asked for it, as for bad input
    }
    return plan;
  }
  TrainingConfig training;
  training.seq_len = flags.seq_len;
  training.micro_batch = flags.micro_batch;
  training.global_batch = flags.global_batch;
  training.precision = precision_recipe(flags.precision);
  training.checkpointing = checkpointing_from_string(flags.ac);
  training.checkpoint_every_blocks = flags.ac_every;
  // Both executors materialise attention probabilities; the plan says so, so predicted memory matches tracked.
  training.flash_attention = false;
  validate_training(training, model);
  return default_plan(model, training, parse_strategy(flags.strategy), parse_units_policy(flags.units, model),
                      world_size);
}

ModelSpec run_model(const ModelSpec& model, const Plan& plan) { return finetuned_for(model, plan.training); }

namespace {
// Note [Step watchdog]: the default timeout is this many predicted steps, and never under the floor. The catalog's
// CPU numbers predict this machine's steps within 2-5x (calibration fits 2-5x its per-op overheads), a shared
// machine's step drifts by tens of per cent and the first step warms allocators up; 50 predicted steps never trip
// on a slow step, and a stopped peer is still found within about a minute.
constexpr double kWatchdogStepFactor = 50;
constexpr double kWatchdogFloorS = 60;
}  // namespace

double run_watchdog_timeout_s(const RunFlags& flags, const std::vector<Plan>& plans, const ModelSpec& model,
                              const std::string& cluster) {
  if (flags.watchdog_timeout_s >= 0) return flags.watchdog_timeout_s;
  const Cluster machine = parse_cluster(cluster, HardwareCatalog::builtin());
  const HardwareProfile profile = profile_from_cluster(machine);
  double slowest_s = 0;
  for (const Plan& plan : plans) {
    if (plan.pipeline.enabled()) {  // one program per pipeline rank, simulated together (Note [Pipeline programs])
      const PipelineStepAnalysis pipeline = analyze_pipeline_step(run_model(model, plan), machine, profile, plan, false);
      slowest_s = std::max(slowest_s, pipeline.simulation.step_time_s);
      continue;
    }
    const StepSchedule schedule =
        lower_plan(plan, run_model(model, plan), {machine.world_size(), machine.gpus_per_node, 0});
    slowest_s = std::max(slowest_s, simulate(schedule, profile, false).summary.step_time_s);
  }
  return std::max(kWatchdogFloorS, kWatchdogStepFactor * slowest_s);
}

std::shared_ptr<comm::StepWatchdog> start_watchdog(double timeout_s, comm::Communicator& world,
                                                   std::function<void(const std::string&)> bring_down) {
  if (!(timeout_s > 0)) return nullptr;
  auto watchdog = std::make_shared<comm::StepWatchdog>(
      timeout_s, world.group().world_ranks.at(static_cast<std::size_t>(world.rank())),
      [bring_down = std::move(bring_down)](const std::string& message) {
        std::fprintf(stderr, "shardplan: watchdog: %s\n", message.c_str());
        std::fflush(stderr);
        bring_down(message);
      });
  world.set_wait_observer(watchdog);
  return watchdog;
}

Timeline merge_rank_timelines(const Timeline& mine, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const std::string text = to_chrome_trace(mine).dump();
  int length = static_cast<int>(text.size());
  std::vector<int> lengths(static_cast<std::size_t>(size)), offsets(static_cast<std::size_t>(size));
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, comm);
  std::string all;
  if (rank == 0) {
    for (int r = 1; r < size; ++r) offsets[r] = offsets[r - 1] + lengths[r - 1];
    all.resize(static_cast<std::size_t>(offsets.back() + lengths.back()));
  }
  MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0, comm);
  Timeline merged = mine;
  if (rank != 0) return merged;
  merged.events.clear();
  merged.memory.clear();
  for (int r = 0; r < size; ++r) {
    const auto part = nlohmann::json::parse(all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(lengths[r])));
    Timeline timeline = from_chrome_trace(part, "rank " + std::to_string(r));
    merged.events.insert(merged.events.end(), timeline.events.begin(), timeline.events.end());
    merged.memory.insert(merged.memory.end(), timeline.memory.begin(), timeline.memory.end());
  }
  return merged;
}

nlohmann::json memory_json(const MemoryByCategory& bytes) {
  nlohmann::json document = nlohmann::json::object();
  // The same keys as `simulate`'s memory_at_peak, so predicted and measured read side by side.
  for (std::size_t i = 0; i < kMemoryCategoryCount; ++i) {
    document[std::string(kMemoryCategoryNames[i]) + "_bytes"] = bytes[i];
  }
  return document;
}

double median_s(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0.0 : values[values.size() / 2];
}

void RunOutcome::add_step(std::int64_t step, runner::StepReport report) {
  step_times_s.push_back(report.step_time_s);
  nlohmann::json line = {{"step", step}, {"loss", report.loss}, {"step_time_s", report.step_time_s},
                         {"tokens_per_s", static_cast<double>(report.tokens) / report.step_time_s},
                         {"peak_memory_bytes", report.peak_bytes}};
  if (report.allocator_peak_bytes > 0) line["allocator_peak_bytes"] = report.allocator_peak_bytes;
  steps.push_back(std::move(line));
  if (keep_timelines) {
    recent_timelines.push_back({step, report.step_time_s, report.timeline});
    if (recent_timelines.size() > kTraceCandidateSteps) recent_timelines.pop_front();
  }
  if (report.peak_bytes > peak_bytes) {
    peak_bytes = report.peak_bytes;
    memory_at_peak = report.memory_at_peak;
  }
  last = std::move(report);
}

void print_step_line(std::int64_t step, const runner::StepReport& report, const std::string& plan_label) {
  const double tokens_per_s = static_cast<double>(report.tokens) / report.step_time_s;
  if (!plan_label.empty()) std::printf("%s ", plan_label.c_str());
  std::printf("step %lld: loss %.6f, %.4f s, %.0f tokens/s, tracked peak %.2f MiB (rank 0)\n",
              static_cast<long long>(step), report.loss, report.step_time_s, tokens_per_s,
              static_cast<double>(report.peak_bytes) / (1 << 20));
}

void write_run_trace(const RunFlags& flags, const Plan& plan, const ModelSpec& model, RunOutcome& outcome,
                     MPI_Comm comm, int world_size) {
  if (flags.trace_file.empty()) return;
  SHARDPLAN_CHECK(!outcome.recent_timelines.empty(), "a traced run keeps its steps' timelines (keep_timelines)");
  // The upper median, as median_s: the time of one of the candidate steps.
  std::vector<double> candidate_times_s;
  for (const auto& candidate : outcome.recent_timelines) candidate_times_s.push_back(candidate.step_time_s);
  const double median_candidate_s = median_s(candidate_times_s);
  auto traced = outcome.recent_timelines.begin();
  while (traced->step_time_s != median_candidate_s) ++traced;
  traced->timeline.metadata = {{"model", flags.model}, {"plan", plan.name}, {"plan_json", to_json(plan, model)},
                               {"fingerprint", trace_fingerprint(model, plan)},  // Note [Trace fingerprint]
                               {"world_size", world_size}, {"median_step_time_s", median_s(outcome.step_times_s)},
                               {"traced_step", traced->step}};
  const Timeline trace = merge_rank_timelines(traced->timeline, comm);
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank == 0) write_chrome_trace(trace, flags.trace_file);
}

nlohmann::json run_outcome_json(const RunFlags& flags, const ModelSpec& model, const Plan& plan,
                                const RunOutcome& outcome) {
  const runner::StepReport& last = outcome.last;
  nlohmann::json document = {{"schema", "shardplan.run/v1"}, {"model", model.name},
                             {"executor", outcome.executor}, {"world_size", outcome.world_size},
                             {"plan", to_json(plan, model)}, {"steps", outcome.steps},
                             // The median step (the first one warms caches and allocators up).
                             {"step_time_s", median_s(outcome.step_times_s)},
                             {"tokens_per_s", static_cast<double>(last.tokens) / median_s(outcome.step_times_s)},
                             {"peak_memory_bytes", outcome.peak_bytes},
                             {"memory_at_peak", memory_json(outcome.memory_at_peak)},
                             {"last_step_peak_memory_bytes", last.peak_bytes},
                             {"peak_by_category", memory_json(last.peak_by_category)}};
  if (!flags.plan_file.empty()) document["plan_file"] = flags.plan_file;
  if (last.allocator_peak_bytes > 0) document["allocator_peak_bytes"] = last.allocator_peak_bytes;
  if (!flags.trace_file.empty()) document["trace"] = flags.trace_file;
  if (outcome.resumed_from_step >= 0) document["resumed_from_step"] = outcome.resumed_from_step;
  if (!outcome.checkpoint.empty()) document["checkpoint"] = outcome.checkpoint;
  return document;
}

void print_run_outcome(const RunFlags& flags, const ModelSpec& model, const Plan& plan, const RunOutcome& outcome) {
  const runner::StepReport& last = outcome.last;
  if (flags.json) {
    print_json(run_outcome_json(flags, model, plan, outcome));
    return;
  }
  std::printf("model %s, plan '%s' (%zu units), %d ranks on the %s executor; tracked peak on rank 0 (%lld B, the "
              "largest step's) by category:\n",
              model.name.c_str(), plan.name.c_str(), plan.units.size(), outcome.world_size, outcome.executor.c_str(),
              outcome.peak_bytes);
  for (std::size_t i = 0; i < kMemoryCategoryCount; ++i) {
    if (outcome.memory_at_peak[i] == 0) continue;
    std::printf("  %-18s %12lld B\n", std::string(kMemoryCategoryNames[i]).c_str(), outcome.memory_at_peak[i]);
  }
  if (last.allocator_peak_bytes > 0) {
    std::printf("  device pool high-water mark %lld B\n", last.allocator_peak_bytes);
  }
  std::printf("median step time %.4f s over %zu step(s)\n", median_s(outcome.step_times_s),
              outcome.step_times_s.size());
  if (!flags.trace_file.empty()) std::cout << "trace written to " << flags.trace_file << "\n";
}

}  // namespace shardplan::cli
