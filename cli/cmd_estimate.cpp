// `shardplan estimate`: per-rank memory breakdown for a model on a cluster under one strategy and wrapping.
#include <iostream>
#include <memory>

#include "commands.h"
#include "error_band_output.h"
#include "estimate.h"
#include "inputs.h"
#include "model_source.h"

namespace shardplan::cli {

namespace {
struct EstimateFlags {
  ModelClusterFlags model_cluster;
  TrainingFlags training;
  std::string strategy = "full_shard";
  std::string units = "per-block";
  bool model_states_only = false;
  bool cpu_offload = false;
  double memory_headroom_percent = 0;
  bool json = false;
};
}  // namespace

Action add_estimate_command(CLI::App& app, const Output& output) {
  auto* command = app.add_subcommand("estimate", "per-rank memory breakdown: does the model fit?");
  auto flags = std::make_shared<EstimateFlags>();
  add_model_cluster_flags(*command, flags->model_cluster);
  add_training_flags(*command, flags->training);
  command->add_option("--strategy", flags->strategy,
                      "full_shard | shard_grad_op | no_shard | hybrid_shard[:G] | hybrid_shard_zero2[:G] | "
                      "zero1 | zero2 | zero3")
      ->capture_default_str();
  command->add_option("--units", flags->units, "wrapping: per-block | whole | N-blocks")->capture_default_str();
  command->add_flag("--model-states-only", flags->model_states_only,
                    "only parameters, gradients and optimizer states (the ZeRO paper's model states)");
  command->add_flag("--cpu-offload", flags->cpu_offload,
                    "FSDP's CPU offload: parameter and gradient shards and the optimizer in host memory");
  add_memory_headroom_flag(*command, flags->memory_headroom_percent);
  command->add_flag("--json", flags->json, "print JSON (bytes) instead of the table (GiB)");
  return [command, flags, output]() {
    EstimateRequest request;
    const ModelSpec base = load_model(flags->model_cluster.model);
    request.cluster = resolve_cluster(flags->model_cluster);
    request.profile = resolve_profile(flags->model_cluster, request.cluster);
    request.training = resolve_training(flags->training, base);
    request.model = finetuned_for(base, request.training);
    request.strategy = parse_strategy(flags->strategy);
    request.wrapping = parse_units_policy(flags->units, request.model);
    request.units_policy = flags->units;
    request.model_states_only = flags->model_states_only;
    request.offload_params = flags->cpu_offload;
    check_optimizer_offload(request.training, request.offload_params, "--cpu-offload");
    // Note [Error bands] (costmodel/error_band.h): the bands of runs like this one, and the headroom from them.
    const PredictionErrorBands bands =
        error_bands_for(request.cluster.gpu.name, run_kind_of(request.cluster, request.training));
    const MemoryHeadroomChoice headroom =
        choose_memory_headroom(*command, flags->memory_headroom_percent, bands.memory);
    request.memory_headroom_fraction = headroom.percent / 100;
    const EstimateResult result = run_estimate(request);
    if (flags->json) {
      nlohmann::json document = to_json(result);
      document["error_band"] = error_band_json(bands, headroom);
      output.json(document);
    } else {
      std::cout << render_text(result);
      if (!request.model_states_only) {
        std::cout << "\n" << error_band_text(bands, result.simulation.step_time_s,
                                             result.simulation.reserved_peak_bytes, headroom, "");
      } else {
        std::cout << "\n" << headroom_line(headroom, "");
      }
    }
    return 0;
  };
}

}  // namespace shardplan::cli
