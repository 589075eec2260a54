// Tests of tensor parallelism: activation memory and communication per block against Korthikanti et al. 2022, one
// TP rank's parameters, and 2-D plans lowered, simulated and searched.
#include <doctest/doctest.h>

#include <cmath>

#include "cluster.h"
#include "collective_cost.h"
#include "decoder_builder.h"
#include "errors.h"
#include "hardware_catalog.h"
#include "hardware_profile.h"
#include "lowering.h"
#include "model_presets.h"
#include "pass_kernels.h"
#include "search.h"
#include "simulator.h"
#include "tensor_parallel.h"
#include "tensor_parallel_view.h"

using namespace shardplan;

namespace {

// Korthikanti et al. 2022's GPT: LayerNorm, fused QKV, GeLU MLP with f = 4h, dropout after attention and MLP and on
// the attention probabilities — the model their Table 2 counts.
ModelSpec korthikanti_gpt(std::int64_t h, std::int64_t heads) {
  DecoderArchitecture arch;
  arch.family = DecoderArchitecture::Family::gpt2;
  arch.vocab_size = 1024;
  arch.hidden_size = h;
  arch.intermediate_size = 4 * h;
  arch.num_layers = 2;
  arch.num_heads = heads;
  arch.num_kv_heads = heads;
  arch.max_position_embeddings = 4096;
  arch.dropout = 0.1;
  return build_decoder("korthikanti-gpt", arch, "test");
}

const LayerSpec& first_block(const ModelSpec& model) {
  for (const LayerSpec& layer : model.layers) {
    if (layer.kind == LayerKind::transformer_block) return layer;
  }
  throw InternalError("no block");
}

TensorParallelStyle style(int degree, bool sequence_parallel, bool keeps_gathered_inputs) {
  TensorParallelStyle result;
  result.degree = degree;
  result.sequence_parallel = sequence_parallel;
  result.keeps_gathered_inputs = keeps_gathered_inputs;
  return result;
}

}  // namespace

// Korthikanti et al. 2022, Table 2 ("activations memory per transformer layer"), 16-bit activations, no flash:
// no parallelism sbh(34 + 5as/h); tensor parallel sbh(10 + 24/t + 5as/(ht)); tensor + sequence parallel
// sbh(34/t + 5as/(ht)). PyTorch's DTensor keeps the two gathered column-parallel inputs whole: 4sbh(1 - 1/t) more.
TEST_CASE("tensor parallel: activation memory per block matches Korthikanti et al. 2022 Table 2") {
  const std::int64_t h = 1024, a = 16, s = 2048, b = 2;
  const ModelSpec model = korthikanti_gpt(h, a);
  const double sbh = static_cast<double>(s * b * h);
  const auto per_layer = [&](const ModelSpec& shard) {
    return first_block(shard).activation_bytes_per_token(s, 2, false, ActivationCheckpointing::none) *
           static_cast<double>(s * b);
  };
  const double scores = 5.0 * a * s / static_cast<double>(h);
  CHECK(per_layer(model) == doctest::Approx(sbh * (34 + scores)));
  for (int t : {2, 4, 8}) {
    CAPTURE(t);
    CHECK(per_layer(tensor_parallel_shard(model, style(t, false, true))) ==
          doctest::Approx(sbh * (10 + 24.0 / t + scores / t)));
    CHECK(per_layer(tensor_parallel_shard(model, style(t, true, false))) ==
          doctest::Approx(sbh * (34.0 / t + scores / t)));
    CHECK(per_layer(tensor_parallel_shard(model, style(t, true, true))) ==
          doctest::Approx(sbh * (34.0 / t + scores / t + 4.0 * (1 - 1.0 / t))));
    // Full recompute keeps the block input: 2sbh, on the sequence shard with sequence parallelism (Table 2: 2sbh/t).
    CHECK(first_block(tensor_parallel_shard(model, style(t, true, true)))
                  .activation_bytes_per_token(s, 2, false, ActivationCheckpointing::full) *
              static_cast<double>(s * b) ==
          doctest::Approx(2 * sbh / t));
  }
}

