// Tests of fine-tuning's memory, compute and communication terms against sizes computed by hand: llama3-70b LoRA
// r=16 on q, k, v, o over 8 ranks; QLoRA of llama2-70b on 2 x RTX4090 as answer.ai's fsdp_qlora runs it; frozen
// embeddings under FSDP2 and FSDP1; bitsandbytes' quantisation constants; the front ends' wrapping rules.
#include <doctest/doctest.h>

#include <string>

#include "cluster.h"
#include "errors.h"
#include "estimate.h"
#include "finetune_apply.h"
#include "host_memory.h"
#include "lowering.h"
#include "model_presets.h"
#include "pass_kernels.h"
#include "search.h"
#include "simulator.h"
#include "unit_layout.h"

using namespace shardplan;

namespace {

std::int64_t category(const MemoryByCategory& bytes, MemoryCategory which) {
  return bytes[static_cast<std::size_t>(which)];
}

struct Setup {
  ModelSpec model;
  Plan plan;
  std::vector<UnitLayout> layouts;
  StepSchedule schedule;
};

Setup setup(const std::string& preset, const TrainingConfig& training, int world, int gpus_per_node, bool offload = false) {
  Setup s;
  s.model = finetuned_model(preset_model(preset), training.finetune, FinetuneFieldNames::cli());
  s.plan = default_plan(s.model, training, ShardingStrategy{}, wrap_per_block(s.model), world);
  s.plan.offload.params = offload;
  s.layouts = unit_layouts(s.plan, s.model, world, gpus_per_node);
  s.schedule = lower_plan(s.plan, s.model, {world, gpus_per_node, 0});
  return s;
}

std::vector<const Op*> ops_of(const StepSchedule& schedule, OpKind kind) {
  std::vector<const Op*> ops;
  for (const Op& op : schedule.ops) {
    if (op.kind == kind) ops.push_back(&op);
  }
  return ops;
}

TrainingConfig lora_llama3_70b() {
  TrainingConfig training;
  training.seq_len = 4096;
  training.finetune.mode = FinetuneMode::lora;
  training.finetune.lora.r = 16;
  training.finetune.lora.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj"};
  return training;
}

}  // namespace

