// Flags shared by several subcommands (--model, --cluster, --catalog, training flags) and their resolution.
#pragma once

#include <limits>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cluster.h"
#include "hardware_catalog.h"
#include "hardware_profile.h"
#include "model_spec.h"
#include "search.h"
#include "training.h"

namespace shardplan::cli {

struct ModelClusterFlags {
  std::string model;
  std::string cluster;
  std::string catalog_file;  // user catalog merged over the built-in one
  double price_per_gpu_hour = std::numeric_limits<double>::quiet_NaN();  // NaN: the catalog's
  std::string profile_file;        // calibrated HardwareProfile applied over the catalog defaults
};

struct TrainingFlags {
  std::int64_t seq_len = 0;  // 0: the model's default
  std::int64_t micro_batch = 1;
  std::int64_t global_batch = 0;
  std::string precision = "bf16-mixed";
  std::string optimizer = "adamw";
  std::string ac = "none";
  std::int64_t ac_every = 1;
  bool no_flash_attention = false;
  std::string attention;  // flash | triton | eager ("" : flash unless --no-flash-attention)
  bool no_sync = false;
  bool torch_compile = false;
  std::string loss = "cross-entropy";  // Note [Fine-tuning losses] (costmodel/loss.h)
  bool activation_offload = false;      // Note [Activation offloading] (planner/activation_offload.h)
  bool optimizer_in_backward = false;   // Note [Optimizer in backward] (planner/optimizer_in_backward.h)
  // Note [Expert parallelism] (planner/unit_layout.h): 0 = not given (1; `plan` searches the degree for MoE models).
  int expert_parallel = 0;
  // Fine-tuning (costmodel/finetune.h), named as PEFT's LoraConfig and bitsandbytes' BitsAndBytesConfig: values as
  // given ("" : not given), parsed and checked by resolve_training.
  std::string finetune;
  std::vector<std::string> freeze;
  std::string lora_r, lora_alpha, lora_dropout, lora_target_modules;
  std::string bnb_quant_type, bnb_quant_storage, bnb_compute_dtype;
  bool bnb_double_quant = false;
  int fsdp_version = 2;
  std::string use_orig_params;
};

// Note [Pinned knobs] (planner/search.h): the search knobs `plan` and `capacity` take beside the training flags.
struct SearchKnobFlags {
  std::string strategy;                  // "" : searched
  std::string tensor_parallel = "auto";  // auto: searched
  bool cpu_offload = false;              // given (true or =false): pinned
};

void add_model_cluster_flags(CLI::App& command, ModelClusterFlags& flags);
void add_catalog_flag(CLI::App& command, std::string& catalog_file);
void add_training_flags(CLI::App& command, TrainingFlags& flags);
// After add_training_flags, for a command that searches: --strategy, --tensor-parallel and --cpu-offload, and help
// saying of every knob (those of the training flags too) that it is fixed when given and searched when omitted.
void add_search_knob_flags(CLI::App& command, SearchKnobFlags& flags);
// Which knobs the user gave (CLI11's count, after parsing), with their values: the one record the search reads.
// InputError naming the flag for a bad value (--strategy, --tensor-parallel) or --ac-every without --ac.
KnobPins resolve_knob_pins(const CLI::App& command, const SearchKnobFlags& flags, const TrainingConfig& training);
// --memory-headroom PCT (Note [Memory headroom]); when omitted the command takes the memory error band's
// (choose_memory_headroom in error_band_output.h), so `percent` is read only when the flag was given.
void add_memory_headroom_flag(CLI::App& command, double& percent);

HardwareCatalog load_catalog(const std::string& catalog_file);
// The model of a searching command (plan, capacity): load_model, and InputError for a model with no transformer block,
// which the wrapping search has nothing to wrap in (estimate and simulate take one).
ModelSpec load_searchable_model(const std::string& model_argument, const std::string& command);
Cluster resolve_cluster(const ModelClusterFlags& flags);
HardwareProfile resolve_profile(const ModelClusterFlags& flags, const Cluster& cluster);
TrainingConfig resolve_training(const TrainingFlags& flags, const ModelSpec& model);
// The model resolved for the training's fine-tuning (finetuned_model) and its loss (model_for_loss); InputError names
// the flag.
ModelSpec finetuned_for(const ModelSpec& model, const TrainingConfig& training);

// --tensor-parallel: "auto" searches 1, 2, 4 and 8 (those the model and node take), a number that one degree only
// (checked against the model and cluster: InputError naming the flag), "1" FSDP alone.
std::vector<int> tensor_parallel_degrees(const std::string& text, const ModelSpec& model, const Cluster& cluster);
// --compile is modelled for FSDP alone (Note [Compiled blocks]): InputError for a tensor-parallel degree above 1.
void check_compile_tensor_parallel(int degree);
// --loss chunked-ce and linear-ce are modelled on the whole vocabulary, not loss parallel's shards (Note [Fine-tuning
// losses]): InputError for a tensor-parallel degree above 1.
void check_loss_tensor_parallel(LossKind loss, int degree);
// --activation-offload is modelled for FSDP alone (Note [Activation offloading]): InputError for a tensor-parallel
// degree above 1.
void check_activation_offload_tensor_parallel(bool activation_offload, int degree);

// Prints a JSON document (pretty, newline-terminated) to stdout.
void print_json(const nlohmann::json& document);

}  // namespace shardplan::cli