// Korthikanti §4.2.2: tensor parallelism runs 2 all-reduces in forward and 2 in backward per block; sequence
// parallelism replaces each with an all-gather and a reduce-scatter "with the same communication bandwidth". In
// nccl-tests' convention each moves bus_factor(t) × S per rank, S = sbh × 2 bytes.
TEST_CASE("tensor parallel: per-block communication volume matches Korthikanti et al. 2022") {
  const std::int64_t h = 1024, s = 2048, b = 2;
  const ModelSpec model = korthikanti_gpt(h, 16);
  TrainingConfig training;
  training.seq_len = s;
  training.micro_batch = b;
  training.flash_attention = false;
  const std::int64_t activation_bytes = s * b * h * 2;
  const auto bus_bytes = [](const PassKernels& kernels) {
    double total = 0;
    for (const auto& call : kernels.collectives) {
      const CollectiveKind kind = call.kind == ActivationCollective::all_gather       ? CollectiveKind::all_gather
                                  : call.kind == ActivationCollective::reduce_scatter ? CollectiveKind::reduce_scatter
                                                                                      : CollectiveKind::all_reduce;
      total += collective_algorithm(kind).bus_factor(call.ranks) * static_cast<double>(call.bytes);
    }
    return total;
  };
  std::size_t block = 0;
  while (model.layers[block].kind != LayerKind::transformer_block) ++block;
  for (int t : {2, 4, 8}) {
    CAPTURE(t);
    const ModelSpec tp = tensor_parallel_shard(model, style(t, false, true));
    const ModelSpec sp = tensor_parallel_shard(model, style(t, true, true));
    const PassKernels tp_forward = pass_kernels(tp, block, training, ComputePass::forward, ActivationCheckpointing::none);
    const PassKernels sp_forward = pass_kernels(sp, block, training, ComputePass::forward, ActivationCheckpointing::none);
    PassKernels sp_backward = pass_kernels(sp, block, training, ComputePass::backward, ActivationCheckpointing::none);
    REQUIRE(tp_forward.collectives.size() == 2);
    REQUIRE(sp_forward.collectives.size() == 4);
    // After the 4 activation collectives, one all-reduce per tensor left whole on the sequence-sharded block (Note
    // [Sequence-parallel parameter gradients]): GPT-2's ln_1 and ln_2 weights and biases and the two row-parallel
    // c_proj biases, 2 bytes per element each.
    std::vector<std::int64_t> whole_tensor_bytes;
    for (const TensorSpec& tensor : sp.layers[block].tensors) {
      const bool norm = tensor.name.find("ln_") != std::string::npos;
      const bool row_bias = tensor.name.find("c_proj.bias") != std::string::npos;
      if (norm || row_bias) whole_tensor_bytes.push_back(tensor.element_count() * 2);
    }
    REQUIRE(whole_tensor_bytes.size() == 6);
    REQUIRE(sp_backward.collectives.size() == 4 + whole_tensor_bytes.size());
    for (std::size_t i = 0; i < whole_tensor_bytes.size(); ++i) {
      CHECK(sp_backward.collectives[4 + i].kind == ActivationCollective::all_reduce);
      CHECK(sp_backward.collectives[4 + i].bytes == whole_tensor_bytes[i]);
    }
    sp_backward.collectives.resize(4);  // Korthikanti's volume is the activations'
    for (const auto& call : sp_forward.collectives) {
      CHECK(call.bytes == activation_bytes);
      CHECK(call.ranks == t);
    }
    const double all_reduce_bus = 2.0 * (t - 1.0) / t * static_cast<double>(activation_bytes);
    CHECK(bus_bytes(tp_forward) == doctest::Approx(2 * all_reduce_bus));
    CHECK(bus_bytes(sp_forward) == doctest::Approx(bus_bytes(tp_forward)));
    CHECK(bus_bytes(sp_backward) == doctest::Approx(bus_bytes(tp_forward)));
    // Full recompute reruns the forward's collectives; torchtitan's selective-op policy saves the reduce-scatters.
    CHECK(pass_kernels(sp, block, training, ComputePass::recompute, ActivationCheckpointing::full).collectives.size() ==
          4);
    CHECK(pass_kernels(sp, block, training, ComputePass::recompute, ActivationCheckpointing::selective_op)
              .collectives.size() == 2);
    // GEMM FLOPs per rank divided by t (column and row splits), attention on heads / t.
    const PassKernels whole = pass_kernels(model, block, training, ComputePass::forward, ActivationCheckpointing::none);
    CHECK(sp_forward.gemm_flops() == doctest::Approx(whole.gemm_flops() / t));
  }
}

TEST_CASE("tensor parallel: one TP rank holds 1/t of every projection, embedding and head, the norms whole") {
  const ModelSpec model = preset_model("llama3-8b");
  const ModelSpec shard = tensor_parallel_shard(model, pytorch_tensor_parallel(8));
  std::int64_t norms = 0;
  for (const LayerSpec& layer : model.layers) {
    for (const TensorSpec& tensor : layer.tensors) {
      if (tensor.shape.size() == 1) norms += tensor.element_count();
    }
  }
  CHECK(shard.param_count() == (model.param_count() - norms) / 8 + norms);
  CHECK(first_block(shard).kernels->attention->heads == 4);  // 32 heads / 8
  CHECK(shard.forward_flops_per_token(8192, true) == doctest::Approx(model.forward_flops_per_token(8192, true) / 8));
}

