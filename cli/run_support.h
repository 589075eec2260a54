// What `shardplan run` shares between its CPU (MPI + Eigen) and GPU (NCCL + CUDA) executors: the flags, the plan
// a run trains, merging every rank's measured timeline, and the summary it prints.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model_spec.h"
#include "plan.h"
#include "runner.h"
#include "step_watchdog.h"
#include "timeline.h"

namespace shardplan::cli {

struct RunFlags {
  std::string model = "tiny-llama";
  std::string plan_file;                 // the plan this run trains (per_plan_flags sets it from plan_files)
  std::vector<std::string> plan_files;   // --plan, each given: several run interleaved (Note [Interleaved runs])
  std::string strategy = "full_shard";
  std::string units = "per-block";
  std::string ac = "none";
  std::int64_t ac_every = 1;
  std::string precision = "fp32";
  std::string device = "auto";  // auto: the GPU executor when it is built and a CUDA device is usable, else the CPU
  std::string data_file = "/usr/share/common-licenses/GPL-3";
  std::string trace_file;
  std::vector<std::string> trace_files;  // --trace, one per --plan
  std::int64_t steps = 3;
  std::int64_t seq_len = 64;
  std::int64_t micro_batch = 1;
  std::int64_t global_batch = 0;
  std::uint64_t seed = 0;
  bool json = false;
  std::string checkpoint_dir;         // empty: no checkpoints
  std::int64_t checkpoint_every = 0;  // 0: one checkpoint after the last step
  bool resume = false;
  double watchdog_timeout_s = -1;     // Note [Step watchdog]: < 0 the default (run_watchdog_timeout_s), 0 none
};

// Note [Step watchdog] (executor/comm/step_watchdog.h): the timeout of a run's watchdog — --watchdog-timeout when
// given (0: no watchdog), otherwise kWatchdogStepFactor × the slowest plan's predicted step time on `cluster` (the
// catalog's numbers), at least kWatchdogFloorS.
double run_watchdog_timeout_s(const RunFlags& flags, const std::vector<Plan>& plans, const ModelSpec& model,
                              const std::string& cluster);
// The watchdog of a run (null without one), observing `world` and so every group split from it afterwards. On
// expiry it prints "shardplan: watchdog: <message>" and calls `bring_down` (which must not return).
std::shared_ptr<comm::StepWatchdog> start_watchdog(double timeout_s, comm::Communicator& world,
                                                   std::function<void(const std::string&)> bring_down);

// The plan file, or FSDP's usual plan for the world from the flags (attention probabilities materialised, as both
// executors' kernels do, so predicted memory matches tracked).
Plan run_plan(const RunFlags& flags, const ModelSpec& model, int world_size);
// The model `plan` trains: `model` (resolved for full training) resolved for the plan's fine-tuning (finetuned_for).
ModelSpec run_model(const ModelSpec& model, const Plan& plan);

// Every rank's timeline in one trace: each rank serialises its own, rank 0 gathers and merges them (MPI_Gatherv on
// the JSON text keeps the Communicator interface float-only). Collective over `comm`.
Timeline merge_rank_timelines(const Timeline& mine, MPI_Comm comm);

nlohmann::json memory_json(const MemoryByCategory& bytes);
double median_s(std::vector<double> values);

// What a finished run reports (rank 0 prints it).
struct RunOutcome {
  std::string executor;  // "cpu" or "gpu"
  int world_size = 1;
  nlohmann::json steps = nlohmann::json::array();
  std::vector<double> step_times_s;
  runner::StepReport last;
  // The run's tracked peak: the largest step's (the first step's warm-up included), which is what a run must
  // provision — the order in which asynchronous collectives complete moves a step's peak by a buffer or two.
  long long peak_bytes = 0;
  MemoryByCategory memory_at_peak{};
  std::int64_t resumed_from_step = -1;
  std::string checkpoint;
  // With --trace (the runner sets keep_timelines): the last kTraceCandidateSteps steps' timelines, each with its step
  // number and time, of which write_run_trace writes the median one (Note [Traced step]).
  static constexpr std::size_t kTraceCandidateSteps = 100;
  struct StepTimeline {
    std::int64_t step = 0;
    double step_time_s = 0;
    Timeline timeline;
  };
  bool keep_timelines = false;
  std::deque<StepTimeline> recent_timelines;

  // Records one finished step (its JSON line, time and peak) and keeps it as `last`.
  void add_step(std::int64_t step, runner::StepReport report);
};
// The per-step line rank 0 prints unless --json; `plan_label` names the plan when a launch runs several.
void print_step_line(std::int64_t step, const runner::StepReport& report, const std::string& plan_label = "");
// A run's summary, shardplan.run/v1.
nlohmann::json run_outcome_json(const RunFlags& flags, const ModelSpec& model, const Plan& plan,
                                const RunOutcome& outcome);
// The closing summary (text or, with --json, shardplan.run/v1).
void print_run_outcome(const RunFlags& flags, const ModelSpec& model, const Plan& plan, const RunOutcome& outcome);
// Note [Traced step]: the trace is of one step, and the step it shows is the median one (of the last
// kTraceCandidateSteps), not the last: calibration fits its per-op rates to the traced ops and its per-op dispatch to
// the run's median step, so a traced step that happened to be slow or fast skews the fits. On this shared machine the
// last step of a 10-step run was 40% off the median in one launch of five (0.028 vs 0.0195 s), and the compute fit
// took it in. Every rank picks the same step: step times are agreed over the ranks (StepReport::step_time_s).
// Writes the merged trace of that step (rank 0) with the plan in its metadata, so `calibrate` can re-lower it, the
// run's median step time and the traced step's number.
void write_run_trace(const RunFlags& flags, const Plan& plan, const ModelSpec& model, RunOutcome& outcome,
                     MPI_Comm comm, int world_size);

// The GPU executor's `run` (cmd_run_gpu.cpp): built into the GPU plugin only (Note [GPU plugin] in gpu_executor.h).
int run_on_gpu(const RunFlags& flags);

}  // namespace shardplan::cli
