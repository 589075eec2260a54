// Tests of the fine-tuning recipe flags against sizes computed by hand: --loss chunked-ce and linear-ce (the output
// head's kept activations and workspaces, Note [Fine-tuning losses]) and --optimizer adamw8bit / paged-adamw8bit
// (bitsandbytes' states and absmax values, Note [8-bit optimizers]); --activation-offload (torchtune's
// OffloadActivations, Note [Activation offloading]): the copies, their time, device and host memory, JSON, exports.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "activation_offload.h"
#include "cluster.h"
#include "compute_cost.h"
#include "errors.h"
#include "hardware_catalog.h"
#include "hardware_profile.h"
#include "host_memory.h"
#include "loss.h"
#include "lowering.h"
#include "model_presets.h"
#include "op_durations.h"
#include "plan.h"
#include "plan_export.h"
#include "plan_json.h"
#include "precision.h"
#include "simulator.h"
#include "unit_layout.h"
#include "wrapping.h"

using namespace shardplan;

namespace {

bool contains_text(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::int64_t category(const MemoryByCategory& bytes, MemoryCategory which) {
  return bytes[static_cast<std::size_t>(which)];
}

// llama3-8b (hidden 4096, vocabulary 128256) at 2048 tokens, one micro-batch, bf16-mixed (2-byte activations).
TrainingConfig llama3_8b_training() {
  TrainingConfig training;
  training.seq_len = 2048;
  return training;
}

struct Head {
  std::int64_t kept = 0, forward_workspace = 0, backward_workspace = 0, largest = 0;
};

Head head_under(LossKind loss) {
  TrainingConfig training = llama3_8b_training();
  training.loss = loss;
  const ModelSpec model = model_for_loss(preset_model("llama3-8b"), loss);
  const Plan plan = default_plan(model, training, ShardingStrategy{}, wrap_per_block(model), 8);
  const std::size_t head = model.layers.size() - 1;
  REQUIRE(model.layers[head].kind == LayerKind::lm_head);
  return {kept_activation_bytes(model, training, head, ActivationCheckpointing::none),
          forward_workspace_bytes(plan, model, head), backward_workspace_bytes(plan, model, head),
          largest_activation_tensor_bytes(plan, model, head)};
}

double simulated_peak(LossKind loss) {
  TrainingConfig training = llama3_8b_training();
  training.loss = loss;
  const ModelSpec model = model_for_loss(preset_model("llama3-8b"), loss);
  const Cluster cluster = parse_cluster("8xH100-80GB", HardwareCatalog::builtin());
  const HardwareProfile profile = profile_from_cluster(cluster);
  const Plan plan = default_plan(model, training, ShardingStrategy{}, wrap_per_block(model), 8);
  const StepSchedule schedule = lower_plan(plan, model, {8, 8, profile.context_overhead_bytes});
  return static_cast<double>(simulate(schedule, profile, false).summary.peak_memory_bytes);
}

}  // namespace

// By hand, per token (h = 4096, V = 128256, bf16 activations):
// - plain cross-entropy keeps the head's input and logits in bf16 and log_softmax's fp32 output: 2·(h + V) + 4·V =
//   777,728 B; its forward workspace is the fp32 upcast, 4·V = 513,024 B; its backward's nll_loss and log_softmax
//   gradients, 2 · 4·V = 1,026,048 B. At 2048 tokens: 1,592,786,944 / 1,050,673,152 / 2,101,346,304 B.
// - chunked-ce keeps the same (8 chunks' log_softmax outputs), its workspaces are one chunk's: / 8 = 131,334,144 and
//   262,668,288 B; its largest tensor is the bf16 logits, 2·V·2048 = 525,336,576 B, no more the fp32 copy.
// - linear-ce keeps grad_input, 2·h = 8192 B per token (16,777,216 B), its forward workspace one chunk of logits of
//   the source's BT × H budget (16,777,216 B), no backward workspace.
// Mutation tried: chunk_loss dividing only the forward workspace fails CHECK( 2101346304 == 262668288 ).
TEST_CASE("recipes: --loss chunked-ce and linear-ce, llama3-8b's output head against hand-computed bytes") {
  const Head plain = head_under(LossKind::cross_entropy);
  CHECK(plain.kept == 1'592'786'944);
  CHECK(plain.forward_workspace == 1'050'673'152);
  CHECK(plain.backward_workspace == 2'101'346'304);
  CHECK(plain.largest == 1'050'673'152);

  const Head chunked = head_under(LossKind::chunked_ce);
  CHECK(chunked.kept == 1'592'786'944);
  CHECK(chunked.forward_workspace == 131'334'144);
  CHECK(chunked.backward_workspace == 262'668'288);
  CHECK(chunked.largest == 525'336'576);

  const Head fused = head_under(LossKind::linear_ce);
  CHECK(fused.kept == 16'777'216);
  CHECK(fused.forward_workspace == 16'777'216);
  CHECK(fused.backward_workspace == 0);

  // The step's peak (8 x H100, full_shard per block) falls with each: the head's transient is at the top of it.
  const double plain_peak = simulated_peak(LossKind::cross_entropy);
  const double chunked_peak = simulated_peak(LossKind::chunked_ce);
  const double fused_peak = simulated_peak(LossKind::linear_ce);
  MESSAGE("llama3-8b 2048 tokens on 8 x H100: peak plain " << plain_peak / 1e9 << " GB, chunked-ce "
                                                           << chunked_peak / 1e9 << " GB, linear-ce "
                                                           << fused_peak / 1e9 << " GB");
  CHECK(chunked_peak < plain_peak);
  CHECK(fused_peak < chunked_peak);
}

TEST_CASE("recipes: the losses' kernels — chunked-ce launches 8x the loss kernels, linear-ce the same GEMMs") {
  const ModelSpec plain = preset_model("llama3-8b");
  const ModelSpec chunked_model = model_for_loss(plain, LossKind::chunked_ce);
  const ModelSpec fused_model = model_for_loss(plain, LossKind::linear_ce);
  const LayerSpec& head = plain.layers.back();
  const LayerSpec& chunked = chunked_model.layers.back();
  const LayerSpec& fused = fused_model.layers.back();
  REQUIRE(head.kernels);
  CHECK(chunked.kernels->elementwise.back().forward.kernels == 8 * head.kernels->elementwise.back().forward.kernels);
  CHECK(chunked.kernels->elementwise.back().forward.fp32_elements ==
        head.kernels->elementwise.back().forward.fp32_elements);
  CHECK(fused.kernels->projections == head.kernels->projections);  // same FLOPs
  CHECK(fused.kernels->elementwise.back().forward.kernels == 32);   // ceil(128256 / 4096) chunks
  CHECK(fused.flops == head.flops);
  CHECK(loss_from_string("chunked-ce") == LossKind::chunked_ce);
  CHECK_THROWS_AS(loss_from_string("chunked"), InputError);
}

// By hand: bitsandbytes keeps m and v in one byte each and one fp32 absmax per started block of 256 per state.
// 1,000,000 elements: 2,000,000 + 2·4·3907 = 2,031,256 B; 257 elements: 514 + 2·4·2 = 530 B (AdamW: 8 per element).
// llama3-8b on one rank (nothing padded): a block's 218,112,000 parameters (q, o 4096²; k, v 1024·4096; gate, up,
// down 14336·4096; two norms) are 852,000 blocks: 436,224,000 + 6,816,000 = 443,040,000 B; the root's 1,050,677,248
// (embedding, norm, head) 4,104,208 blocks: 2,101,354,496 + 32,833,664 = 2,134,188,160 B. 32 blocks and the root:
// 16,311,468,160 B, against AdamW's 8 · 8,030,261,248 = 64,242,089,984 B.
// Mutation tried: dropping the absmax term in optimizer_held_bytes fails CHECK( 2000000 == 2031256 ).
TEST_CASE("recipes: --optimizer adamw8bit and paged-adamw8bit, states against hand-computed bytes") {
  const PrecisionRecipe bf16_mixed = precision_recipe("bf16-mixed");
  CHECK(optimizer_held_bytes(bf16_mixed, OptimizerKind::adamw8bit, 1'000'000) == 2'031'256);
  CHECK(optimizer_held_bytes(bf16_mixed, OptimizerKind::paged_adamw8bit, 257) == 530);
  CHECK(optimizer_held_bytes(bf16_mixed, OptimizerKind::adamw, 257) == 257 * 8);
  // zero-fp16 keeps fp32 master weights beside the 8-bit states: 4 + 2 bytes per element, plus the absmax values.
  CHECK(optimizer_held_bytes(precision_recipe("zero-fp16"), OptimizerKind::adamw8bit, 256) == 256 * 6 + 8);

  for (const OptimizerKind kind : {OptimizerKind::adamw8bit, OptimizerKind::paged_adamw8bit}) {
    TrainingConfig training = llama3_8b_training();
    training.optimizer = kind;
    const ModelSpec model = preset_model("llama3-8b");
    const Plan plan = default_plan(model, training, ShardingStrategy{}, wrap_per_block(model), 1);
    const std::vector<UnitLayout> layouts = unit_layouts(plan, model, 1, 1);
    CHECK(category(persistent_memory(layouts, plan, 0), MemoryCategory::optimizer_states) == 16'311'468'160LL);
    training.optimizer = OptimizerKind::adamw;
    const Plan adamw = default_plan(model, training, ShardingStrategy{}, wrap_per_block(model), 1);
    CHECK(category(persistent_memory(unit_layouts(adamw, model, 1, 1), adamw, 0), MemoryCategory::optimizer_states) ==
          64'242'089'984LL);
  }
  CHECK(optimizer_from_string("paged-adamw8bit") == OptimizerKind::paged_adamw8bit);
  CHECK(std::string(to_string(OptimizerKind::adamw8bit)) == "adamw8bit");
}

// The fused step reads and writes the parameter (2·4), reads the gradient (4), reads and writes the states (2·2) and
// their absmax values (2 · 2·4/256): 16.0625 bytes per element at the GPU's memory bandwidth, against AdamW's 28.
TEST_CASE("recipes: the 8-bit optimizer step moves 16.0625 bytes per element") {
  const Cluster cluster = parse_cluster("8xH100-80GB", HardwareCatalog::builtin());
  const HardwareProfile profile = profile_from_cluster(cluster);
  const PrecisionRecipe bf16_mixed = precision_recipe("bf16-mixed");
  CHECK(optimizer_step_time_s(1'000'000, bf16_mixed, OptimizerKind::adamw8bit, profile) ==
        doctest::Approx(memory_time_s(16.0625e6, profile)).epsilon(1e-12));
  CHECK(optimizer_bytes_per_element(bf16_mixed, OptimizerKind::paged_adamw8bit) == doctest::Approx(16.0625));
}

// Note [Exported recipes]: Liger's loss reads lm_head.weight in the model's forward, where only the root's hooks have
// unsharded it; a plan whose last unit takes the head along refuses the fsdp2 export in one line.
TEST_CASE("recipes: --loss linear-ce exports only with the output head in the root unit") {
  const ModelSpec model = model_for_loss(preset_model("tiny-llama"), LossKind::linear_ce);
  TrainingConfig training;
  training.seq_len = 64;
  training.loss = LossKind::linear_ce;
  Plan plan = default_plan(model, training, ShardingStrategy{}, wrap_per_block(model), 4);
  CHECK(contains_text(export_fsdp2(plan, model, 4, 4).contents, "    _apply_fused_linear_cross_entropy(model)\n"));
  plan.units.back().layers.end = model.layers.size();  // the last block's unit takes the final norm and the head
  std::string message;
  try {
    (void)export_fsdp2(plan, model, 4, 4);
  } catch (const InputError& error) {
    message = error.what();
  }
  CHECK(contains_text(message, "--export fsdp2: --loss linear-ce with the output head in unit"));
  CHECK(contains_text(message, "expected the head in the root unit, or --loss chunked-ce"));
}

namespace {

// tiny-llama (embedding, 4 blocks, norm, head; hidden 128, byte vocabulary) at 512 tokens x 64 sequences on 8 H100
// ranks: its states are a few MiB, so the allocated peak is the activations'.
struct OffloadCase {
  ModelSpec model = preset_model("tiny-llama");
  Cluster cluster = parse_cluster("8xH100-80GB", HardwareCatalog::builtin());
  HardwareProfile profile = profile_from_cluster(cluster);
  Plan plan;
  StepSchedule schedule;

  explicit OffloadCase(bool offload) {
    TrainingConfig training;
    training.seq_len = 512;
    training.micro_batch = 64;
    training.activation_offload = offload;
    plan = default_plan(model, training, ShardingStrategy{}, wrap_per_block(model), 8);
    schedule = lower_plan(plan, model, {8, 8, profile.context_overhead_bytes});
  }
  std::int64_t kept(std::size_t layer) const {
    return kept_activation_bytes(model, plan.training, layer, ActivationCheckpointing::none);
  }
  std::int64_t peak() const { return simulate(schedule, profile, false).summary.peak_memory_bytes; }
};

}  // namespace

// By hand (Note [Activation offloading]): every layer but the head copies its kept bytes out once after its forward
// (a device_to_host op freeing them) and back once before its backward (a host_to_device op allocating them), each
// in bytes / pcie_bytes_per_s; the host holds the sum of those bytes; on the device at most two layers' kept bytes
// are in flight where the whole model's were, so the peak falls by at least Σ kept (not the head) − 2 · the largest.
// Mutation tried: the head offloaded too (no lm_head test in offloaded_activation_bytes) fails the head's CHECKs.
TEST_CASE("recipes: --activation-offload, tiny-llama's copies, their time, host bytes and device peak by hand") {
  const OffloadCase on(true), off(false);
  std::int64_t offloaded = 0, largest = 0;
  std::size_t copied_layers = 0;
  for (std::size_t layer = 0; layer < on.model.layers.size(); ++layer) {
    const bool head = on.model.layers[layer].kind == LayerKind::lm_head;
    CHECK(offloaded_activation_bytes(on.plan, on.model, layer) == (head ? 0 : on.kept(layer)));
    CHECK(offloaded_activation_bytes(off.plan, off.model, layer) == 0);
    if (head || on.kept(layer) == 0) continue;
    offloaded += on.kept(layer);
    largest = std::max(largest, on.kept(layer));
    ++copied_layers;
  }
  REQUIRE(copied_layers >= 4);  // the 4 blocks keep something
  const std::vector<double> base_s = base_durations_s(on.schedule, on.profile);
  std::size_t outs = 0, ins = 0;
  for (const Op& op : on.schedule.ops) {
    if (op.kind != OpKind::device_to_host && op.kind != OpKind::host_to_device) continue;
    REQUIRE(op.layer >= 0);
    const std::int64_t bytes = on.kept(static_cast<std::size_t>(op.layer));
    CHECK(on.model.layers[static_cast<std::size_t>(op.layer)].kind != LayerKind::lm_head);
    CHECK(op.bytes == bytes);
    const auto& changes = op.kind == OpKind::device_to_host ? op.frees : op.allocates;
    REQUIRE(changes.size() == 1);
    CHECK(changes[0].category == MemoryCategory::activations);
    CHECK(changes[0].bytes == bytes);
    CHECK(base_s[static_cast<std::size_t>(op.id)] ==
          doctest::Approx(static_cast<double>(bytes) / on.profile.pcie_bytes_per_s));
    (op.kind == OpKind::device_to_host ? outs : ins) += 1;
  }
  CHECK(outs == copied_layers);
  CHECK(ins == copied_layers);
  for (const Op& op : off.schedule.ops) {
    CHECK((op.kind != OpKind::device_to_host && op.kind != OpKind::host_to_device));
  }
  const HostMemoryUse host = host_memory_use(on.plan, on.model, on.cluster);
  CHECK(category(host.per_rank, MemoryCategory::activations) == offloaded);
  CHECK(host.per_rank_bytes == offloaded);
  CHECK(host.per_node_bytes == 8 * offloaded);
  CHECK(host_memory_use(off.plan, off.model, off.cluster).per_rank_bytes == 0);
  CHECK(off.peak() - on.peak() >= offloaded - 2 * largest);
  CHECK(on.peak() < off.peak());
}

TEST_CASE("recipes: --activation-offload in the plan JSON (only when on), the recipe text and the exports") {
  const ModelSpec model = preset_model("tiny-llama");
  TrainingConfig training;
  training.seq_len = 64;
  training.activation_offload = true;
  const Plan plan = default_plan(model, training, ShardingStrategy{}, wrap_per_block(model), 4);
  const nlohmann::json document = to_json(plan, model);
  CHECK(document.at("training").at("activation_offload") == true);
  CHECK(plan_from_json(document, "test", model).training.activation_offload);
  CHECK(contains_text(recipe_text(plan.training), "activation offload (torchtune OffloadActivations"));
  Plan plain = plan;
  plain.training.activation_offload = false;
  CHECK_FALSE(to_json(plain, model).at("training").contains("activation_offload"));
  CHECK_FALSE(plan_from_json(to_json(plain, model), "test", model).training.activation_offload);
  CHECK(recipe_text(plain.training).empty());
  const std::string script = export_fsdp2(plan, model, 4, 4).contents;
  CHECK(contains_text(script, "ACTIVATION_OFFLOAD = True\n"));
  CHECK(contains_text(script, "context = OffloadActivations(use_pin_memory=True, use_streams=True)"));
  CHECK(contains_text(script, "head.register_forward_pre_hook(lambda *args: noop.__enter__())"));
  CHECK_FALSE(contains_text(export_fsdp2(plain, model, 4, 4).contents, "ACTIVATION_OFFLOAD"));
  for (const std::string format : {"fsdp1", "deepspeed"}) {
    std::string message;
    try {
      (void)export_plan(format, plan, model, 4, 4);
    } catch (const InputError& error) {
      message = error.what();
    }
    CHECK(message == "--export " + format + ": --activation-offload is carried by fsdp2 exports only (the forward " +
                         "runs in the training loop); expected --export fsdp2, or no --activation-offload");
  }
  nlohmann::json two_d = document;
  two_d["tensor_parallel_degree"] = 2;
  CHECK_THROWS_AS((void)plan_from_json(two_d, "test", model), InputError);
}
