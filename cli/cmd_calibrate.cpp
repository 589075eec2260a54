// `shardplan calibrate`: fit the cost model to executor runs (--trace) or to microbenchmarks run here (--bench).
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <unistd.h>

#include "calibration_samples.h"
#include "chrome_trace.h"
#include "commands.h"
#include "errors.h"
#include "flag_checks.h"
#include "input_limits.h"
#include "inputs.h"
#include "json_input.h"
#include "model_source.h"
#include "lowering.h"
#include "plan_json.h"
#include "simulator.h"

#ifdef SHARDPLAN_HAVE_MPI
#include "bench_report.h"
#include "bench_samples.h"
#include "comm_sweep.h"
#include "kernel_sweep.h"
#include "kernel_sweep_bound.h"
#include "machine_probe.h"
#include "mpi_communicator.h"
#include "mpi_session.h"
#include "optimizer_sweep.h"
#endif

namespace shardplan::cli {
namespace {

struct CalibrateFlags {
  std::vector<std::string> traces;
  bool bench = false;
  std::string cluster;
  std::string catalog_file;
  std::string out;
  bool json = false;
  // --bench only
  std::string model = "tiny-llama";
  std::int64_t min_bytes = 1 << 10;
  std::int64_t max_bytes = 16 << 20;
  int step_factor = 2;
  int iters = 20;
  int warmup_iters = 5;
  std::int64_t seq_len = 0;
};

constexpr const char* kBenchOnlyFlags[] = {"--model", "--min-bytes", "--max-bytes", "--step-factor",
                                           "--iters", "--warmup-iters", "--seq-len"};

std::string utc_date() {
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return date;
}

std::string host_name() {
  char host[256] = "unknown";
  ::gethostname(host, sizeof host - 1);
  return host;
}

void print_link_summary(const char* name, const LinkFit& fit) {
  if (fit.samples == 0) return;
  std::printf("  %-9s alpha %.3g s, busbw %.3g B/s (rms %.1f%%, max %.1f%%, %zu samples)\n", name, fit.latency_s,
              fit.bus_bytes_per_s, 100 * fit.rms_relative_residual, 100 * fit.max_relative_residual, fit.samples);
}

// One measured trace with what it ran, kept for fitting the overhead against the calibrated timeline.
struct MeasuredRun {
  ModelSpec model;
  Plan plan;
  Cluster cluster;
  Timeline measured;
};

// The memory overhead that makes the calibrated simulation's peak reach every run's measured peak (never negative).
std::int64_t fit_overhead_bytes(const std::vector<MeasuredRun>& runs, HardwareProfile profile) {
  profile.context_overhead_bytes = 0;
  std::int64_t overhead = 0;
  for (const MeasuredRun& run : runs) {
    const StepSchedule schedule =
        lower_plan(run.plan, run.model, {run.cluster.world_size(), run.cluster.gpus_per_node, 0});
    const long long predicted = simulate(schedule, profile, false).summary.peak_memory_bytes;
    for (int rank : run.measured.ranks()) {
      overhead = std::max<std::int64_t>(overhead, run.measured.peak_memory_bytes(rank) - predicted);
    }
  }
  return overhead;
}

// The per-op host overhead (HardwareProfile::op_dispatch_overhead_s) that makes the calibrated simulation's step time
// meet the measured ones: the root of the median over the runs of (simulated − measured) / measured, by bisection
// (the simulated step time never decreases as the overhead grows, so neither does the median). The median, not the
// mean: runs of one plan minutes apart on a shared machine differ by 20-30%, and a mean followed the one fast round
// (measured: three rounds of plan A at 0.0306, 0.0243, 0.0306 s put the mean's prediction 8% under their median,
// which is what predictions are compared with). 0 when the per-op fits already reach or exceed the measurements.
// The measured step time is the run's median step (trace metadata `median_step_time_s`, written by `run --trace`)
// when the trace has it: the traced step is one sample, and the median is what predictions are compared with;
// otherwise the traced step's own length.
double fit_dispatch_overhead_s(const std::vector<MeasuredRun>& runs, HardwareProfile profile) {
  std::vector<StepSchedule> schedules;
  std::vector<double> measured_s;
  double upper_s = 0;
  for (const MeasuredRun& run : runs) {
    schedules.push_back(lower_plan(run.plan, run.model, {run.cluster.world_size(), run.cluster.gpus_per_node, 0}));
    double step_s = 0;
    for (const TimelineEvent& event : run.measured.events) step_s = std::max(step_s, event.end_s);
    const auto median = run.measured.metadata.find("median_step_time_s");
    if (median != run.measured.metadata.end() && median->is_number() && median->get<double>() > 0) {
      step_s = median->get<double>();
    }
    measured_s.push_back(step_s);
    upper_s = std::max(upper_s, step_s / std::max<std::size_t>(1, schedules.back().ops.size()));
  }
  const auto excess = [&](double overhead_s) {
    profile.op_dispatch_overhead_s = overhead_s;
    std::vector<double> errors;
    for (std::size_t i = 0; i < schedules.size(); ++i) {
      if (measured_s[i] <= 0) continue;
      errors.push_back(simulate(schedules[i], profile, false).summary.step_time_s / measured_s[i] - 1.0);
    }
    if (errors.empty()) return 0.0;
    std::sort(errors.begin(), errors.end());
    const std::size_t middle = errors.size() / 2;
    return errors.size() % 2 == 1 ? errors[middle] : 0.5 * (errors[middle - 1] + errors[middle]);
  };
  if (schedules.empty() || excess(0.0) >= 0.0) return 0.0;
  double low_s = 0.0, high_s = upper_s;
  for (int iteration = 0; iteration < 60 && excess(high_s) < 0.0; ++iteration) high_s *= 2;
  for (int iteration = 0; iteration < 60; ++iteration) {
    const double middle_s = 0.5 * (low_s + high_s);
    (excess(middle_s) < 0.0 ? low_s : high_s) = middle_s;
  }
  return 0.5 * (low_s + high_s);
}

int calibrate_from_traces(const CalibrateFlags& flags) {
  const HardwareCatalog catalog = load_catalog(flags.catalog_file);
  std::vector<MeasuredRun> runs;
  CalibrationSamples samples;
  HardwareProfile base;
  MachineInfo machine{host_name(), "", 1, 0};
  bool have_base = false;
  for (const auto& path : flags.traces) {
    const Timeline measured = read_chrome_trace(path);
    const JsonObjectReader metadata(measured.metadata, path, "shardplan.metadata");
    if (!metadata.has("plan_json")) metadata.fail("plan_json", "the plan (traces written by `shardplan run --trace`)");
    const ModelSpec model = load_model(metadata.string("model"));
    const Plan plan = plan_from_json(metadata.raw().at("plan_json"), path, model);
    const std::string cluster_text =
        flags.cluster.empty() ? std::to_string(measured.ranks().size()) + "xcpu" : flags.cluster;
    const Cluster cluster = parse_cluster(cluster_text, catalog);
    if (!have_base) {
      base = profile_from_cluster(cluster);
      machine.nodes = cluster.nodes;
      machine.ranks = cluster.world_size();
      have_base = true;
    }
    add_calibration_samples(measured, model, plan, cluster, base, samples);
    runs.push_back({model, plan, cluster, measured});
  }
  Calibration calibration = calibrate(base, samples, flags.out);
  // The peak depends on the timeline (how long a gathered unit or a gradient waits for its collective), so the
  // overhead is fitted again against the calibrated timeline rather than the catalog's.
  // What the per-op fits leave of each run's step time is host time between ops (fitted before the memory overhead:
  // the peak depends on the timeline).
  calibration.profile.op_dispatch_overhead_s = fit_dispatch_overhead_s(runs, calibration.profile);
  if (samples.measured_peak_bytes > 0) {
    calibration.profile.context_overhead_bytes = fit_overhead_bytes(runs, calibration.profile);
  }
  const nlohmann::json document = to_json(calibration, machine, utc_date());
  write_file_atomically(flags.out, document.dump(2) + "\n");
  if (flags.json) {
    print_json(document);
    return 0;
  }
  std::printf("fitted from %zu compute, %zu memory-bound and %zu collective samples:\n", calibration.compute.samples,
              calibration.memory.samples, calibration.intra_node.samples + calibration.inter_node.samples);
  std::printf("  compute   %.3g FLOP/s, f_half %.3g FLOP (rms relative residual %.1f%%)\n",
              calibration.compute.per_s, calibration.compute.half_efficiency_flops,
              100 * calibration.compute.rms_relative_residual);
  if (calibration.compute.overlap_fitted) {
    std::printf("  overlap   compute runs %.3gx slower while a collective is in flight\n",
                calibration.compute.overlap_slowdown);
  }
  std::printf("  memory    %.3g B/s (%.1f%%)\n", calibration.memory.per_s,
              100 * calibration.memory.rms_relative_residual);
  print_link_summary("intra", calibration.intra_node);
  print_link_summary("inter", calibration.inter_node);
  if (calibration.collective_slowdown_fitted) {
    std::printf("  overlap   collectives progress %.3gx slower while their rank computes\n",
                calibration.profile.overlap_collective_slowdown);
  }
  if (calibration.issue.fitted) {
    std::printf("  issue     %.3g s per collective issued (from %zu gaps between compute ops; %.3g s per gap "
                "without, rms %.3g s)\n",
                calibration.issue.per_collective_s, calibration.issue.samples, calibration.issue.per_gap_s,
                calibration.issue.rms_residual_s);
  }
  std::printf("  dispatch  %.3g s per compute op (the step time the per-op fits leave unexplained)\n",
              calibration.profile.op_dispatch_overhead_s);
  std::printf("  overhead  %lld B\nwrote %s\n", static_cast<long long>(calibration.profile.context_overhead_bytes),
              flags.out.c_str());
  return 0;
}

#ifdef SHARDPLAN_HAVE_MPI
// Prints on rank 0 only, flushed so the table grows as rows are measured (and interleaves correctly under mpirun).
struct LeadPrinter {
  bool enabled = false;
  void operator()(const std::string& text) const {
    if (!enabled) return;
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  }
};

int calibrate_from_bench(const CalibrateFlags& flags) {
  bench::CommSweepOptions comm_options;
  comm_options.min_bytes = flags.min_bytes;
  comm_options.max_bytes = flags.max_bytes;
  comm_options.step_factor = flags.step_factor;
  comm_options.timing = {flags.warmup_iters, flags.iters};
  bench::check_comm_sweep_options(comm_options);
  if (flags.seq_len < 0) throw InputError("--seq-len: expected 0 (the model's default) or more, got " +
                                          std::to_string(flags.seq_len));
  bench::KernelSweepOptions kernel_options;
  kernel_options.timing = comm_options.timing;
  bench::OptimizerSweepOptions optimizer_options;
  optimizer_options.timing = comm_options.timing;
  // Everything that can be wrong with the input is checked before MPI starts and before anything is measured.
  const HardwareCatalog catalog = load_catalog(flags.catalog_file);
  const ModelSpec model = load_model(flags.model);
  bench::check_kernel_sweep_model(model);
  if (flags.seq_len > 0) {
    TrainingConfig training;  // the limits a training run at this length would meet (model positions included)
    training.seq_len = flags.seq_len;
    validate_training(training, model);
  }
  // Note [Kernel sweep bound]: the model's default length scaled down to fit, a given --seq-len over it refused.
  const bench::BoundedSeqLen sweep_length = bench::bounded_kernel_seq_len(model, flags.seq_len);
  kernel_options.seq_len = sweep_length.seq_len;
  // --out was checked as it was parsed (output_file): before anything is measured, not after minutes of it.
  std::optional<Cluster> given_cluster;
  if (!flags.cluster.empty()) given_cluster = parse_cluster(flags.cluster, catalog);

  comm::MpiSession session;
  comm::MpiCommunicator world(MPI_COMM_WORLD);
  const bool lead = world.rank() == 0;
  const LeadPrinter print{lead && !flags.json};
  try {
    const bench::BenchMachine machine = bench::probe_machine(world.native());
    comm_options.node_of_rank = machine.node_of_rank;
    const MachineInfo& info = machine.info;
    print("# shardplan calibrate --bench: " + std::to_string(info.ranks) + " rank(s) on " +
          std::to_string(info.nodes) + " node(s), host " + info.host + (info.cpu.empty() ? "" : " (" + info.cpu + ")") +
          ", model " + model.name + "\n");
    std::vector<bench::CommRow> comm_rows;
    if (world.size() < 2) {
      print("#\n# collectives skipped: a group of 1 rank moves nothing (run under mpirun -np N with N >= 2)\n");
    } else {
      print(bench::comm_table_header());
      comm_rows = bench::run_comm_sweep(world, comm_options,
                                        [&](const bench::CommRow& row) { print(bench::format_comm_row(row)); });
    }
    if (sweep_length.scaled_down && lead) {  // with --json on stderr, so stdout stays one document
      const std::string note = "#\n" + bench::describe_scaled_down(sweep_length);
      std::fputs(note.c_str(), flags.json ? stderr : stdout);
      std::fflush(flags.json ? stderr : stdout);
    }
    print(bench::kernel_table_header());
    const auto print_kernel = [&](const bench::KernelRow& row) { print(bench::format_kernel_row(row)); };
    std::vector<bench::KernelRow> kernel_rows = bench::run_kernel_sweep(model, kernel_options, world, print_kernel);
    for (auto& row : bench::run_optimizer_sweep(optimizer_options, world, print_kernel)) kernel_rows.push_back(row);

    // The catalog's CPU entry as the base: what the fit does not cover (PCIe, overlap slowdown) keeps its values.
    const int per_node = info.ranks % info.nodes == 0 ? info.ranks / info.nodes : info.ranks;
    const Cluster cluster = given_cluster ? *given_cluster
                                          : parse_cluster(info.ranks % info.nodes == 0 && info.nodes > 1
                                                              ? std::to_string(info.nodes) + "x" +
                                                                    std::to_string(per_node) + "xcpu"
                                                              : std::to_string(info.ranks) + "xcpu",
                                                          catalog);
    const Calibration calibration =
        calibrate(profile_from_cluster(cluster), bench::bench_samples(comm_rows, kernel_rows), flags.out);
    print(bench::format_fits(calibration));
    if (!lead) return 0;
    const nlohmann::json document = to_json(calibration, info, utc_date());
    write_file_atomically(flags.out, document.dump(2) + "\n");
    if (flags.json) {
      print_json(document);
    } else {
      print("wrote " + flags.out + "\n");
    }
  } catch (const std::exception& error) {
    // A rank failing mid-sweep would leave the others waiting in a collective: take the job down (cmd_run.cpp).
    if (world.size() == 1) throw;
    world.abort(std::string("shardplan calibrate --bench: ") + error.what());
  }
  return 0;
}
#endif

}  // namespace

Action add_calibrate_command(CLI::App& app) {
  auto* command = app.add_subcommand(
      "calibrate", "fit the cost model (links, compute, memory) to measured runs (--trace) or microbenchmarks (--bench)");
  auto flags = std::make_shared<CalibrateFlags>();
  command->add_option("--trace", flags->traces, "measured trace from `run --trace` (repeatable)");
  command->add_flag("--bench", flags->bench,
                    "run collective and kernel microbenchmarks here (under mpirun -np N for collectives)");
  command->add_option("--cluster", flags->cluster, "the cluster the runs used (default: <ranks>xcpu)");
  add_catalog_flag(*command, flags->catalog_file);
  command->add_option("--out", flags->out, "write the fitted profile (shardplan.profile/v1)")
      ->required()
      ->check(output_file("--out"));
  command->add_flag("--json", flags->json, "print the profile");
  command->add_option("--model", flags->model, "--bench: model whose layers and GEMMs to time (default tiny-llama)");
  // Note [Input limits]: a sweep's sizes as check_comm_sweep_options bounds them (16 GiB), and at most 10,000
  // iterations per measurement (nccl-tests runs 20; 10,000 of a 16 MiB all-reduce already take minutes).
  const CLI::Validator message_bytes = int_range(1, std::int64_t{1} << 34);
  const CLI::Validator iterations = int_range(0, 10'000);
  command->add_option("--min-bytes", flags->min_bytes, "--bench: smallest collective message S (default 1024)")
      ->check(message_bytes);
  command->add_option("--max-bytes", flags->max_bytes, "--bench: largest collective message S (default 16 MiB)")
      ->check(message_bytes);
  command->add_option("--step-factor", flags->step_factor, "--bench: message size multiplier (default 2)")
      ->check(int_range(2, 1024));
  command->add_option("--iters", flags->iters, "--bench: timed iterations per measurement (default 20)")
      ->check(iterations);
  command->add_option("--warmup-iters", flags->warmup_iters, "--bench: untimed iterations first (default 5)")
      ->check(iterations);
  command->add_option("--seq-len", flags->seq_len, "--bench: sequence length of the kernel sweep (default: model's)")
      ->check(int_range(1, limits::kMaxSeqLen));
  return [flags, command]() {
    const bool traces = !flags->traces.empty();
    if (traces && flags->bench) {
      throw InputError("--bench: cannot be combined with --trace (fit to measured runs, or run microbenchmarks)");
    }
    if (!traces && !flags->bench) {
      throw InputError("calibrate: expected --trace FILE (fit to measured runs) or --bench (run microbenchmarks)");
    }
    if (traces) {
      for (const char* flag : kBenchOnlyFlags) {
        if (command->count(flag) > 0) throw InputError(std::string(flag) + ": only with --bench");
      }
      return calibrate_from_traces(*flags);
    }
#ifdef SHARDPLAN_HAVE_MPI
    return calibrate_from_bench(*flags);
#else
    throw InputError("--bench: this shardplan was built without MPI (the benchmarks run through the MPI executor)");
#endif
  };
}

}  // namespace shardplan::cli