// By hand (llama3-70b: hidden 8192, 8 kv heads of 128 = 1024, intermediate 28672, 80 blocks, vocabulary 128256):
// a block's q and o are 8192 x 8192 = 67,108,864 each, k and v 1024 x 8192 = 8,388,608, gate, up and down 28672 x 8192
// = 234,881,024, its two norms 16,384: 855,654,400 frozen. LoRA r=16 adds r·(in + out) per target: q and o
// 16·16384 = 262,144, k and v 16·9216 = 147,456: 819,200 trainable. The root (embed_tokens, norm, lm_head) holds
// 2·128256·8192 + 8192 = 2,101,354,496, all frozen. On 8 ranks under bf16-mixed with FSDP2: a block's shard is
// 819,200/8 fp32 adapters (409,600 B) and 855,654,400/8 frozen weights in bf16 (213,913,600 B); the root's 525,338,624
// B; gradients and AdamW's two fp32 states for the adapters only (102,400 per block). A block all-gathers
// (819,200 + 855,654,400) x 2 B = 1,712,947,200 B and reduce-scatters 819,200 x 2 B (bf16) = 1,638,400 B; the root,
// all frozen, reduce-scatters nothing.
// Mutation tried: FSDP2 giving frozen parameters gradients (grad_elements = param_count in unit_layout) fails here:
// CHECK( 856473600 == 819200 ) on the block's gradient elements, CHECK( 107059200 == 102400 ) on its shard.
TEST_CASE("finetune: llama3-70b LoRA r=16 on q,k,v,o over 8 ranks, term by term against hand-computed sizes") {
  const Setup s = setup("llama3-70b", lora_llama3_70b(), 8, 8);
  REQUIRE(s.layouts.size() == 81);
  const UnitLayout& block = s.layouts[1];
  CHECK(block.param_count == 819'200 + 855'654'400);
  CHECK(block.grad_elements == 819'200);
  CHECK(block.shard_bytes == 409'600 + 213'913'600);
  CHECK(block.cast_shard_bytes == 102'400 * 2);  // only the fp32 adapters are cast for the all-gather
  CHECK(block.grad_shard_elements == 102'400);
  CHECK(block.optimizer_shard_elements == 102'400);
  CHECK(block.gathered_bytes == 1'712'947'200);
  CHECK(block.grad_copy_bytes == 819'200 * 2);
  const UnitLayout& root = s.layouts[0];
  CHECK(root.param_count == 2'101'354'496);
  CHECK(root.grad_elements == 0);
  CHECK(root.shard_bytes == 525'338'624);
  CHECK(root.optimizer_shard_elements == 0);
  CHECK(root.gathered_bytes == 4'202'708'992);

  // Model states per rank: 80 blocks and the root.
  const MemoryByCategory persistent = persistent_memory(s.layouts, s.plan, 0);
  CHECK(category(persistent, MemoryCategory::sharded_params) == 80LL * (409'600 + 213'913'600) + 525'338'624);
  CHECK(category(persistent, MemoryCategory::sharded_grads) == 80 * 102'400 * 4);
  CHECK(category(persistent, MemoryCategory::optimizer_states) == 80 * 102'400 * 8);
  // Full fine-tuning holds 16 bytes per parameter (fp32 shard, fp32 gradient, AdamW m and v): 141.1 GB per rank.
  TrainingConfig full = lora_llama3_70b();
  full.finetune = {};
  const Setup f = setup("llama3-70b", full, 8, 8);
  const MemoryByCategory full_states = persistent_memory(f.layouts, f.plan, 0);
  std::int64_t full_total = 0, lora_total = 0;
  for (auto bytes : full_states) full_total += bytes;
  for (auto bytes : persistent) lora_total += bytes;
  CHECK(full_total == 70'553'706'496LL * 16 / 8);
  MESSAGE("llama3-70b model states per rank of 8: full fine-tune " << full_total / 1e9 << " GB, LoRA r=16 (q,k,v,o) "
                                                                   << lora_total / 1e9 << " GB");

  // Communication: every block reduce-scatters its adapters' gradients only; nothing for the frozen root.
  const auto scatters = ops_of(s.schedule, OpKind::reduce_scatter);
  CHECK(scatters.size() == 80);
  for (const Op* op : scatters) CHECK(op->bytes == 1'638'400);
  for (const Op* op : ops_of(s.schedule, OpKind::all_gather)) {
    CHECK(op->bytes == (op->unit == 0 ? 4'202'708'992 : 1'712'947'200));
  }

  // Activations: LoRA keeps each target's rank-16 output (lora_B's input) in bf16: 4 x 16 x 2 B per token; with
  // lora_dropout 0 the adapter's input is the projection's own, already kept. The embedding, frozen with nothing
  // before it, keeps nothing.
  const std::size_t first_block = 1;
  const std::int64_t tokens = 4096;
  CHECK(kept_activation_bytes(s.model, s.plan.training, first_block, ActivationCheckpointing::none) -
            kept_activation_bytes(f.model, f.plan.training, first_block, ActivationCheckpointing::none) ==
        4 * 16 * 2 * tokens);
  CHECK(kept_activation_bytes(s.model, s.plan.training, 0, ActivationCheckpointing::none) == 0);

  // Compute: forward runs the frozen GEMMs and each adapter's two rank-r GEMMs; backward the frozen weights' input
  // gradients only (no weight gradient) and each adapter's four; the embedding runs no backward at all.
  const double weights = 855'654'400.0 - 16'384.0, adapters = 819'200.0, t = 4096.0;
  const PassKernels forward = pass_kernels(s.model, first_block, s.plan.training, ComputePass::forward,
                                           ActivationCheckpointing::none);
  const PassKernels backward = pass_kernels(s.model, first_block, s.plan.training, ComputePass::backward,
                                            ActivationCheckpointing::none);
  CHECK(forward.gemm_flops() == doctest::Approx(2 * t * (weights + adapters)));
  CHECK(backward.gemm_flops() == doctest::Approx(2 * t * weights + 4 * t * adapters));
  CHECK(backward.gemms.size() == 7 + 4 * 4);
  CHECK(pass_kernels(s.model, 0, s.plan.training, ComputePass::backward, ActivationCheckpointing::none).empty());
}

// answer.ai's fsdp_qlora README, "Finetune Llama-2 70B on Dual 24GB GPUs": train.py --model_name
// meta-llama/Llama-2-70b-hf --batch_size 2 --context_length 2048 --precision bf16 --train_type qlora
// --use_gradient_checkpointing true --use_cpu_offload true (its defaults: lora_rank 64, lora_alpha 16, lora_dropout
// 0.1, target modules k, q, v, up, down, gate; Linear4bit nf4 with bitsandbytes' default compress_statistics=True,
// quant_storage = the bf16 torch_dtype; AdamW); "This requires roughly 55GB of CPU RAM for model loading and FSDP CPU
// offloading". Its blog (answer.ai/posts/2024-03-06-fsdp-qlora): "a fully open source system that ... can train a
// 70b model on two 24GB GPUs". By hand (llama2-70b: hidden 8192, kv 1024, intermediate 28672, 80 blocks, vocabulary
// 32000):
//  - a block's 7 linear weights, 855,638,016 elements, pack into 427,819,008 B; their constants (Note [Quantisation
//    constants]): q and o 67,108,864 elements = 1,048,576 blocks of 64 → 1,048,576 B of 8-bit absmax + 4·4096 B
//    second-level absmax + 4 B offset + 1024 B dynamic map + 64 B NF4 levels = 1,066,052 B; k and v 131,072 + 2048 +
//    1092 = 134,212 B; gate, up, down 3,670,016 + 57,344 + 1092 = 3,728,452 B: 13,585,884 B a block, 1,086,870,720 B
//    for the model, on every rank whatever is offloaded.
//  - adapters r=64: q 64·16384, k and v 64·9216, gate, up and down 64·36864: 9,306,112 a block.
//  - pure bf16 on 2 ranks: a block's shard is 9,306,112 adapters + 16,384 norm weights + 213,909,504 packed bf16
//    elements, halved, x 2 B = 223,232,000 B; gathered 446,464,000 B. The root: 524,296,192 frozen elements.
//  - host memory per rank (offloaded): shards 80 x 223,232,000 + 524,296,192 B, bf16 gradients of 4,653,056 adapter
//    elements a block, AdamW's two bf16 states: 18,382,856,192 + 744,488,960 + 1,488,977,920 B.
//  - full recompute keeps each block's input: 8192 x 2 x 2048 tokens x 2 B = 67,108,864 B; the largest dequantised
//    weight (gate/up/down) is 234,881,024 x 2 B = 469,762,048 B while its GEMM runs.
// Mutation tried: sharding the quantisation constants with the parameters (adding their share to shard_bytes instead
// of keeping them whole on each rank's device) fails here: CHECK( 230024942 == 223232000 ) on the block's shard and
// CHECK( 0 == 1086870720 ) on the GPU's sharded_params under offload.
TEST_CASE("finetune: QLoRA of llama2-70b on 2 x RTX4090 with CPU offload, as answer.ai's fsdp_qlora runs it") {
  TrainingConfig training;
  training.seq_len = 2048;
  training.micro_batch = 2;
  training.precision = precision_recipe("pure-bf16");
  training.checkpointing = ActivationCheckpointing::full;
  FinetuneConfig& finetune = training.finetune;
  finetune.mode = FinetuneMode::qlora;
  finetune.lora.r = 64;
  finetune.lora.alpha = 16;
  finetune.lora.dropout = 0.1;
  finetune.lora.target_modules = {"k_proj", "q_proj", "v_proj", "up_proj", "down_proj", "gate_proj"};
  finetune.bnb.use_double_quant = true;
  finetune.bnb.quant_storage = DType::bf16;
  finetune.bnb.compute_dtype = DType::bf16;
  const Cluster cluster = parse_cluster("2xRTX4090", HardwareCatalog::builtin());
  const Setup s = setup("llama2-70b", training, 2, 2, true);

  const LayerFinetune& layer = s.model.layers[1].finetune.value();
  CHECK(layer.quantized_elements == 855'638'016);
  CHECK(layer.packed_bytes == 427'819'008);
  CHECK(layer.quant_constant_bytes == 13'585'884);
  CHECK(layer.adapter_elements == 9'306'112);
  CHECK(layer.frozen_elements == 16'384);
  CHECK(layer.largest_quantized_weight == 234'881'024);
  const UnitLayout& block = s.layouts[1];
  CHECK(block.shard_bytes == 223'232'000);
  CHECK(block.gathered_bytes == 446'464'000);
  CHECK(block.grad_shard_elements == 4'653'056);
  CHECK(s.layouts[0].shard_bytes == 524'296'192);

  const MemoryByCategory persistent = persistent_memory(s.layouts, s.plan, 0);
  CHECK(category(persistent, MemoryCategory::sharded_params) == 1'086'870'720);  // constants only: shards offloaded
  CHECK(category(persistent, MemoryCategory::sharded_grads) == 0);
  CHECK(category(persistent, MemoryCategory::optimizer_states) == 0);
  const HostMemoryUse host = host_memory_use(s.plan, s.model, cluster);
  CHECK(category(host.per_rank, MemoryCategory::sharded_params) == 18'382'856'192);
  CHECK(category(host.per_rank, MemoryCategory::sharded_grads) == 744'488'960);
  CHECK(category(host.per_rank, MemoryCategory::optimizer_states) == 1'488'977'920);
  CHECK(kept_activation_bytes(s.model, s.plan.training, 1, ActivationCheckpointing::full) == 67'108'864);
  CHECK(dequantized_weight_bytes(s.plan, s.model, 1) == 469'762'048);
  for (const Op* op : ops_of(s.schedule, OpKind::all_gather)) {
    CHECK(op->bytes == (op->unit == 0 ? 1'048'592'384 : 446'464'000));  // the packed storage is what moves
  }

  // The simulated step on the catalog's RTX 4090 (its context overhead included): does it fit 24 GB?
  const HardwareProfile profile = profile_from_cluster(cluster);
  const StepSchedule schedule = lower_plan(s.plan, s.model, {2, 2, profile.context_overhead_bytes});
  const SimulationSummary summary = simulate(schedule, profile, false).summary;
  const double gib = 1024.0 * 1024.0 * 1024.0;
  MESSAGE("llama2-70b QLoRA on 2 x RTX4090 (CPU offload, batch 2 x 2048, full AC): peak "
          << static_cast<double>(summary.peak_memory_bytes) / gib << " GiB of "
          << static_cast<double>(cluster.gpu.memory_bytes) / gib << " GiB at " << summary.peak_op << "; host "
          << static_cast<double>(host.per_node_bytes) / gib << " GiB per node; step " << summary.step_time_s << " s");
  CHECK(summary.peak_memory_bytes <= cluster.gpu.memory_bytes);  // it fits, as answer.ai states
}

// tiny-llama (vocabulary 256, hidden 128, intermediate 352, kv 64, 4 blocks) with its embedding frozen, on 2 ranks
// under bf16-mixed. The root unit holds embed_tokens (256 x 128 = 32,768, frozen), the final norm (128) and lm_head
// (32,768): 32,896 trainable. FSDP2: the trainable part in fp32 (32,896/2 x 4 B) and the frozen in bf16 (32,768/2 x
// 2 B) = 98,560 B a rank; gradients and optimizer states for 16,448 elements; a reduce-scatter of 32,896 x 2 B.
// FSDP1 (use_orig_params=True): one fp32 FlatParameter of 65,664 (32,832 x 4 B = 131,328 B a rank) whose gradient
// covers all of it (Note [Frozen parameters in FSDP]): 32,832 gradient elements, a reduce-scatter of 65,664 x 2 B;
// optimizer states still only for the 16,448 trainable.
// Mutation tried: FSDP1 giving a mixed unit gradients for its trainable part only (grad_elements = trainable) fails
// here: CHECK( 16448 == 32832 ) on the FSDP1 root's gradient shard, CHECK( 65792 == 131328 ) on its reduce-scatter.
TEST_CASE("finetune: frozen embeddings have no gradients or optimizer states; FSDP1 grads a mixed unit whole") {
  TrainingConfig training;
  training.seq_len = 128;
  training.finetune.mode = FinetuneMode::frozen;
  training.finetune.freeze = {"model.embed_tokens*"};
  const Setup fsdp2 = setup("tiny-llama", training, 2, 2);
  const UnitLayout& root = fsdp2.layouts[0];
  CHECK(root.shard_bytes == 98'560);
  CHECK(root.grad_shard_elements == 16'448);
  CHECK(root.optimizer_shard_elements == 16'448);
  const auto scatters = ops_of(fsdp2.schedule, OpKind::reduce_scatter);
  REQUIRE(scatters.size() == 5);
  CHECK(scatters.back()->unit == 0);
  CHECK(scatters.back()->bytes == 32'896 * 2);
  CHECK(fsdp2.layouts[1].grad_elements == 184'576);  // a block trains whole
  CHECK_FALSE(fsdp2.model.layers[0].finetune->backward_needed);
  CHECK(fsdp2.model.layers[1].finetune->backward_needed);

  training.finetune.fsdp.version = 1;
  const Setup fsdp1 = setup("tiny-llama", training, 2, 2);
  CHECK(fsdp1.layouts[0].shard_bytes == 131'328);
  CHECK(fsdp1.layouts[0].grad_shard_elements == 32'832);
  CHECK(fsdp1.layouts[0].optimizer_shard_elements == 16'448);
  CHECK(ops_of(fsdp1.schedule, OpKind::reduce_scatter).back()->bytes == 65'664 * 2);

  // Freezing the first two blocks too: no reduce-scatter for them, and no backward before block 2.
  training.finetune.fsdp = {};
  training.finetune.freeze = {"model.embed_tokens*", "model.layers.[01].*"};
  const Setup prefix = setup("tiny-llama", training, 2, 2);
  CHECK(ops_of(prefix.schedule, OpKind::reduce_scatter).size() == 3);
  for (const Op* op : ops_of(prefix.schedule, OpKind::backward)) {
    if (op->layer <= 2) CHECK(op->flops == 0);  // embedding and blocks 0, 1: autograd records nothing there
  }
  CHECK(kept_activation_bytes(prefix.model, prefix.plan.training, 2, ActivationCheckpointing::none) == 0);
}

// bitsandbytes quantize_4bit (blocksize 64) and the QLoRA paper's §2: 32/64 = 0.5 bits of constants per parameter,
// 8/64 + 32/(64·256) = 0.127 bits with double quantisation, plus each tensor's code books.
TEST_CASE("finetune: quantisation constants as bitsandbytes keeps them") {
  CHECK(quantization_constant_bytes(67'108'864, false) == 4 * 1'048'576 + 64);
  CHECK(quantization_constant_bytes(67'108'864, true) == 1'048'576 + 4 * 4096 + 4 + 1024 + 64);
  CHECK(quantization_constant_bytes(100, false) == 4 * 2 + 64);  // a partial last block still has its absmax
  const double bits = 8.0 * static_cast<double>(quantization_constant_bytes(1LL << 30, true)) / (1LL << 30);
  CHECK(bits == doctest::Approx(8.0 / 64 + 32.0 / (64 * 256)).epsilon(1e-4));
  CHECK(packed_4bit_bytes(7) == 4);
}

TEST_CASE("finetune: bad trainable sets are refused in one line naming the setting") {
  const ModelSpec model = preset_model("llama3-8b");
  const auto refuse = [&](const FinetuneConfig& config, const std::string& part) {
    bool threw = false;
    try {
      validate_finetune(config, precision_recipe("bf16-mixed"), FinetuneFieldNames::cli());
      (void)finetuned_model(model, config, FinetuneFieldNames::cli());
    } catch (const InputError& error) {
      threw = true;
      CHECK_MESSAGE(std::string(error.what()).find(part) != std::string::npos, error.what());
    }
    CHECK_MESSAGE(threw, part);
  };
  FinetuneConfig lora;
  lora.mode = FinetuneMode::lora;
  lora.lora.target_modules = {"qkv_proj"};
  refuse(lora, "--lora-target-modules 'qkv_proj': llama3-8b has no such module");
  lora.lora.target_modules = {};
  lora.lora.r = 0;
  refuse(lora, "--lora-r 0: expected a rank from 1");
  FinetuneConfig frozen;
  frozen.mode = FinetuneMode::frozen;
  frozen.freeze = {"model.embed*.bias"};
  refuse(frozen, "--freeze 'model.embed*.bias': matches no parameter of llama3-8b");
  FinetuneConfig qlora;
  qlora.mode = FinetuneMode::qlora;
  qlora.fsdp.version = 1;
  qlora.bnb.quant_storage = DType::fp32;
  refuse(qlora, "--bnb-4bit-quant-storage fp32: expected bf16");
  qlora.bnb.quant_storage = DType::bf16;
  refuse(qlora, "--fsdp-version 1 with QLoRA: FSDP1 flattens");  // bf16-mixed stores parameters in fp32
}

// Note [Uniform requires_grad]: FSDP1 without use_orig_params cannot wrap LoRA's blocks, and its search keeps frozen
// and trainable blocks in separate units (test_wrap_dp's "frozen-fsdp1" case checks it is still the fastest).
// Mutation tried: a wrap search that lets any blocks share a unit (no may_share_unit in for_each_left_neighbour)
// fails here: "test case THREW exception: plan: unit 1 ('-') mixes frozen and trainable parameters, ...".
TEST_CASE("finetune: FSDP1 with use_orig_params=False refuses LoRA and keeps frozen blocks apart") {
  const Cluster cluster = parse_cluster("8xA100-80GB", HardwareCatalog::builtin());
  const HardwareProfile profile = profile_from_cluster(cluster);
  TrainingConfig training;
  training.seq_len = 2048;
  training.finetune.mode = FinetuneMode::lora;
  training.finetune.fsdp = {1, false};
  const ModelSpec lora = finetuned_model(preset_model("llama3-8b"), training.finetune, FinetuneFieldNames::cli());
  SearchOptions options;
  options.with_baselines = false;
  CHECK_THROWS_WITH_AS(search_plans(lora, cluster, profile, training, options),
                       doctest::Contains("FlatParameter requires uniform requires_grad"), InputError);

  training.finetune.mode = FinetuneMode::frozen;
  training.finetune.freeze = {"model.layers.[0-4].*"};
  const ModelSpec frozen = finetuned_model(preset_model("llama3-8b"), training.finetune, FinetuneFieldNames::cli());
  const SearchResult result = search_plans(frozen, cluster, profile, training, options);
  REQUIRE(result.feasible);
  for (const PlanUnit& unit : result.best.plan.units) {
    if (unit.is_root) continue;
    // blocks 0-4 are layers 1-5: a unit is on one side of layer 6
    CHECK((unit.layers.end <= 6 || unit.layers.begin >= 6));
  }
}

// Note [Frozen parameters in FSDP] (unit_layout.h): FSDP2 pads a fine-tuned unit per dtype group. tiny-llama under
// LoRA r=8 on q_proj and v_proj (PEFT's default for Llama): a block keeps its 184,576 base weights frozen and trains
// 8·(128 + 128) + 8·(128 + 64) = 3,584 adapter elements. On 3 ranks FSDP2 pads 3,584 → 3,585 and 184,576 → 184,578:
// 188,163 elements held, 3 of them padding. estimate's per-unit padded_params used a second rule (the base weights
// padded as one: 184,578, adapters left out) that disagreed with its own padding_elements; it now reports the
// lowering's sizes, so the units add up to it. FSDP1 flattens all 188,160 into one FlatParameter, a multiple of 3.
TEST_CASE("finetune: estimate's per-unit padding is the lowering's: FSDP2 pads a LoRA block per dtype group") {
  const HardwareCatalog catalog = HardwareCatalog::builtin();
  for (const int fsdp_version : {2, 1}) {
    CAPTURE(fsdp_version);
    EstimateRequest request;
    request.training.seq_len = 128;
    request.training.finetune.mode = FinetuneMode::lora;
    request.training.finetune.lora.r = 8;
    request.training.finetune.lora.target_modules = {"q_proj", "v_proj"};
    request.training.finetune.fsdp.version = fsdp_version;
    request.model = finetuned_model(preset_model("tiny-llama"), request.training.finetune, FinetuneFieldNames::cli());
    request.cluster = parse_cluster("3xH100-80GB", catalog);
    request.profile = profile_from_cluster(request.cluster);
    request.wrapping = wrap_per_block(request.model);
    const EstimateResult result = run_estimate(request);
    const nlohmann::json units = to_json(result)["units"];
    REQUIRE(units.size() == 5);
    const std::int64_t held_padding = fsdp_version == 2 ? 3 : 0;
    for (std::size_t id = 1; id < units.size(); ++id) {
      CHECK(units[id]["params"] == 184'576);
      CHECK(units[id]["padded_params"] == 184'576 + 3'584 + held_padding);
      CHECK(units[id]["padded_params"] == result.layouts[id].padded_elements);
    }
    CHECK(units[0]["padded_params"] == 65'664);  // the root: frozen embedding, norm and head, a multiple of 3
    CHECK(result.memory.breakdown.padding_elements == 4 * held_padding);
  }
}
