// `shardplan run`: execute a plan under mpirun — on CPU ranks (MPI + Eigen) or GPUs (NCCL + CUDA) — and report it.
#include <algorithm>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>

#include "byte_text_dataset.h"
#include "checkpoint.h"
#include "chrome_trace.h"
#include "commands.h"
#include "data_parallel_batches.h"
#include "errors.h"
#include "inputs.h"
#include "model_source.h"
#include "mpi_communicator.h"
#include "mpi_session.h"
#include "plan_json.h"
#include "run_support.h"
#include "runner.h"
#ifdef SHARDPLAN_HAVE_GPU_EXECUTOR
#include "device_probe.h"
#endif

namespace shardplan::cli {

namespace {

int run_on_cpu(const RunFlags& flags) {
  comm::MpiSession session;
  comm::MpiCommunicator world(MPI_COMM_WORLD);
  const int size = world.size();
  const bool lead = world.rank() == 0;
  // Set-up errors (model, plan, data) happen identically on every rank before any collective, so they propagate
  // normally (exit 2/1); once training runs, a failing rank brings the whole job down (Communicator::abort).
  const ModelSpec model = load_model(flags.model);
  const Plan plan = run_plan(flags, model, size);
  if (flags.steps < 1) throw InputError("--steps: expected at least 1, got " + std::to_string(flags.steps));
  runtime::ByteTextDatasetOptions data_options;
  data_options.path = flags.data_file;
  data_options.micro_batch = static_cast<int>(plan.training.micro_batch);
  data_options.seq_len = static_cast<int>(plan.training.seq_len);
  const runtime::ByteTextDataset data(data_options);
  runner::RunnerOptions options;
  options.seed = flags.seed;
  runner::Runner runner(model, plan, world, options);
  const int k = runner.schedule().micro_batches;
  // The dataset position a checkpoint after `step` steps records: the first batch index of the next step.
  const auto position_after = [&](std::int64_t step) {
    return static_cast<std::uint64_t>(step) * static_cast<std::uint64_t>(k) * static_cast<std::uint64_t>(size);
  };
  if (flags.checkpoint_every < 0) {
    throw InputError("--checkpoint-every: expected 0 (only after the last step) or more, got " +
                     std::to_string(flags.checkpoint_every));
  }
  if (flags.resume && flags.checkpoint_dir.empty()) throw InputError("--resume: needs --checkpoint-dir");
  std::int64_t first_step = 0;
  if (flags.resume) {
    // Collective and agreed: a damaged checkpoint is an InputError on every rank, so no abort is needed here.
    const runner::CheckpointInfo resumed = runner::load_checkpoint(runner, world, flags.checkpoint_dir);
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
  }

  RunOutcome outcome;
  outcome.executor = "cpu";
  outcome.world_size = size;
  if (flags.resume) outcome.resumed_from_step = first_step;
  runner::StepReport& last = outcome.last;
  try {
    for (std::int64_t step = first_step; step < flags.steps; ++step) {
      outcome.add_step(step, runner.step(runner::rank_micro_batches(data, step, k, size, world.rank())));
      if (lead && !flags.json) print_step_line(step, last);
      const bool last_step = step + 1 == flags.steps;
      const bool periodic = flags.checkpoint_every > 0 && (step + 1) % flags.checkpoint_every == 0;
      if (!flags.checkpoint_dir.empty() && (periodic || last_step)) {
        outcome.checkpoint =
            runner::save_checkpoint(runner, world, flags.checkpoint_dir, position_after(step + 1)).step_dir;
        if (lead && !flags.json) std::printf("checkpoint written to %s\n", outcome.checkpoint.c_str());
      }
    }
    write_run_trace(flags, plan, model, outcome, world.native(), size);
  } catch (const std::exception& error) {
    if (size == 1) throw;
    world.abort(std::string("shardplan run: ") + error.what());
  }
  if (lead) print_run_outcome(flags, model, plan, outcome);
  return 0;
}

int run(const RunFlags& flags) {
  if (flags.device != "auto" && flags.device != "cpu" && flags.device != "gpu") {
    throw InputError("--device: expected auto, cpu or gpu, got '" + flags.device + "'");
  }
#ifdef SHARDPLAN_HAVE_GPU_EXECUTOR
  if (flags.device == "gpu") return run_on_gpu(flags);
  if (flags.device == "auto") {
    // The GPU when every rank on this host can have its own device (Note [Device per rank] in nccl_bootstrap.h);
    // the launcher says how many ranks share the host (Open MPI, MPICH/Hydra), a plain process is one.
    const gpu::DeviceProbe probe = gpu::probe_devices();
    int local_ranks = 1;
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
      if (const char* value = std::getenv(name)) local_ranks = std::max(1, std::atoi(value));
    }
    if (probe.usable() && local_ranks <= probe.device_count) return run_on_gpu(flags);
  }
#else
  if (flags.device == "gpu") {
    throw InputError("--device gpu: this shardplan was built without the GPU executor (needs CUDA, cuBLAS, NCCL and "
                     "MPI at `meson setup`)");
  }
#endif
  return run_on_cpu(flags);
}

}  // namespace

Action add_run_command(CLI::App& app) {
  auto* command = app.add_subcommand(
      "run", "run a plan under mpirun on CPU ranks (MPI + Eigen, fp32) or GPUs (NCCL + CUDA) and measure it");
  auto flags = std::make_shared<RunFlags>();
  command->add_option("--model,-m", flags->model, "preset, model JSON or HF config.json")->capture_default_str();
  command->add_option("--plan,-p", flags->plan_file, "plan JSON; default: FSDP's usual plan for the world");
  command->add_option("--device", flags->device,
                      "auto (the GPU when built with it and each rank on the host has a device), cpu or gpu")
      ->capture_default_str();
  command->add_option("--precision", flags->precision,
                      "precision of the default plan: fp32 (CPU and GPU) or bf16-mixed-fp32-reduce (GPU)")
      ->capture_default_str();
  command->add_option("--strategy", flags->strategy, "strategy of the default plan")->capture_default_str();
  command->add_option("--units", flags->units, "wrapping of the default plan")->capture_default_str();
  command->add_option("--ac", flags->ac, "activation checkpointing of the default plan")->capture_default_str();
  command->add_option("--steps", flags->steps, "training steps")->capture_default_str();
  command->add_option("--data", flags->data_file, "text file (one byte per token)")->capture_default_str();
  command->add_option("--seq-len", flags->seq_len, "tokens per sequence")->capture_default_str();
  command->add_option("--micro-batch", flags->micro_batch, "sequences per rank per micro-batch")->capture_default_str();
  command->add_option("--global-batch", flags->global_batch, "sequences per step (0: one micro-batch per rank)");
  command->add_option("--seed", flags->seed, "parameter init seed")->capture_default_str();
  command->add_option("--trace", flags->trace_file, "write the last step's measured timeline (all ranks)");
  command->add_flag("--json", flags->json, "print the summary as JSON (rank 0)");
  command->add_option("--checkpoint-dir", flags->checkpoint_dir,
                      "write sharded checkpoints to D/step-<N>/ (rank files + manifest) and point D/latest at them");
  command->add_option("--checkpoint-every", flags->checkpoint_every,
                      "checkpoint every K steps (0: only after the last step)")->capture_default_str();
  command->add_flag("--resume", flags->resume,
                    "continue from the checkpoint D/latest names (--steps stays the total step count)");
  return [flags]() { return run(*flags); };
}

}  // namespace shardplan::cli
