// `shardplan simulate`: lower a plan (given, or the default for the estimate flags) and simulate one step.
#include <cmath>
#include <iostream>
#include <memory>

#include "chrome_trace.h"
#include "commands.h"
#include "context_parallel_lowering.h"
#include "error_band_output.h"
#include "errors.h"
#include "flag_checks.h"
#include "host_memory.h"
#include "html_report.h"
#include "inputs.h"
#include "model_source.h"
#include "output_files.h"
#include "pipeline_trace.h"
#include "plan_json.h"
#include "unmeasured_rates.h"
#include "step_analysis.h"

namespace shardplan::cli {

namespace {
struct SimulateFlags {
  ModelClusterFlags model_cluster;
  TrainingFlags training;
  std::string plan_file;
  std::string strategy = "full_shard";
  std::string units = "per-block";
  std::string trace_file;
  std::string report_file;
  bool dump_schedule = false;
  bool cpu_offload = false;
  double memory_headroom_percent = 0;
  std::string tensor_parallel = "1";
  int pipeline_parallel = 1;
  std::string pipeline_schedule = "1F1B";
  int stages_per_rank = 0;  // 0: torchtitan's default for the schedule (default_stages_per_rank)
  int context_parallel = 1;
  bool json = false;
};

std::vector<ReportSummaryRow> summary_rows(const SimulationSummary& summary) {
  const auto fixed = [](double value, const char* unit) {
    char text[64];
    std::snprintf(text, sizeof text, "%.4f %s", value, unit);
    return std::string(text);
  };
  std::vector<ReportSummaryRow> rows = {
      {"step time", fixed(summary.step_time_s, "s")},
      {"compute time", fixed(summary.compute_time_s, "s")},
      {"exposed communication", fixed(summary.exposed_comm_s, "s")},
      {"tokens/s", std::to_string(std::llround(summary.tokens_per_s))},  // a rate, not four decimals
      {"MFU / HFU", fixed(100 * summary.mfu, "%") + " / " + fixed(100 * summary.hfu, "%")},
      {"peak memory", fixed(static_cast<double>(summary.peak_memory_bytes) / (1 << 30), "GiB")},
      {"peak at", summary.peak_op},
  };
  for (const auto& totals : summary.collectives) {
    rows.push_back({totals.kind, std::to_string(totals.count) + " ops, " +
                                     fixed(static_cast<double>(totals.bytes) / (1 << 30), "GiB")});
  }
  return rows;
}
}  // namespace

Action add_simulate_command(CLI::App& app, const Output& output) {
  auto* command = app.add_subcommand("simulate", "simulate one training step of a plan: time, overlap, memory");
  auto flags = std::make_shared<SimulateFlags>();
  add_model_cluster_flags(*command, flags->model_cluster);
  const std::size_t options_before_training = command->get_options().size();
  add_training_flags(*command, flags->training);
  // The flags that shape the default plan: a plan file gives its own of each (checked with --plan below).
  auto default_plan_flags = std::make_shared<std::vector<std::string>>(std::vector<std::string>{
      "--strategy", "--units", "--cpu-offload", "--tensor-parallel", "--pipeline-parallel", "--pipeline-schedule",
      "--stages-per-rank"});
  const std::vector<CLI::Option*> all_options = command->get_options();
  for (std::size_t index = options_before_training; index < all_options.size(); ++index) {
    default_plan_flags->push_back(all_options[index]->get_name());
  }
  command->add_option("--plan,-p", flags->plan_file, "plan JSON (shardplan.plan/v1); default: FSDP's usual plan");
  command->add_option("--strategy", flags->strategy, "strategy of the default plan")->capture_default_str();
  command->add_option("--units", flags->units, "wrapping of the default plan: per-block | whole | N-blocks")
      ->capture_default_str();
  // Note [Output files]: both targets are checked as they are parsed, and written together at the end.
  command->add_option("--trace", flags->trace_file, "write the predicted timeline as Chrome trace JSON")
      ->check(output_file("--trace"));
  command->add_option("--report", flags->report_file, "write a self-contained HTML report")
      ->check(output_file("--report"));
  command->add_flag("--cpu-offload", flags->cpu_offload,
                    "default plan with FSDP's CPU offload (parameter and gradient shards, optimizer on the host)");
  command->add_option("--tensor-parallel", flags->tensor_parallel,
                      "TP degree of the default plan (Note [2-D plans]: FSDP over the world / TP ranks)")
      ->capture_default_str();
  command->add_option("--pipeline-parallel", flags->pipeline_parallel,
                      "pipeline stages' ranks (pp) of the default plan (Note [Pipeline policy]); torchtitan's split of "
                      "the blocks into pp x stages-per-rank stages")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  command->add_option("--pipeline-schedule", flags->pipeline_schedule,
                      "GPipe | 1F1B | Interleaved1F1B | InterleavedZeroBubble (torch.distributed.pipelining's "
                      "names; the last splits backward into input and weight gradients)")
      ->capture_default_str();
  command->add_option("--stages-per-rank", flags->stages_per_rank,
                      "virtual stages per pipeline rank (Interleaved1F1B: 2 or more; InterleavedZeroBubble: 1 or "
                      "more); omitted: torchtitan's, 1 for GPipe and 1F1B, 2 for the interleaved schedules")
      ->check(CLI::Range(1, 1 << 10));
  command->add_option("--context-parallel", flags->context_parallel,
                      "context-parallel ranks (cp) of the default plan: ring attention over each sequence split cp "
                      "ways, FSDP over dp_shard x cp (Note [Context parallel policy]); --seq-len a multiple of 2 x cp")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  add_memory_headroom_flag(*command, flags->memory_headroom_percent);
  command->add_flag("--json", flags->json, "print the summary as JSON");
  return [command, flags, output, default_plan_flags]() {
    check_distinct_outputs({{"--trace", flags->trace_file}, {"--report", flags->report_file}});
    // Nothing silently dropped: a flag that shapes the default plan means nothing beside a plan file, which gives
    // its own training, units and degrees. Said on stderr rather than refused: callers pass the flags a plan was
    // made with beside it (benchmarks/published-runs/run_dev_set.py simulates its edited plans so).
    std::string ignored;
    for (const std::string& name : *default_plan_flags) {
      if (!flags->plan_file.empty() && command->count(name) > 0) ignored += (ignored.empty() ? "" : ", ") + name;
    }
    if (!ignored.empty()) {
      std::cerr << "shardplan: warning: " << ignored << ": ignored beside --plan (the plan file gives its own "
                << "training, units and degrees)\n";
    }
    const ModelSpec base = load_model(flags->model_cluster.model);
    const Cluster cluster = resolve_cluster(flags->model_cluster);
    const HardwareProfile profile = resolve_profile(flags->model_cluster, cluster);
    Plan plan;
    if (!flags->plan_file.empty()) {
      if (flags->context_parallel != 1) {
        throw InputError("--context-parallel: sets the default plan's degree; a plan file gives its own "
                         "(context_parallel_degree), expected no --context-parallel with --plan");
      }
      plan = read_plan_file(flags->plan_file, base);
    } else {
      const TrainingConfig training = resolve_training(flags->training, base);
      if (flags->tensor_parallel == "auto") throw InputError("--tensor-parallel: expected one degree (1, 2, 4, 8)");
      const int tensor_parallel = tensor_parallel_degrees(flags->tensor_parallel, base, cluster).front();
      if (training.torch_compile) check_compile_tensor_parallel(tensor_parallel);
      check_loss_tensor_parallel(training.loss, tensor_parallel);
      check_activation_offload_tensor_parallel(training.activation_offload, tensor_parallel);
      // The global batch divides over the data-parallel ranks (Note [2-D plans] in planner/tensor_parallel_view.h).
      plan.tensor_parallel_degree = tensor_parallel;
      plan.pipeline.degree = flags->pipeline_parallel;
      plan.context_parallel.degree = flags->context_parallel;
      validate_context_parallel(flags->context_parallel, training, base, "--context-parallel");
      // CP ranks split each sequence, not the batch: the batch divides over the data-parallel ranks less cp.
      const int data_parallel_ranks =
          parallel_dims(plan, cluster.world_size()).data_parallel_world_size() / flags->context_parallel;
      plan = default_plan(base, training, parse_strategy(flags->strategy), parse_units_policy(flags->units, base),
                          data_parallel_ranks);
      plan.tensor_parallel_degree = tensor_parallel;
      plan.context_parallel.degree = flags->context_parallel;
      plan.offload.params = flags->cpu_offload;
      check_optimizer_offload(plan.training, plan.offload.params, "--cpu-offload");
      if (flags->pipeline_parallel > 1) {
        const PipelineScheduleKind schedule =
            pipeline_schedule_from_string(flags->pipeline_schedule, "--pipeline-schedule");
        plan.pipeline = default_pipeline(base, flags->pipeline_parallel, schedule,
                                         flags->stages_per_rank > 0 ? flags->stages_per_rank
                                                                    : default_stages_per_rank(schedule));
      }
    }
    // The layers resolved for the plan's fine-tuning (a plan file's was checked against the model as it was read).
    const ModelSpec model = finetuned_for(base, plan.training);
    if (plan.pipeline.enabled()) {
      const bool want_timeline = !flags->trace_file.empty() || !flags->report_file.empty();
      const PipelineStepAnalysis analysis = analyze_pipeline_step(model, cluster, profile, plan, want_timeline);
      const PredictionErrorBands bands = error_bands_for(cluster.gpu.name, run_kind_of(cluster, plan.training));
      const MemoryHeadroomChoice headroom_choice =
          choose_memory_headroom(*command, flags->memory_headroom_percent, bands.memory);
      const MemoryHeadroom headroom{cluster.gpu.memory_bytes, headroom_choice.percent / 100};
      // Note [Pipeline trace]: one process per pipeline rank, sends to recvs as flow arrows.
      write_output_files(pipeline_output_files(
          analysis, headroom, "shardplan: " + model.name + " on " + cluster.describe() + " (" + plan.name + ")",
          flags->trace_file, flags->report_file));
      if (flags->json) {
        nlohmann::json document = to_json(analysis, headroom);
        document["schema"] = "shardplan.pipeline_simulation/v1";
        document["model"] = model.name;
        document["cluster"] = to_json(cluster);
        document["plan"] = to_json(plan, model);
        document["memory_capacity_bytes"] = headroom.cap_bytes;
        document["memory_headroom_bytes"] = headroom.headroom_bytes();
        output.json(document);
      } else {
        std::cout << "model " << model.name << " on " << cluster.describe() << ", plan '" << plan.name << "' ("
                  << plan.units.size() << " units), " << to_string(parallel_dims(plan, cluster.world_size()))
                  << "\n";
        std::cout << unmeasured_rates_line(profile);
        std::cout << render_pipeline_text(analysis, headroom);
        std::cout << "memory: " << headroom.describe() << " kept free on each rank's device peak\n";
        if (!flags->trace_file.empty()) std::cout << "trace written to " << flags->trace_file << "\n";
        if (!flags->report_file.empty()) std::cout << "report written to " << flags->report_file << "\n";
      }
      return 0;
    }
    const bool want_timeline = !flags->trace_file.empty() || !flags->report_file.empty();
    const StepAnalysis analysis = analyze_step(model, cluster, profile, plan, want_timeline);
    const SimulationSummary& summary = analysis.simulation.summary;
    const HostMemoryUse host_memory = host_memory_use(plan, model, cluster);  // Note [Host memory]
    // Note [Error bands] (costmodel/error_band.h): the bands of runs like this one, and the headroom from them.
    const PredictionErrorBands bands = error_bands_for(cluster.gpu.name, run_kind_of(cluster, plan.training));
    const MemoryHeadroomChoice headroom_choice =
        choose_memory_headroom(*command, flags->memory_headroom_percent, bands.memory);
    const MemoryHeadroom headroom{cluster.gpu.memory_bytes, headroom_choice.percent / 100};
    std::vector<OutputFile> outputs;
    if (!flags->trace_file.empty()) {
      outputs.push_back({flags->trace_file, to_chrome_trace(analysis.simulation.timeline)
                                                .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)});
    }
    if (!flags->report_file.empty()) {
      ReportInput report;
      report.title = "shardplan: " + model.name + " on " + cluster.describe() + " (" + plan.name + ")";
      report.timeline = &analysis.simulation.timeline;
      report.summary = summary_rows(summary);
      outputs.push_back({flags->report_file, render_html_report(report)});
    }
    write_output_files(outputs);
    if (flags->json) {
      nlohmann::json document = to_json(summary);
      document["schema"] = "shardplan.simulation/v1";
      document["model"] = model.name;
      document["cluster"] = to_json(cluster);
      document["plan"] = to_json(plan, model);
      document["host_memory"] = to_json(host_memory);
      // Note [Memory headroom]: the one fits verdict, device_peak_bytes within the GPU's memory less the headroom.
      document["memory_capacity_bytes"] = headroom.cap_bytes;
      document["memory_headroom_bytes"] = headroom.headroom_bytes();
      document["fits"] = headroom.fits(summary);
      document["unmeasured_rates"] = unmeasured_rates_json(profile);
      document["error_band"] = error_band_json(bands, headroom_choice);
      output.json(document);
    } else {
      std::cout << "model " << model.name << " on " << cluster.describe() << ", plan '" << plan.name << "' ("
                << plan.units.size() << " units)";
      if (plan.context_parallel.enabled()) std::cout << ", " << to_string(parallel_dims(plan, cluster.world_size()));
      std::cout << "\n" << unmeasured_rates_line(profile);
      const std::string recipe = recipe_text(plan.training);  // Note [Fine-tuning losses], [8-bit optimizers]
      if (!recipe.empty()) std::cout << "recipe: " << recipe << "\n";
      std::cout << render_simulation_text(summary, analysis.schedule, headroom);
      std::cout << error_band_text(bands, summary.step_time_s, summary.reserved_peak_bytes, headroom_choice, "");
      if (host_memory.offloads()) std::cout << describe(host_memory) << "\n";
      if (!flags->trace_file.empty()) std::cout << "trace written to " << flags->trace_file << "\n";
      if (!flags->report_file.empty()) std::cout << "report written to " << flags->report_file << "\n";
    }
    return 0;
  };
}

}  // namespace shardplan::cli
