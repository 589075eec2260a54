// `shardplan run`: execute a plan under mpirun on CPU ranks (MPI + Eigen) and report what was measured.
#include <algorithm>
#include <mpi.h>

#include <cstdio>
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
#include "runner.h"

namespace shardplan::cli {

namespace {

struct RunFlags {
  std::string model = "tiny-llama";
  std::string plan_file;
  std::string strategy = "full_shard";
  std::string units = "per-block";
  std::string ac = "none";
  std::string data_file = "/usr/share/common-licenses/GPL-3";
  std::string trace_file;
  std::int64_t steps = 3;
  std::int64_t seq_len = 64;
  std::int64_t micro_batch = 1;
  std::int64_t global_batch = 0;
  std::uint64_t seed = 0;
  bool json = false;
  std::string checkpoint_dir;       // empty: no checkpoints
  std::int64_t checkpoint_every = 0;  // 0: one checkpoint after the last step
  bool resume = false;
};

// Every rank's timeline in one trace: each rank serialises its own, rank 0 gathers and merges them (MPI_Gatherv on
// the JSON text keeps the Communicator interface float-only).
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

int run(const RunFlags& flags) {
  comm::MpiSession session;
  comm::MpiCommunicator world(MPI_COMM_WORLD);
  const int size = world.size();
  const bool lead = world.rank() == 0;
  // Set-up errors (model, plan, data) happen identically on every rank before any collective, so they propagate
  // normally (exit 2/1); once training runs, a failing rank brings the whole job down (Communicator::abort).
  const ModelSpec model = load_model(flags.model);
  Plan plan;
  if (!flags.plan_file.empty()) {
    plan = read_plan_file(flags.plan_file, model);
  } else {
    TrainingConfig training;
    training.seq_len = flags.seq_len;
    training.micro_batch = flags.micro_batch;
    training.global_batch = flags.global_batch;
    training.precision = precision_recipe("fp32");
    training.checkpointing = checkpointing_from_string(flags.ac);
    // The CPU kernels materialise attention probabilities; the plan says so, so predicted memory matches tracked.
    training.flash_attention = false;
    validate_training(training, model);
    plan = default_plan(model, training, parse_strategy(flags.strategy), parse_units_policy(flags.units, model), size);
  }
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

  nlohmann::json steps = nlohmann::json::array();
  std::vector<double> step_times_s;
  runner::StepReport last;
  std::string checkpoint;  // the newest step directory this run wrote
  try {
    for (std::int64_t step = first_step; step < flags.steps; ++step) {
      last = runner.step(runner::rank_micro_batches(data, step, k, size, world.rank()));
      const double tokens_per_s = static_cast<double>(last.tokens) / last.step_time_s;
      step_times_s.push_back(last.step_time_s);
      steps.push_back({{"step", step}, {"loss", last.loss}, {"step_time_s", last.step_time_s},
                       {"tokens_per_s", tokens_per_s}, {"peak_memory_bytes", last.peak_bytes}});
      if (lead && !flags.json) {
        std::printf("step %lld: loss %.6f, %.4f s, %.0f tokens/s, tracked peak %.2f MiB (rank 0)\n",
                    static_cast<long long>(step), last.loss, last.step_time_s, tokens_per_s,
                    static_cast<double>(last.peak_bytes) / (1 << 20));
      }
      const bool last_step = step + 1 == flags.steps;
      const bool periodic = flags.checkpoint_every > 0 && (step + 1) % flags.checkpoint_every == 0;
      if (!flags.checkpoint_dir.empty() && (periodic || last_step)) {
        checkpoint = runner::save_checkpoint(runner, world, flags.checkpoint_dir, position_after(step + 1)).step_dir;
        if (lead && !flags.json) std::printf("checkpoint written to %s\n", checkpoint.c_str());
      }
    }
    Timeline trace;
    if (!flags.trace_file.empty()) {
      // The whole plan travels with the trace, so `calibrate` can re-lower it and know every collective's group.
      last.timeline.metadata = {{"model", flags.model}, {"plan", plan.name}, {"plan_json", to_json(plan, model)},
                                {"world_size", size}};
      trace = merge_rank_timelines(last.timeline, world.native());
    }
    if (lead && !flags.trace_file.empty()) write_chrome_trace(trace, flags.trace_file);
  } catch (const std::exception& error) {
    if (size == 1) throw;
    world.abort(std::string("shardplan run: ") + error.what());
  }
  if (!lead) return 0;
  if (flags.json) {
    nlohmann::json document = {{"schema", "shardplan.run/v1"}, {"model", model.name}, {"world_size", size},
                               {"plan", to_json(plan, model)}, {"steps", steps},
                               // The median step (the first one warms caches and allocators up).
                               {"step_time_s", median_s(step_times_s)},
                               {"tokens_per_s", static_cast<double>(last.tokens) / median_s(step_times_s)},
                               {"peak_memory_bytes", last.peak_bytes},
                               {"memory_at_peak", memory_json(last.memory_at_peak)},
                               {"peak_by_category", memory_json(last.peak_by_category)}};
    if (!flags.trace_file.empty()) document["trace"] = flags.trace_file;
    if (flags.resume) document["resumed_from_step"] = first_step;
    if (!checkpoint.empty()) document["checkpoint"] = checkpoint;
    print_json(document);
  } else {
    std::printf("model %s, plan '%s' (%zu units), %d ranks; tracked peak on rank 0 by category:\n", model.name.c_str(),
                plan.name.c_str(), plan.units.size(), size);
    for (std::size_t i = 0; i < kMemoryCategoryCount; ++i) {
      if (last.memory_at_peak[i] == 0) continue;
      std::printf("  %-18s %12lld B\n", std::string(kMemoryCategoryNames[i]).c_str(), last.memory_at_peak[i]);
    }
    if (!flags.trace_file.empty()) std::cout << "trace written to " << flags.trace_file << "\n";
  }
  return 0;
}

}  // namespace

Action add_run_command(CLI::App& app) {
  auto* command = app.add_subcommand("run", "run a plan on CPU ranks under mpirun (MPI + Eigen, fp32) and measure it");
  auto flags = std::make_shared<RunFlags>();
  command->add_option("--model,-m", flags->model, "preset, model JSON or HF config.json")->capture_default_str();
  command->add_option("--plan,-p", flags->plan_file, "plan JSON (fp32); default: FSDP's usual plan for the world");
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
