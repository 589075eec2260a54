// `shardplan capacity`: sweep GPU types and counts; print the best plan's speed, days and cost, and the Pareto front.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "capacity.h"
#include "capacity_report.h"
#include "commands.h"
#include "error_band_output.h"
#include "errors.h"
#include "flag_checks.h"
#include "input_limits.h"
#include "inputs.h"
#include "json_input.h"
#include "model_source.h"
#include "output_files.h"

namespace shardplan::cli {

namespace {
struct CapacityFlags {
  std::string model;
  std::string gpus = "A100-80GB,H100-80GB,H200-141GB";
  std::string catalog_file;
  std::vector<std::string> profile_files;
  TrainingFlags training;
  int gpus_per_node = 0;
  int min_gpus = 1;
  int max_gpus = 4096;
  double tokens = 1e12;
  std::int64_t global_batch_tokens = 0;
  std::string report_file;
  SearchKnobFlags knobs;
  double memory_headroom_percent = 0;
  double max_days = kDefaultMaxPracticalDays;
  int jobs = 0;  // 0: the machine's cores
  bool json = false;
};

std::vector<std::string> split_names(const std::string& text) {
  std::vector<std::string> names;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto comma = text.find(',', start);
    const std::string name = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!name.empty()) names.push_back(name);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return names;
}
}  // namespace

