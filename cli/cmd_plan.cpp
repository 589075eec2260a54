// `shardplan plan`: search the fastest plan that fits, compare it with FSDP's baselines, write and export it.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>

#include "chrome_trace.h"
#include "commands.h"
#include "context_parallel_lowering.h"
#include "error_band_output.h"
#include "errors.h"
#include "flag_checks.h"
#include "pipeline_trace.h"
#include "plan_report.h"
#include "input_limits.h"
#include "memory_headroom.h"
#include "inputs.h"
#include "model_source.h"
#include "optimizer_in_backward.h"
#include "output_files.h"
#include "name_suggest.h"
#include "export_torchtitan.h"
#include "plan_export.h"
#include "precision.h"
#include "plan_json.h"
#include "search_context_parallel.h"
#include "plan_pipeline.h"
#include "search.h"
#include "setting_floor_cache.h"
#include "step_analysis.h"
#include "unmeasured_rates.h"

namespace shardplan::cli {

namespace {

// Exit status when no plan fits: the diagnosis is printed (documented in README.md).
constexpr int kExitInfeasible = 3;

struct PlanFlags {
  ModelClusterFlags model_cluster;
  TrainingFlags training;
  double memory_cap_gib = 0;
  double memory_headroom_percent = 0;
  std::string objective = "time";
  SearchKnobFlags knobs;
  std::string out_file;
  std::string trace_file;
  std::string report_file;
  std::string export_format;
  std::string out_dir = ".";
  int jobs = 0;  // 0: the machine's cores
  int context_parallel = 1;
  bool json = false;
  PipelinePlanFlags pipeline;
};

std::string gib(std::int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return text;
}

// Unit lengths run-length encoded: "30×1 2×2 1×4".
std::string describe_units(const Plan& plan) {
  std::string text;
  std::size_t id = 1;
  while (id < plan.units.size()) {
    const std::size_t length = plan.units[id].layers.end - plan.units[id].layers.begin;
    std::size_t run = 0;
    while (id < plan.units.size() && plan.units[id].layers.end - plan.units[id].layers.begin == length) {
      ++run;
      ++id;
    }
    text += (text.empty() ? "" : " ") + std::to_string(run) + "x" + std::to_string(length);
  }
  return text;
}

// Note [Equal global batch] (planner/search_2d.cpp): "8 sequences (32768 tokens) per step" — a plan's global batch,
// printed beside the planned plan and every baseline so a reader sees they run the same step.
std::string global_batch_text(const PlanCandidate& candidate, int world_size) {
  const Plan& plan = candidate.plan;
  // CP ranks share each sequence (Note [Context parallel policy] in planner/plan.h): the batch ranks are the rest.
  const ParallelDims dims = parallel_dims(plan, world_size);
  const std::int64_t sequences =
      plan.training.micro_batch * plan.grad_accumulation_steps * dims.data_parallel_world_size() / dims.cp();
  return std::to_string(sequences) + " sequences (" + std::to_string(candidate.summary.tokens_per_step) + " tokens)";
}

void print_header(const SearchResult& result, const ModelSpec& model, const Cluster& cluster,
                  const MemoryHeadroomChoice& headroom) {
  std::printf("model %s on %s, memory cap %s, %g%% headroom: a plan fits within %s\n", model.name.c_str(),
              cluster.describe().c_str(), gib(result.memory_cap_bytes).c_str(), 100 * result.memory_headroom_fraction,
              gib(result.usable_memory_bytes()).c_str());
  std::printf("%s", headroom_line(headroom, "").c_str());
}

// `pipeline_planned`: the planned plan's text where a pipeline plan is the answer (Note [Pipeline search]); FSDP's best
// then follows as the best without pipeline parallelism.
void print_text(const SearchResult& result, const ModelSpec& model, const Cluster& cluster,
                const PredictionErrorBands& bands, const MemoryHeadroomChoice& headroom,
                const std::string& pipeline_planned) {
  print_header(result, model, cluster, headroom);
  std::printf("%s", pipeline_planned.c_str());
  if (result.feasible) {
    const auto& best = result.best;
    std::printf("%s: %s\n  units: root + %zu (count x layers: %s)\n",
                pipeline_planned.empty() ? "planned" : "best without pipeline parallelism", best.knobs.c_str(),
                best.plan.units.size() - 1, describe_units(best.plan).c_str());
    std::printf("  step %.4f s, %.0f tokens/s, MFU %.1f%%, peak %s allocated (at %s)\n", best.summary.step_time_s,
                best.summary.tokens_per_s, 100 * best.summary.mfu, gib(best.summary.peak_memory_bytes).c_str(),
                best.summary.peak_op.c_str());
    const std::string recipe = recipe_text(best.plan.training);  // Note [Fine-tuning losses], [8-bit optimizers]
    if (!recipe.empty()) std::printf("  recipe: %s\n", recipe.c_str());
    const ParallelDims dims = parallel_dims(best.plan, cluster.world_size());
    std::printf("  global batch %s per step: micro-batch %lld x %d accumulation x %d data-parallel ranks%s\n",
                global_batch_text(best, cluster.world_size()).c_str(),
                static_cast<long long>(best.plan.training.micro_batch), best.plan.grad_accumulation_steps,
                dims.data_parallel_world_size() / dims.cp(),
                dims.cp() > 1 ? (", each sequence over cp " + std::to_string(dims.cp())).c_str() : "");
    // Note [Memory headroom]: the figure the fits test compares, and the share of the cap it leaves.
    std::printf("  fits: device peak %s (reserved + overhead) = %.1f%% of %s, %g%% headroom kept\n",
                gib(best.summary.device_peak_bytes).c_str(),
                100.0 * static_cast<double>(best.summary.device_peak_bytes) /
                    static_cast<double>(result.memory_cap_bytes),
                gib(result.memory_cap_bytes).c_str(), 100 * result.memory_headroom_fraction);
    if (result.host_memory.offloads()) std::printf("  %s\n", describe(result.host_memory).c_str());
    // Note [Error bands] (costmodel/error_band.h): how far the predictions of published runs like this one were off.
    std::printf("  error band: step %.4f s (%s)\n  error band: max_memory_reserved %s (%s)\n",
                best.summary.step_time_s, describe(bands.step_time).c_str(),
                gib(best.summary.reserved_peak_bytes).c_str(), describe(bands.memory).c_str());
  } else if (!pipeline_planned.empty()) {
    std::printf("without pipeline parallelism no plan fits (dominant memory term: %s)\n",
                result.diagnosis.dominant_term.c_str());
  } else if (result.diagnosis.host_memory_limited) {
    std::printf("NO PLAN FITS. Dominant memory term: host memory per node (pinned, for CPU offload's states)\n");
    for (const auto& suggestion : result.diagnosis.suggestions) std::printf("  - %s\n", suggestion.c_str());
  } else {
    std::printf("NO PLAN FITS. Dominant memory term: %s\n", result.diagnosis.dominant_term.c_str());
    for (const auto& suggestion : result.diagnosis.suggestions) std::printf("  - %s\n", suggestion.c_str());
  }
  // Speed-ups in tokens/s (planned over baseline): equal to the step-time ratio at the equal global batch every
  // plan runs (Note [Equal global batch]), and still honest where a reader compares other steps.
  std::printf("\n%-36s %10s %10s %28s %12s %6s %9s\n", "baseline", "step s", "tokens/s", "global batch per step",
              "peak", "fits", "speed-up");
  for (const auto& baseline : result.baselines) {
    const auto& summary = baseline.candidate.summary;
    char speedup[32] = "-";
    if (result.feasible && summary.tokens_per_s > 0) {
      std::snprintf(speedup, sizeof speedup, "%.2fx", result.best.summary.tokens_per_s / summary.tokens_per_s);
    }
    std::printf("%-36s %10.4f %10.0f %28s %12s %6s %9s\n", baseline.name.c_str(), summary.step_time_s,
                summary.tokens_per_s, global_batch_text(baseline.candidate, cluster.world_size()).c_str(),
                gib(summary.peak_memory_bytes).c_str(), baseline.candidate.fits ? "yes" : "no", speedup);
  }
  if (!result.baselines_refused.empty()) {
    std::printf("  (none: FSDP alone refuses this input — %s)\n", result.baselines_refused.c_str());
  }
  std::printf("\nsearch: %zu candidates simulated in %.3f s\n", result.candidates_evaluated, result.seconds);
  std::printf("%s", render_search_proof(result).c_str());
}

}  // namespace

Action add_plan_command(CLI::App& app, const Output& output) {
  auto* command = app.add_subcommand("plan", "search the fastest FSDP plan that fits (exit 3 when none does)");
  auto flags = std::make_shared<PlanFlags>();
  add_model_cluster_flags(*command, flags->model_cluster);
  add_training_flags(*command, flags->training);
  // A cap of 0.001 GiB (1 MiB) to 2^20 GiB (1 PiB, limits::kMostMemoryBytes); 0 is "the GPU's" only by default.
  command->add_option("--memory-cap", flags->memory_cap_gib, "per-rank memory cap in GiB (default: the GPU's)")
      ->check(finite_range(0.001, static_cast<double>(limits::kMostMemoryBytes >> 30)));
  add_memory_headroom_flag(*command, flags->memory_headroom_percent);
  command->add_option("--objective", flags->objective, "time | memory")->capture_default_str();
  add_search_knob_flags(*command, flags->knobs);
  // Note [Output files]: every target is checked as it is parsed, before the search.
  command->add_option("--out", flags->out_file, "write the planned plan (shardplan.plan/v1)")
      ->check(output_file("--out"));
  command->add_option("--trace", flags->trace_file, "write the planned step's predicted Chrome trace")
      ->check(output_file("--trace"));
  command->add_option("--report", flags->report_file,
                      "write an HTML report: the planned units against the baselines' wrappings, memory at the peak, "
                      "the timeline")
      ->check(output_file("--report"));
  command->add_option("--export", flags->export_format,
                      "fsdp2 | fsdp1 | deepspeed | torchtitan; the search keeps to plans the format can write (TP "
                      "only with fsdp2 and torchtitan, expert parallelism 1; torchtitan: one unit per block)");
  command->add_option("--out-dir", flags->out_dir, "directory for --export files")
      ->capture_default_str()
      ->check(output_directory("--out-dir"));
  // Note [Shared incumbent] (planner/degree_search.h) and Note [Setting waves] (planner/searcher.cpp): the plan is the
  // same for any count.
  command->add_option("--jobs,-j", flags->jobs,
                      "threads of the search: knob settings searched at once (default: "
                      "the machine's cores); the result does not depend on it")
      ->check(CLI::Range(1, 1024));
  add_pipeline_plan_flags(*command, flags->pipeline);
  command->add_option("--context-parallel", flags->context_parallel,
                      "context-parallel ranks (cp), fixed: ring attention over each sequence split cp ways, FSDP over "
                      "dp_shard x cp; 1: none; omitted: 2, 4, 8 searched where one sequence's activations stand in the "
                      "way (Note [Context-parallel search])")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  command->add_flag("--json", flags->json, "print JSON: plan, predicted, baselines, search");
  return [command, flags, output]() {
    const ModelSpec base = load_searchable_model(flags->model_cluster.model, "plan");
    const Cluster cluster = resolve_cluster(flags->model_cluster);
    const HardwareProfile profile = resolve_profile(flags->model_cluster, cluster);
    TrainingConfig training = resolve_training(flags->training, base);
    // torchtitan reduces gradients in float32 only ([training] mixed_precision_reduce, Note [What torchtitan runs]):
    // where --precision is omitted, the export's recipe is bf16-mixed with float32 reduction rather than a refusal of
    // the default — a knob left out is chosen for what runs — and stderr says so.
    if (flags->export_format == "torchtitan" && command->count("--precision") == 0) {
      training.precision = precision_recipe("bf16-mixed-fp32-reduce");
      std::cerr << "plan: --export torchtitan: precision bf16-mixed-fp32-reduce (torchtitan reduces gradients in "
                   "float32; --precision was not given)\n";
    }
    const ModelSpec model = finetuned_for(base, training);
    // Note [Pinned knobs]: what the user gave is fixed, the rest searched; contradicting pins refuse here.
    const KnobPins pins = resolve_knob_pins(*command, flags->knobs, training);
    // Note [Optimizer in backward]: no gradient accumulation, so a searched micro-batch (the baselines' too) takes all
    // of a rank's sequences.
    training = one_micro_batch_per_step(training, pins.micro_batch, cluster.world_size());
    if (pins.tensor_parallel) (void)tensor_parallel_degrees(flags->knobs.tensor_parallel, model, cluster);
    SearchOptions options = search_options_for(pins, model, cluster);
    options.memory_cap_bytes = static_cast<std::int64_t>(flags->memory_cap_gib * 1024.0 * 1024.0 * 1024.0);
    // Note [Error bands] (costmodel/error_band.h): the bands of runs like this one, and the headroom from them.
    const PredictionErrorBands bands = error_bands_for(cluster.gpu.name, run_kind_of(cluster, training));
    const MemoryHeadroomChoice headroom =
        choose_memory_headroom(*command, flags->memory_headroom_percent, bands.memory);
    options.memory_headroom_fraction = headroom.percent / 100;
    options.threads = flags->jobs > 0 ? static_cast<std::size_t>(flags->jobs)
                                      : std::max(1u, std::thread::hardware_concurrency());
    // Note [Shared setting floors]: every search of this command (degrees, context-parallel shares, pipelines).
    options.floor_cache = std::make_shared<SettingFloorCache>();
    if (flags->objective == "time") {
      options.objective = SearchObjective::time;
    } else if (flags->objective == "memory") {
      options.objective = SearchObjective::memory;
    } else {
      throw InputError("--objective '" + flags->objective + "': expected time or memory");
    }
    if (!flags->export_format.empty()) {
      const auto formats = export_formats();
      if (std::find(formats.begin(), formats.end(), flags->export_format) == formats.end()) {
        throw InputError("--export '" + flags->export_format + "': expected fsdp2, fsdp1, deepspeed or torchtitan" +
                         did_you_mean(flags->export_format, formats));
      }
      // Note [Exported compile]: before the search, so a refused export prints and writes nothing.
      check_export_compile(flags->export_format, training);
      check_export_recipe(flags->export_format, training);  // Note [Exported recipes]
      check_export_activation_offload(flags->export_format, training);  // Note [Exported activation offloading]
      check_export_optimizer_step(flags->export_format, training);      // Note [Exported optimizer step]
      // Note [What torchtitan runs] (planner/export_torchtitan.cpp): refused settings refuse before the search too.
      if (flags->export_format == "torchtitan") check_torchtitan_training(training, model);
    }
    check_distinct_outputs(
        {{"--out", flags->out_file}, {"--trace", flags->trace_file}, {"--report", flags->report_file}});
    // Note [Expert parallelism]: an MoE model's degree is searched unless --expert-parallel fixes it (the options).
    check_search_work(training, model, cluster.world_size(), "plan",
                      smallest_searched_micro_batch(cluster, training, pins));
    if (training.torch_compile) {  // Note [Compiled blocks]: derived for the unsharded block only
      if (pins.tensor_parallel) check_compile_tensor_parallel(*pins.tensor_parallel);
      options.tensor_parallel_degrees = {1};
    }
    // Note [Export constrains the search] (planner/export_support.cpp): only plans the export can write are searched.
    if (!flags->export_format.empty()) {
      restrict_search_to_export(flags->export_format, model, training, pins.tensor_parallel.has_value(),
                                options.tensor_parallel_degrees, options.expert_parallel_degrees);
      if (flags->export_format == "torchtitan") restrict_search_to_torchtitan(options);
      restrict_offload_to_export(flags->export_format, options.pins);
    }
    const int context_parallel = flags->context_parallel;
    if (context_parallel > 1) {
      // Note [Fixed context parallel degree].
      validate_context_parallel(context_parallel, training, model, "--context-parallel");
      if (cluster.world_size() % context_parallel != 0) {
        throw InputError("--context-parallel " + std::to_string(context_parallel) + ": expected a divisor of the " +
                         std::to_string(cluster.world_size()) + " ranks");
      }
      if (!flags->export_format.empty() && flags->export_format != "torchtitan") {
        throw InputError("--context-parallel " + std::to_string(context_parallel) + " with --export " +
                         flags->export_format + ": only torchtitan's output shards sequences with torch's "
                         "context_parallel (expected --export torchtitan)");
      }
      // The batch divides over the ranks less cp (CP ranks share each sequence); said in the user's numbers here,
      // not the search's shares.
      if (training.global_batch > 0) (void)training.grad_accumulation_steps(cluster.world_size() / context_parallel);
      std::erase_if(options.tensor_parallel_degrees,
                    [&](int degree) { return cluster.world_size() % (degree * context_parallel) != 0; });
    }
    // Note [Context-parallel search] (planner/search_context_parallel.cpp): a given degree is fixed, else searched.
    const int pinned_context_parallel = command->count("--context-parallel") > 0 ? context_parallel : 0;
    ContextParallelOutcome context_outcome;
    // Note [Pipeline search] (planner/search_pipeline.h): pipeline plans beside FSDP's, pruned by FSDP's best; a
    // pinned degree searches pipeline plans only.
    const MemoryHeadroom usable{options.memory_cap_bytes > 0 ? options.memory_cap_bytes : cluster.gpu.memory_bytes,
                                options.memory_headroom_fraction};
    const PipelineSearchRequest pipeline_request = pipeline_search_request(
        flags->pipeline, model, cluster, training, options, flags->export_format, pinned_context_parallel,
        usable.usable_bytes());
    SearchResult result;
    // Note [Degrees a batch rules out] (planner/search_2d.cpp): where no FSDP plan of any TP degree takes the input
    // — a global batch below the data-parallel ranks that FSDP and TP leave, 16 sequences on 512 GPUs — the
    // pipeline grid may (pp x TP ranks share each sequence); its refusal is printed and answers only where the grid
    // finds nothing either.
    std::string fsdp_refused;
    const auto pipeline_only = [&] {
      result.memory_cap_bytes = usable.cap_bytes;
      result.memory_headroom_fraction = usable.fraction;
      result.memory_headroom_bytes = usable.headroom_bytes();
      // No FSDP search: the pipeline grid alone takes a given --context-parallel or searches the degree (where Note
      // [Context-parallel search] has degrees to try; else cp 1, said nothing of).
      context_outcome.pinned =
          pinned_context_parallel > 0 || pipeline_request.options.context_parallel_degrees.size() == 1;
    };
    if (pipeline_request.pinned) {
      pipeline_only();
    } else {
      try {
        result = search_with_context_parallel(model, cluster, profile, training, options, pinned_context_parallel,
                                              context_outcome);
      } catch (const InputError& error) {
        if (!pipeline_request.skipped.empty() || training.global_batch == 0) throw;
        fsdp_refused = error.what();
        context_outcome = {};
        pipeline_only();
      }
    }
    PipelineSearchResult pipeline;
    if (pipeline_request.skipped.empty()) {
      PipelineSearchOptions pipeline_options = pipeline_request.options;
      if (!pipeline_request.pinned && !context_outcome.pinned) {
        // Note [Context-parallel search]: the degrees FSDP's search judged worth trying (none where its best plan
        // shows the ring could only add time), beside cp 1.
        pipeline_options.context_parallel_degrees = {1};
        for (const int degree : context_outcome.searched) pipeline_options.context_parallel_degrees.push_back(degree);
      }
      if (!context_outcome.pinned) {
        for (const int degree : pipeline_options.context_parallel_degrees) {
          if (degree > 1) context_outcome.pipeline_searched.push_back(degree);
        }
      }
      if (result.feasible) pipeline_options.known_step_s = result.best.summary.step_time_s;
      pipeline = search_pipeline_plans(model, cluster, profile, training, pipeline_options);
    }
    // Nothing of the grid got past its refusals either: the FSDP search's error is the answer (exit 2).
    if (!fsdp_refused.empty() && pipeline.simulated == 0 && pipeline.beaten_by_floor == 0 &&
        pipeline.over_memory_floor == 0) {
      throw InputError(fsdp_refused);
    }
    const bool feasible = result.feasible || pipeline.feasible;
    const Plan& planned = pipeline.feasible ? pipeline.best.plan : result.best.plan;
    context_outcome.degree = std::max(1, planned.context_parallel.degree);  // the printed plan's, pipeline or not
    context_outcome.feasible = feasible;
    if (flags->json) {
      nlohmann::json document = to_json(result, model);
      document["unmeasured_rates"] = unmeasured_rates_json(profile);
      document["error_band"] = error_band_json(bands, headroom);
      document["context_parallel_degree"] = context_outcome.degree;
      document["context_parallel_search"] = {{"pinned", context_outcome.pinned},
                                             {"searched", context_outcome.searched},
                                             {"skipped", context_outcome.skipped},
                                             {"pipeline_searched", context_outcome.pipeline_searched},
                                             {"line", render_context_parallel_line(context_outcome)}};
      document["pipeline_search"] = pipeline_search_json(pipeline_request, pipeline, model, usable);
      if (!fsdp_refused.empty()) document["fsdp_refused"] = fsdp_refused;
      if (pipeline.feasible) {  // the planned plan is the pipeline's; FSDP's best stays under without_pipeline
        nlohmann::json without;
        for (const char* key : {"plan", "predicted", "knobs", "host_memory"}) {
          if (document.contains(key)) without[key] = std::move(document[key]);
          document.erase(key);
        }
        document["without_pipeline"] = std::move(without);
        document["feasible"] = true;
        document["plan"] = to_json(pipeline.best.plan, model);
        document["knobs"] = pipeline.best.knobs;
      }
      output.json(document);
    } else {
      std::printf("%s", unmeasured_rates_line(profile).c_str());
      std::printf("%s", render_context_parallel_line(context_outcome).c_str());
      const std::string pipeline_text =
          pipeline.feasible ? render_pipeline_plan_text(pipeline, cluster, usable) : std::string();
      if (pipeline_request.pinned) {  // pipeline plans only: no FSDP search, no baselines
        print_header(result, model, cluster, headroom);
        std::printf("%s", pipeline.feasible ? pipeline_text.c_str()
                                            : ("NO PLAN FITS with --pipeline-parallel " +
                                               std::to_string(flags->pipeline.pipeline_parallel) + "\n")
                                                  .c_str());
      } else if (!fsdp_refused.empty()) {  // Note [Degrees a batch rules out]: pipeline plans only
        print_header(result, model, cluster, headroom);
        std::printf("FSDP without a pipeline: no plan (%s)\n", fsdp_refused.c_str());
        std::printf("%s", pipeline.feasible ? pipeline_text.c_str() : "NO PLAN FITS\n");
      } else {
        print_text(result, model, cluster, bands, headroom, pipeline_text);
      }
      std::printf("%s", render_pipeline_search_line(pipeline_request, pipeline, result.feasible).c_str());
    }
    if (!feasible) return kExitInfeasible;
    // Everything is built in memory first, then written together (Note [Output files]): a failure leaves no file.
    std::vector<OutputFile> outputs;
    if (!flags->out_file.empty()) outputs.push_back({flags->out_file, to_json(planned, model).dump(2) + "\n"});
    if (!flags->export_format.empty()) {
      for (const auto& file : export_plan(flags->export_format, planned, model, cluster.world_size(),
                                          cluster.gpus_per_node)) {
        outputs.push_back({(std::filesystem::path(flags->out_dir) / file.file_name).string(), file.contents});
      }
    }
    if (pipeline.feasible && (!flags->trace_file.empty() || !flags->report_file.empty())) {
      // Note [Pipeline trace]: the planned pipeline plan simulated again with its timeline kept (the search keeps
      // none), one process per pipeline rank.
      const PipelineStepAnalysis analysis = analyze_pipeline_step(model, cluster, profile, pipeline.best.plan, true);
      for (OutputFile& file : pipeline_output_files(
               analysis, usable, "shardplan plan: " + model.name + " on " + cluster.describe() + " (" +
                                     pipeline.best.knobs + ")",
               flags->trace_file, flags->report_file)) {
        outputs.push_back(std::move(file));
      }
    } else if (!flags->trace_file.empty() || !flags->report_file.empty()) {
      const StepAnalysis analysis = analyze_step(model, cluster, profile, result.best.plan, true);
      if (!flags->trace_file.empty()) {
        outputs.push_back({flags->trace_file, to_chrome_trace(analysis.simulation.timeline)
                                                      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                                                  "\n"});
      }
      if (!flags->report_file.empty()) {
        outputs.push_back(
            {flags->report_file, render_plan_report(result, model, cluster, analysis.simulation.timeline)});
      }
    }
    write_output_files(outputs);
    if (!flags->json) {
      for (const auto& output : outputs) std::printf("wrote %s\n", output.path.c_str());
    }
    return 0;
  };
}

}  // namespace shardplan::cli
