// Registration and resolution of the flags that several subcommands share.
#include "inputs.h"

#include <cmath>
#include <iostream>

#include "errors.h"
#include "flag_checks.h"
#include "input_limits.h"
#include "json_input.h"
#include "name_suggest.h"
#include "precision.h"

namespace shardplan::cli {

void add_catalog_flag(CLI::App& command, std::string& catalog_file) {
  command.add_option("--catalog", catalog_file, "JSON file adding or overriding GPU and fabric entries");
}

void add_model_cluster_flags(CLI::App& command, ModelClusterFlags& flags) {
  command.add_option("--model,-m", flags.model, "preset name, model JSON, or Hugging Face config.json")->required();
  command.add_option("--cluster,-c", flags.cluster, "e.g. 8xH100-80GB, 4x8xH100-80GB, or a cluster JSON")
      ->required();
  add_catalog_flag(command, flags.catalog_file);
  command.add_option("--price", flags.price_per_gpu_hour, "price per GPU-hour in USD (default: the catalog's)")
      ->check(finite_range(0, limits::kMostPricePerGpuHour));
  command.add_option("--profile", flags.profile_file, "calibrated hardware profile JSON (shardplan.profile/v1)");
}

void add_training_flags(CLI::App& command, TrainingFlags& flags) {
  // Note [Input limits]: ranges checked as the flags are parsed; validate_training checks their products.
  command.add_option("--seq-len", flags.seq_len, "tokens per sequence (default: the model's training length)")
      ->check(int_range(1, limits::kMaxSeqLen));
  command.add_option("--micro-batch", flags.micro_batch, "sequences per rank per forward/backward")
      ->capture_default_str()
      ->check(int_range(1, limits::kMaxMicroBatch));
  command.add_option("--global-batch", flags.global_batch,
                     "sequences per optimizer step (default: one micro-batch per rank)")
      ->check(int_range(1, limits::kMaxGlobalBatch));
  // Every recipe precision_recipe() accepts, from its own table, so the list cannot fall behind it.
  std::string recipes;
  for (const std::string& name : precision_recipe_names()) recipes += (recipes.empty() ? "" : " | ") + name;
  command.add_option("--precision", flags.precision, recipes)->capture_default_str();
  command.add_option("--optimizer", flags.optimizer, "adamw | sgd-momentum | sgd")->capture_default_str();
  command.add_option("--ac", flags.ac, "activation checkpointing: none | full | selective")->capture_default_str();
  command.add_option("--ac-every", flags.ac_every,
                     "apply --ac to every k-th block only (blocks k, 2k, ...; torchtitan's selective_ac_option k)")
      ->capture_default_str();
  command.add_flag("--no-flash-attention", flags.no_flash_attention, "materialise attention scores (s² memory)");
  command.add_option("--attention", flags.attention,
                     "attention kernel: flash (FlashAttention-2, SDPA) | triton (Triton FlashAttention) | eager "
                     "(materialised scores, as --no-flash-attention)");
  command.add_flag("--no-sync", flags.no_sync, "keep unsharded gradients across accumulation micro-batches");
}

HardwareCatalog load_catalog(const std::string& catalog_file) {
  HardwareCatalog catalog = HardwareCatalog::builtin();
  if (!catalog_file.empty()) {  // a file, or the catalog inline (Note [Inline JSON])
    catalog.merge_user_json(read_json_argument(catalog_file, "catalog"), json_argument_origin(catalog_file, "catalog"));
  }
  return catalog;
}

Cluster resolve_cluster(const ModelClusterFlags& flags) {
  Cluster cluster = parse_cluster(flags.cluster, load_catalog(flags.catalog_file));
  if (!std::isnan(flags.price_per_gpu_hour)) cluster.price_per_gpu_hour = flags.price_per_gpu_hour;  // in range
  return cluster;
}

HardwareProfile resolve_profile(const ModelClusterFlags& flags, const Cluster& cluster) {
  HardwareProfile profile = profile_from_cluster(cluster);
  if (!flags.profile_file.empty()) {
    profile = apply_profile_json(profile, read_json_argument(flags.profile_file, "profile"),
                                 json_argument_origin(flags.profile_file, "profile"));
  }
  return profile;
}

TrainingConfig resolve_training(const TrainingFlags& flags, const ModelSpec& model) {
  TrainingConfig training;
  training.seq_len = flags.seq_len > 0 ? flags.seq_len : model.default_seq_len;
  training.micro_batch = flags.micro_batch;
  training.global_batch = flags.global_batch;
  training.precision = precision_recipe(flags.precision);
  training.optimizer = optimizer_from_string(flags.optimizer);
  training.checkpointing = checkpointing_from_string(flags.ac);
  training.checkpoint_every_blocks = flags.ac_every;
  training.flash_attention = !flags.no_flash_attention;
  if (!flags.attention.empty()) {
    if (flags.no_flash_attention && flags.attention != "eager") {
      throw InputError("--attention " + flags.attention + " contradicts --no-flash-attention");
    }
    if (flags.attention == "eager") {
      training.flash_attention = false;
    } else {
      try {
        training.attention_kernel = attention_kernel_from_string(flags.attention);
      } catch (const InputError&) {
        throw InputError("--attention '" + flags.attention + "': expected flash, triton or eager" +
                         did_you_mean(flags.attention, {"flash", "triton", "eager"}));
      }
    }
  }
  training.no_sync_accumulation = flags.no_sync;
  validate_training(training, model);
  return training;
}

// Invalid UTF-8 (a byte string from a flag) is replaced, not thrown halfway through the output.
void print_json(const nlohmann::json& document) {
  std::cout << document.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

}  // namespace shardplan::cli