// Note [Loss-parallel workspaces]: loss.py's decomposed log_softmax holds 2 fp32 tensors of V/t logits per token
// beside its kept output, its fused nll/log_softmax backward 3; the single-GPU head's fused kernels 1 and 2 of V.
TEST_CASE("tensor parallel: loss parallel's workspaces are its decomposed cross-entropy's") {
  const ModelSpec model = preset_model("llama3-8b");
  const ModelSpec shard = tensor_parallel_shard(model, pytorch_tensor_parallel(8));
  const LayerSpec& whole_head = model.layers.back();
  const LayerSpec& head = shard.layers.back();
  REQUIRE(head.kind == LayerKind::lm_head);
  const double vocab = 128256;
  CHECK(whole_head.activations.forward_workspace_fp32_per_token == vocab);
  CHECK(whole_head.activations.backward_workspace_fp32_per_token == 2 * vocab);
  CHECK(head.activations.forward_workspace_fp32_per_token == 2 * vocab / 8);
  CHECK(head.activations.backward_workspace_fp32_per_token == 3 * vocab / 8);
  CHECK(head.backward_workspace_bytes_per_token(2) == 4.0 * 3 * vocab / 8);
}

TEST_CASE("tensor parallel: a 2-D plan lowers to FSDP over world / t ranks with TP collectives in its passes") {
  const ModelSpec model = preset_model("llama3-8b");
  const Cluster cluster = parse_cluster("2x8xH100-80GB", HardwareCatalog::builtin());
  const HardwareProfile profile = profile_from_cluster(cluster);
  TrainingConfig training;
  training.seq_len = 8192;
  training.checkpointing = ActivationCheckpointing::full;
  Plan plan = default_plan(model, training, {}, wrap_per_block(model), cluster.world_size());
  const LoweringOptions options{cluster.world_size(), cluster.gpus_per_node, 0};
  const StepSchedule fsdp = lower_plan(plan, model, options);
  plan.tensor_parallel_degree = 4;
  const StepSchedule two_d = lower_plan(plan, model, options);
  CHECK(two_d.world_size == 4);
  CHECK(two_d.gpus_per_node == 2);
  CHECK(two_d.parallel.tp() == 4);
  CHECK(two_d.parallel.dp_shard() == 4);
  CHECK(two_d.tokens_per_step * 4 == fsdp.tokens_per_step);  // 4 data-parallel ranks share the tokens of a TP group
  // Each TP rank runs a quarter of the model on its data-parallel rank's micro-batch.
  CHECK(two_d.model_flops_per_rank == doctest::Approx(fsdp.model_flops_per_rank / 4).epsilon(0.01));
  std::size_t tp_collectives = 0;
  for (const Op& op : two_d.ops) {
    if (op.kernels) tp_collectives += op.kernels->collectives.size();
  }
  // 32 blocks x (4 forward + 4 recompute + 4 backward + 2 norm-gradient all-reduces) + embedding (1 + 1) + final
  // norm (its gradient's all-reduce) + head (forward: its input's all-gather and loss parallel's 3 all-reduces;
  // backward: 1).
  CHECK(tp_collectives == 32 * 14 + 2 + 1 + 5);
  const SimulationSummary fsdp_summary = simulate(fsdp, profile, false).summary;
  const SimulationSummary two_d_summary = simulate(two_d, profile, false).summary;
  CHECK(two_d_summary.peak_memory_bytes < fsdp_summary.peak_memory_bytes);
  CHECK(two_d_summary.mfu > 0);
  CHECK(two_d_summary.mfu < fsdp_summary.mfu);  // TP's collectives are on the critical path of an 8B model

  plan.tensor_parallel_degree = 16;
  CHECK_THROWS_AS(lower_plan(plan, model, options), InputError);
}

TEST_CASE("tensor parallel: the search tries the degrees it is given and says which it planned") {
  const ModelSpec model = preset_model("llama3-70b");
  const Cluster cluster = parse_cluster("2x8xH100-80GB", HardwareCatalog::builtin());
  const HardwareProfile profile = profile_from_cluster(cluster);
  TrainingConfig training;
  training.seq_len = 8192;
  training.global_batch = 16;
  SearchOptions options;
  options.with_baselines = false;
  options.tensor_parallel_degrees = {1, 8};
  const SearchResult result = search_plans(model, cluster, profile, training, options);
  REQUIRE(result.feasible);
  const int degree = result.best.plan.tensor_parallel_degree;
  CHECK((degree == 1 || degree == 8));
  CHECK((degree == 1) == (result.best.knobs.find("TP ") == std::string::npos));
  // The planned plan re-simulates to the same step on the whole cluster.
  const LoweringOptions lowering{cluster.world_size(), cluster.gpus_per_node, profile.context_overhead_bytes};
  const SimulationSummary again = simulate(lower_plan(result.best.plan, model, lowering), profile, false).summary;
  CHECK(again.step_time_s == doctest::Approx(result.best.summary.step_time_s));
}