Action add_capacity_command(CLI::App& app, const Output& output) {
  auto* command = app.add_subcommand("capacity", "sweep GPU types and counts: fits, speed, days and cost to train");
  auto flags = std::make_shared<CapacityFlags>();
  command->add_option("--model,-m", flags->model, "preset name, model JSON, or Hugging Face config.json")->required();
  command->add_option("--gpus", flags->gpus, "comma-separated GPU types")->capture_default_str();
  add_catalog_flag(*command, flags->catalog_file);
  command->add_option("--profile", flags->profile_files,
                      "calibrated profile (shardplan.profile/v1), applied to the GPU type it was measured on; repeatable");
  add_training_flags(*command, flags->training);
  const CLI::Validator gpu_count = int_range(1, limits::kMaxWorldSize);
  command->add_option("--gpus-per-node", flags->gpus_per_node, "GPUs per node (default: each GPU's usual)")
      ->check(gpu_count);
  command->add_option("--min-gpus", flags->min_gpus, "smallest count swept")->capture_default_str()->check(gpu_count);
  command->add_option("--max-gpus", flags->max_gpus, "largest count swept")->capture_default_str()->check(gpu_count);
  // Note [Pinned knobs]: each point searches the knobs left out; a pinned degree a point cannot take is why it fails.
  add_search_knob_flags(*command, flags->knobs);
  command->add_option("--tokens", flags->tokens, "training budget in tokens")
      ->capture_default_str()
      ->check(finite_range(1, limits::kMostTokens));
  add_memory_headroom_flag(*command, flags->memory_headroom_percent);
  // Note [Practical points] (planner/capacity.h).
  // Note [Parallel sweep] (planner/capacity.cpp): the table is the same for any count.
  command->add_option("--jobs,-j", flags->jobs,
                      "points searched at once (default: the machine's cores); the result does not depend on it")
      ->check(CLI::Range(1, 1024));
  command->add_option("--max-days", flags->max_days,
                      "a fitting point that needs more days than this to train --tokens is flagged impractical; the "
                      "headline is the smallest practical count")
      ->capture_default_str()
      ->check(finite_range(1e-6, 1e9));
  command->add_option("--global-batch-tokens", flags->global_batch_tokens,
                      "fixed global batch in tokens (default: one micro-batch per GPU)")
      ->check(int_range(1, limits::kMaxGlobalBatch * limits::kMaxSeqLen));
  // Note [Output files]: checked as parsed, written at the end through a temporary.
  command->add_option("--report", flags->report_file,
                      "write an HTML report: days vs cost per GPU type with the Pareto front, throughput vs GPU "
                      "count, what limits each point")
      ->check(output_file("--report"));
  command->add_flag("--json", flags->json, "print JSON");
  return [command, flags, output]() {
    const ModelSpec base = load_searchable_model(flags->model, "capacity");
    const HardwareCatalog catalog = load_catalog(flags->catalog_file);
    const TrainingConfig training = resolve_training(flags->training, base);
    const ModelSpec model = finetuned_for(base, training);
    CapacityOptions options;
    options.gpus = split_names(flags->gpus);
    options.gpus_per_node = flags->gpus_per_node;
    if (flags->min_gpus > flags->max_gpus) {
      throw InputError("--min-gpus " + std::to_string(flags->min_gpus) + ": expected at most --max-gpus " +
                       std::to_string(flags->max_gpus) + " (the sweep runs from the one to the other)");
    }
    options.min_gpus = flags->min_gpus;
    options.max_gpus = flags->max_gpus;
    options.tokens = flags->tokens;
    options.global_batch_tokens = flags->global_batch_tokens;
    options.pins = resolve_knob_pins(*command, flags->knobs, training);
    // Note [Error bands] (costmodel/error_band.h): one headroom for the whole sweep — the given one, else the largest
    // of the memory bands' over the swept GPUs, single- and multi-node.
    MemoryHeadroomChoice headroom = choose_memory_headroom(*command, flags->memory_headroom_percent, ErrorBand{});
    if (headroom.from_band) {
      headroom.percent = 0;
      for (const std::string& name : options.gpus) {
        for (const int nodes : {1, 2}) {
          const ErrorBand memory = error_bands_for(name, {nodes, !training.finetune.trains_all()}).memory;
          const double percent = memory_headroom_percent(memory);
          if (percent >= headroom.percent) headroom = {percent, true, memory};
        }
      }
    }
    options.memory_headroom_fraction = headroom.percent / 100;
    options.max_practical_days = flags->max_days;
    options.threads = flags->jobs > 0 ? static_cast<std::size_t>(flags->jobs)
                                      : std::max(1u, std::thread::hardware_concurrency());
    for (const std::string& argument : flags->profile_files) {
      const std::string path = json_argument_origin(argument, "profile");  // Note [Inline JSON]
      nlohmann::json document = read_json_argument(argument, "profile");
      // The whole profile is checked here, before the sweep, as `simulate --profile` checks it: a bad field is an
      // input error naming it, whichever point would have applied it.
      (void)apply_profile_json(HardwareProfile{}, document, path);
      const std::string device = JsonObjectReader(document, path).optional_string("device").value_or("");
      if (std::find(options.gpus.begin(), options.gpus.end(), device) == options.gpus.end()) {
        throw InputError(path + ": field 'device': expected one of the swept GPU types (--gpus), got '" + device +
                         "'");
      }
      options.profiles.emplace_back(std::move(document), path);
    }
    // Note [Step work]: the sweep's largest search is at each GPU type's smallest count, where the global batch
    // (when fixed) gives the most micro-batches per rank; refuse the request before searching anything.
    bool any_count = false;
    for (const std::string& name : options.gpus) {
      const GpuSpec& gpu = catalog.gpu(name);
      const int per_node = options.gpus_per_node > 0 ? options.gpus_per_node : gpu.default_gpus_per_node;
      const auto counts = capacity_counts(options.min_gpus, options.max_gpus, per_node);
      if (counts.empty()) continue;
      any_count = true;
      TrainingConfig sized = training;
      if (options.global_batch_tokens > 0) sized.global_batch = options.global_batch_tokens / training.seq_len;
      check_search_work(sized, model, counts.front(),
                        "capacity at " + std::to_string(counts.front()) + " x " + gpu.name + " (raise --min-gpus)");
    }
    if (!any_count) {
      throw InputError("--min-gpus " + std::to_string(flags->min_gpus) + " --max-gpus " +
                       std::to_string(flags->max_gpus) + ": no GPU count to sweep between them (the sweep takes "
                       "powers of two, whole nodes beyond one node)");
    }
    const auto started = std::chrono::steady_clock::now();
    bool drew_progress = false;
    options.progress = [&](std::size_t done, std::size_t total) {
      // A progress line on stderr, only once the sweep has taken over a second.
      if (std::chrono::steady_clock::now() - started < std::chrono::seconds(1)) return;
      std::fprintf(stderr, "\rcapacity: %zu/%zu configurations", done, total);
      drew_progress = true;
    };
    const CapacityResult result = capacity_sweep(model, catalog, training, options);
    if (drew_progress) std::fprintf(stderr, "\n");
    if (!flags->report_file.empty()) {
      char detail[64];
      std::snprintf(detail, sizeof detail, ", %.3g tokens", options.tokens);
      write_output_files({{flags->report_file, render_capacity_report(result, model.name + detail)}});
    }
    if (flags->json) {
      output.json(to_json(result));
      return 0;
    }
    std::printf("%s, %.3g tokens; fits: device peak within the GPU's memory less %g%% headroom; practical: <= %g days\n"
                "%-11s %6s %5s %10s %11s %6s %9s %12s  %s\n",
                model.name.c_str(), options.tokens, headroom.percent, options.max_practical_days, "gpu",
                "GPUs", "fits", "step s", "tokens/s", "MFU", "days", "cost USD", "plan");
    for (const auto& point : result.points) {
      if (point.fits) {
        std::printf("%-11s %6d %5s %10.3f %11.0f %5.1f%% %9.1f %12.0f  %s%s%s\n", point.gpu.c_str(), point.gpus, "yes",
                    point.step_time_s, point.tokens_per_s, 100 * point.mfu, point.days, point.cost_usd,
                    point.practical ? "" : "[IMPRACTICAL: over --max-days] ", point.knobs.c_str(),
                    point.pareto ? "  [pareto]" : "");
      } else {
        std::printf("%-11s %6d %5s %10s %11s %6s %9s %12s  %s\n", point.gpu.c_str(), point.gpus, "no", "-", "-", "-",
                    "-", "-", point.why_not.c_str());
      }
    }
    std::printf("\nsmallest practical count (fits, <= %g days):", options.max_practical_days);
    for (const auto& [gpu, count] : result.smallest_practical) {
      std::printf("  %s %s", gpu.c_str(), count > 0 ? std::to_string(count).c_str() : "none");
    }
    std::printf("\nswept %zu configurations in %.2f s\n", result.points.size(), result.seconds);
    if (!flags->report_file.empty()) std::printf("wrote %s\n", flags->report_file.c_str());
    return 0;
  };
}

}  // namespace shardplan::cli
