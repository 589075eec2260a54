// `shardplan run`: execute a plan under mpirun — on CPU ranks (MPI + Eigen) or GPUs (NCCL + CUDA) — and report it.
#include <algorithm>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>

#include "byte_text_dataset.h"
#include "checkpoint.h"
#include "chrome_trace.h"
#include "commands.h"
#include "data_parallel_batches.h"
#include "errors.h"
#include "flag_checks.h"
#include "gpu_executor.h"
#include "host_local_rank.h"
#include "input_limits.h"
#include "inputs.h"
#include "model_source.h"
#include "mpi_communicator.h"
#include "mpi_session.h"
#include "plan_json.h"
#include "run_host_memory.h"
#include "run_support.h"
#include "runner.h"

namespace shardplan::cli {

namespace {

// The status of a rank that leaves an agreed InputError to rank 0, which prints it and exits 2. Not 2 itself: Open MPI
// terminates the whole job as soon as any rank exits non-zero, and a quiet rank finishing first killed rank 0 before it
// printed (the resume-mismatch tests lost the message about once in ten runs on a loaded machine). mpirun's status is
// the first non-zero one, rank 0's 2.
constexpr int kExitQuietAgreedError = 0;

// Note [Interleaved runs]: with several --plan, one launch trains every plan, step by step in turn (step 0 of each
// plan, then step 1 of each, ...), each with its own runner, tracked memory, dataset stream and outcome. A shared
// machine's speed drifts by tens of per cent within seconds (measured on the 2-core CI machines: one plan's median
// step 0.021 vs 0.030 s in runs a minute apart, and 0.030 -> 0.026 s inside one run); plans run in separate launches
// meet different machines, so comparing them — or checking a calibration against held-out plans — measures the drift.
// Interleaved, every plan's steps sample the same stretch of time. Each plan computes what it would alone (same
// seed, same batches: the tests check the losses are identical), and its tracked peak is its own.
struct CpuPlanRun {
  RunFlags flags;  // this plan's: its plan_file and trace_file
  Plan plan;
  ModelSpec model;  // resolved for the plan's fine-tuning (run_model)
  std::unique_ptr<runtime::ByteTextDataset> data;
  std::unique_ptr<runner::Runner> runner;
  RunOutcome outcome;
};

std::unique_ptr<runtime::ByteTextDataset> plan_dataset(const RunFlags& flags, const Plan& plan) {
  runtime::ByteTextDatasetOptions data_options;
  data_options.path = flags.data_file;
  data_options.micro_batch = static_cast<int>(plan.training.micro_batch);
  data_options.seq_len = static_cast<int>(plan.training.seq_len);
  return std::make_unique<runtime::ByteTextDataset>(data_options);
}

// Checkpoints of fine-tuning runs (shards with frozen parts, Note [Frozen shards]), of a TP rank's slice, of a
// pipeline rank's stages and of a CP run have not been saved and resumed yet: InputError when `flags` asks for checkpoints of such a
// plan.
void check_run_checkpoints(const Plan& plan, const RunFlags& flags) {
  if (flags.checkpoint_dir.empty() && !flags.resume) return;
  if (!plan.training.finetune.trains_all()) {
    throw InputError(std::string("--checkpoint-dir/--resume with fine-tuning '") +
                     to_string(plan.training.finetune.mode) +
                     "': not yet supported (expected a full-training plan, or no checkpoints)");
  }
  if (plan.tensor_parallel_degree > 1) {
    throw InputError("--checkpoint-dir/--resume with tensor_parallel_degree " +
                     std::to_string(plan.tensor_parallel_degree) +
                     ": not yet supported (expected a plan with tensor_parallel_degree 1, or no checkpoints)");
  }
  if (plan.pipeline.enabled()) {
    throw InputError("--checkpoint-dir/--resume with pipeline degree " + std::to_string(plan.pipeline.degree) +
                     ": not yet supported (expected a plan without a pipeline, or no checkpoints)");
  }
  if (plan.context_parallel.enabled()) {  // Note [Context-parallel runner]
    throw InputError("--checkpoint-dir/--resume with context_parallel_degree " +
                     std::to_string(plan.context_parallel.degree) +
                     ": not yet supported (expected a plan without context parallelism, or no checkpoints)");
  }
}

int run_on_cpu(const std::vector<RunFlags>& plan_flags) {
  comm::MpiSession session;
  comm::MpiCommunicator world(MPI_COMM_WORLD);
  const int size = world.size();
  const bool lead = world.rank() == 0;
  const RunFlags& flags = plan_flags.front();  // every flag but the plan and trace is shared
  const bool interleaved = plan_flags.size() > 1;
  // Note [Set-up errors once]: set-up (model, plan, data, host memory) runs on every rank with no collective inside,
  // and its InputErrors are agreed before training: when every rank failed (the usual case: the same flags and
  // files), rank 0 alone prints its line and every rank exits 2 — under mpirun each used to print its own copy;
  // when only some did (a file missing on one host), each of those prints its line with its rank. Once training runs,
  // a failing rank brings the whole job down (Communicator::abort, Note [Aborted status]).
  const int ranks_on_host = comm::host_local_rank(MPI_COMM_WORLD).size;  // collective: before anything can fail
  ModelSpec model;
  runner::RunnerOptions options;
  options.seed = flags.seed;
  std::vector<CpuPlanRun> runs(plan_flags.size());
  std::vector<Plan> plans;
  std::string set_up_error;
  try {
    model = load_model(flags.model);
    // --steps and --checkpoint-every were checked in range as they were parsed (add_run_command).
    if (flags.resume && flags.checkpoint_dir.empty()) throw InputError("--resume: needs --checkpoint-dir");
    if (interleaved && (!flags.checkpoint_dir.empty() || flags.resume)) {
      throw InputError("--checkpoint-dir/--resume: checkpoint one plan at a time, got " +
                       std::to_string(plan_flags.size()) + " --plan");
    }
    for (std::size_t i = 0; i < runs.size(); ++i) {
      runs[i].flags = plan_flags[i];
      runs[i].plan = run_plan(runs[i].flags, model, size);
      runs[i].model = run_model(model, runs[i].plan);
      plans.push_back(runs[i].plan);
      check_run_checkpoints(runs[i].plan, flags);
      // Note [Run host memory]: refused before any rank allocates its states (bad_alloc or the OOM killer).
      check_run_host_memory(runs[i].plan, runs[i].model, size, ranks_on_host);
      runs[i].data = plan_dataset(runs[i].flags, runs[i].plan);
    }
  } catch (const InputError& error) {
    if (size == 1) throw;
    set_up_error = error.what();
  }
  if (size > 1) {
    int failed_here = set_up_error.empty() ? 0 : 1, ranks_failed = 0;
    MPI_Allreduce(&failed_here, &ranks_failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (ranks_failed == size && lead) throw InputError(set_up_error);
    if (ranks_failed != size && failed_here != 0) {
      std::fprintf(stderr, "shardplan: error: rank %d: %s\n", world.rank(), set_up_error.c_str());
    }
    // Only a rank that printed a line exits 2; the quiet ones exit kExitQuietAgreedError, so Open MPI cannot end the
    // job before the printing rank has written its line.
    const bool printed_here = ranks_failed != size && failed_here != 0;
    if (ranks_failed > 0) return printed_here ? 2 : kExitQuietAgreedError;
  }
  // Note [Step watchdog]: started before the runners, so the groups they split from `world` are watched too.
  const auto watchdog =
      start_watchdog(run_watchdog_timeout_s(flags, plans, model, "1x" + std::to_string(size) + "xcpu"), world,
                     [](const std::string&) { MPI_Abort(MPI_COMM_WORLD, comm::kExitAborted); });
  const auto watched = [&](const std::string& phase) { return comm::WatchedPhase(watchdog.get(), phase); };
  for (std::size_t i = 0; i < runs.size(); ++i) {
    CpuPlanRun& run = runs[i];
    try {
      run.runner = std::make_unique<runner::Runner>(run.model, run.plan, world, options);
    } catch (const InputError&) {
      // Note [Set-up errors once]: the runner's refusals (what the CPU executor does not run) are the plan's, the
      // same on every rank: rank 0 prints its line and exits 2, the others exit quietly, so that Open MPI cannot end
      // the job before rank 0 has written it (seen: `mpirun -np 8 … run` of a PP x CP plan lost the line).
      if (!lead) return kExitQuietAgreedError;
      throw;
    }
    run.outcome.executor = "cpu";
    run.outcome.keep_timelines = !run.flags.trace_file.empty();
    run.outcome.world_size = size;
  }
  runner::Runner& runner = *runs.front().runner;
  const int k = runner.schedule().micro_batches;
  // The dataset position a checkpoint after `step` steps records: the first batch index of the next step.
  const auto position_after = [&](std::int64_t step) {
    return static_cast<std::uint64_t>(step) * static_cast<std::uint64_t>(k) *
           static_cast<std::uint64_t>(runner.data_parallel_size());
  };
  // The data a checkpoint records, so a resume with another --data says so (checkpoint_manifest.h).
  const runner::CheckpointData data =
      flags.checkpoint_dir.empty() ? runner::CheckpointData{} : runner::describe_data_file(flags.data_file);
  std::int64_t first_step = 0;
  if (flags.resume) try {
    // Collective and agreed: a damaged or mismatched checkpoint is the same InputError on every rank, so no abort is
    // needed, and rank 0 alone prints it (the others exit 2 quietly, below) instead of every rank's copy interleaved.
    const runner::CheckpointInfo resumed = [&] {
      const auto phase = watched("resume from " + flags.checkpoint_dir);
      return runner::load_checkpoint(runner, world, flags.checkpoint_dir, data);
    }();
    first_step = resumed.step;
    if (resumed.data_position != position_after(first_step)) {
      throw InputError(resumed.step_dir + ": data position " + std::to_string(resumed.data_position) +
                       " is not where step " + std::to_string(first_step) + " of this run starts (" +
                       std::to_string(position_after(first_step)) + ")");
    }
    if (first_step >= flags.steps) {
      throw InputError("--resume: the checkpoint is after step " + std::to_string(first_step) + ", --steps " +
                       std::to_string(flags.steps) + " (the total) leaves nothing to run");
    }
    if (lead && !flags.json) std::printf("resumed from %s\n", resumed.step_dir.c_str());
    runs.front().outcome.resumed_from_step = first_step;
  } catch (const InputError&) {
    if (!lead) return kExitQuietAgreedError;  // rank 0 prints the same message and exits 2
    throw;
  }

  try {
    for (std::int64_t step = first_step; step < flags.steps; ++step) {
      for (CpuPlanRun& run : runs) {
        const int micro_batches = run.runner->schedule().micro_batches;
        const auto phase = watched("step " + std::to_string(step) + (interleaved ? " of " + run.flags.plan_file : ""));
        run.outcome.add_step(
            step, run.runner->step(runner::rank_micro_batches(*run.data, step, micro_batches,
                                                              run.runner->data_parallel_size(),
                                                              run.runner->data_parallel_rank())));
        if (lead && !flags.json) print_step_line(step, run.outcome.last, interleaved ? run.flags.plan_file : "");
      }
      const bool last_step = step + 1 == flags.steps;
      const bool periodic = flags.checkpoint_every > 0 && (step + 1) % flags.checkpoint_every == 0;
      if (!flags.checkpoint_dir.empty() && (periodic || last_step)) {
        const auto phase = watched("checkpoint save after step " + std::to_string(step));
        runs.front().outcome.checkpoint =
            runner::save_checkpoint(runner, world, flags.checkpoint_dir, position_after(step + 1), data).step_dir;
        if (lead && !flags.json) std::printf("checkpoint written to %s\n", runs.front().outcome.checkpoint.c_str());
      }
    }
    for (CpuPlanRun& run : runs) {
      const auto phase = watched("trace merge");
      write_run_trace(run.flags, run.plan, run.model, run.outcome, world.native(), size);
    }
  } catch (const std::exception& error) {
    // Note [Aborted status] (executor/comm/communicator.h): training began, so this is neither bad input (2) nor,
    // necessarily, a bug (1). One rank has no one to bring down: it says so in one line, with the same status.
    if (size == 1) {
      std::fprintf(stderr, "shardplan: run aborted: %s\n", Error::one_line(error.what()).c_str());
      return comm::kExitAborted;
    }
    world.abort(std::string("shardplan run: ") + error.what());
  }
  if (!lead) return 0;
  if (!interleaved) {
    print_run_outcome(flags, runs.front().model, runs.front().plan, runs.front().outcome);
  } else if (flags.json) {
    nlohmann::json document = {{"schema", "shardplan.runs/v1"}, {"interleaved", true},
                               {"runs", nlohmann::json::array()}};
    for (const CpuPlanRun& run : runs) {
      document["runs"].push_back(run_outcome_json(run.flags, run.model, run.plan, run.outcome));
    }
    print_json(document);
  } else {
    for (const CpuPlanRun& run : runs) print_run_outcome(run.flags, run.model, run.plan, run.outcome);
  }
  return 0;
}

// True when `path` is `directory` or lies under it, both as they resolve now (symlinks of existing parts followed).
bool path_within(const std::string& path, const std::string& directory) {
  std::error_code error;
  const std::filesystem::path resolved = std::filesystem::weakly_canonical(std::filesystem::absolute(path), error);
  if (error) return false;
  const std::filesystem::path base = std::filesystem::weakly_canonical(std::filesystem::absolute(directory), error);
  if (error) return false;
  return std::mismatch(base.begin(), base.end(), resolved.begin(), resolved.end()).first == base.end();
}

// One RunFlags per --plan (each with its plan_file and trace_file); none given: FSDP's usual plan, once.
std::vector<RunFlags> per_plan_flags(const RunFlags& flags) {
  if (!flags.trace_files.empty() && flags.trace_files.size() != std::max<std::size_t>(1, flags.plan_files.size())) {
    throw InputError("--trace: expected one per --plan (" + std::to_string(flags.plan_files.size()) + "), got " +
                     std::to_string(flags.trace_files.size()));
  }
  // The checkpoint writes its directory and step directories there: a trace at or under it would be found a
  // directory (or overwritten) only after training, and the run aborted then (the fuzzer's input 7341 of seed 20).
  for (const std::string& trace : flags.trace_files) {
    if (!flags.checkpoint_dir.empty() && path_within(trace, flags.checkpoint_dir)) {
      throw InputError("--trace: '" + trace + "' lies in --checkpoint-dir '" + flags.checkpoint_dir +
                       "' (expected a file outside the checkpoint directory)");
    }
  }
  std::vector<RunFlags> runs;
  const std::size_t count = std::max<std::size_t>(1, flags.plan_files.size());
  for (std::size_t i = 0; i < count; ++i) {
    RunFlags run = flags;
    run.plan_file = flags.plan_files.empty() ? std::string() : flags.plan_files[i];
    run.trace_file = flags.trace_files.empty() ? std::string() : flags.trace_files[i];
    runs.push_back(std::move(run));
  }
  return runs;
}

int run(const RunFlags& flags) {
  if (flags.device != "auto" && flags.device != "cpu" && flags.device != "gpu") {
    throw InputError("--device: expected auto, cpu or gpu, got '" + flags.device + "'");
  }
  const std::vector<RunFlags> runs = per_plan_flags(flags);
  const bool interleaved = runs.size() > 1;
  // Note [GPU plugin]: the GPU executor is loaded here, and only here.
  if (flags.device == "gpu") {
    if (interleaved) throw InputError("--plan: several plans run interleaved on the CPU executor only (--device cpu)");
    return GpuExecutor::load().run(runs.front());
  }
  if (flags.device == "auto" && !interleaved && nvidia_device_nodes_present()) {
    // The GPU when every rank on this host can have its own device (Note [Device per rank] in nccl_bootstrap.h);
    // the launcher says how many ranks share the host (Open MPI, MPICH/Hydra), a plain process is one.
    if (const std::optional<GpuExecutor> gpu = GpuExecutor::try_load()) {
      std::string reason;
      const int devices = gpu->device_count(reason);
      int local_ranks = 1;
      for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
        if (const char* value = std::getenv(name)) local_ranks = std::max(1, std::atoi(value));
      }
      if (devices > 0 && local_ranks <= devices) return gpu->run(runs.front());
    }
  }
  return run_on_cpu(runs);
}

}  // namespace

Action add_run_command(CLI::App& app) {
  auto* command = app.add_subcommand(
      "run", "run a plan under mpirun on CPU ranks (MPI + Eigen, fp32) or GPUs (NCCL + CUDA) and measure it");
  auto flags = std::make_shared<RunFlags>();
  command->add_option("--model,-m", flags->model, "preset, model JSON or HF config.json")->capture_default_str();
  command->add_option("--plan,-p", flags->plan_files,
                      "plan JSON; default: FSDP's usual plan for the world. Several: one launch trains them all, "
                      "their steps interleaved (CPU executor), so every plan meets the same machine");
  command->add_option("--device", flags->device,
                      "auto (the GPU when its executor is installed and each rank on the host has a device), cpu "
                      "or gpu")
      ->capture_default_str();
  command->add_option("--precision", flags->precision,
                      "precision of the default plan: fp32 (CPU and GPU) or bf16-mixed-fp32-reduce (GPU)")
      ->capture_default_str();
  command->add_option("--strategy", flags->strategy, "strategy of the default plan")->capture_default_str();
  command->add_option("--units", flags->units, "wrapping of the default plan")->capture_default_str();
  command->add_option("--ac", flags->ac, "activation checkpointing of the default plan")->capture_default_str();
  command->add_option("--ac-every", flags->ac_every, "apply --ac to every k-th block only")->capture_default_str();
  // Note [Input limits]: a million steps is days of the CPU executor's fastest step; the rest as estimate's flags.
  constexpr std::int64_t kMostSteps = 1'000'000;
  command->add_option("--steps", flags->steps, "training steps")
      ->capture_default_str()
      ->check(int_range(1, kMostSteps));
  command->add_option("--data", flags->data_file, "text file (one byte per token)")->capture_default_str();
  command->add_option("--seq-len", flags->seq_len, "tokens per sequence")
      ->capture_default_str()
      ->check(int_range(1, limits::kMaxSeqLen));
  command->add_option("--micro-batch", flags->micro_batch, "sequences per rank per micro-batch")
      ->capture_default_str()
      ->check(int_range(1, limits::kMaxMicroBatch));
  command->add_option("--global-batch", flags->global_batch, "sequences per step (0: one micro-batch per rank)")
      ->check(int_range(0, limits::kMaxGlobalBatch));
  command->add_option("--seed", flags->seed, "parameter init seed")->capture_default_str();
  // Note [Output files]: checked as parsed, on every rank, before MPI starts and long before training ends.
  command->add_option("--trace", flags->trace_files,
                      "write the median step's measured timeline (all ranks); one per --plan")
      ->check(output_file("--trace"));
  command->add_flag("--json", flags->json, "print the summary as JSON (rank 0)");
  command->add_option("--checkpoint-dir", flags->checkpoint_dir,
                      "write sharded checkpoints to D/step-<N>/ (rank files + manifest) and point D/latest at them")
      ->check(output_directory("--checkpoint-dir"));
  command->add_option("--checkpoint-every", flags->checkpoint_every,
                      "checkpoint every K steps (0: only after the last step)")
      ->capture_default_str()
      ->check(int_range(0, kMostSteps));
  command->add_option("--watchdog-timeout", flags->watchdog_timeout_s,
                      "seconds a step may run before a rank aborts the job naming what it waits on (0: never; "
                      "default: 50 predicted steps, at least 60 s)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            // 0 turns the watchdog off; otherwise at least a second (the fuzzer's 1e-300 fired on a normal step)
            // and at most 1e6 s (11 days).
            const std::string problem = finite_range(1, 1e6)(text);
            return problem.empty() || text == "0" ? std::string() : "expected 0 (no watchdog) or " + problem.substr(9);
          },
          "0 or NUMBER in [1, 1e+06]"));
  command->add_flag("--resume", flags->resume,
                    "continue from the checkpoint D/latest names (--steps stays the total step count)");
  return [flags]() { return run(*flags); };
}

}  // namespace shardplan::cli
