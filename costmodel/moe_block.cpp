// The MoE MLP of a decoder block, counted from the Hugging Face modules' forward code (Mixtral, Qwen2-MoE, Qwen3-MoE).
#include "moe_block.h"

#include <algorithm>
#include <cmath>

#include "block_kernels.h"
#include "errors.h"

namespace shardplan {
namespace {

struct MoeNames {
  std::string block;     // "block_sparse_moe" / "mlp"
  std::string gate, up, down;
  std::string shared;    // Qwen2MoeSparseMoeBlock.shared_expert; DeepseekV2MoE.shared_experts
};

MoeNames names_of(MoeNaming naming) {
  if (naming == MoeNaming::mixtral) return {"block_sparse_moe", "w1", "w3", "w2", "shared_expert"};
  if (naming == MoeNaming::deepseek) return {"mlp", "gate_proj", "up_proj", "down_proj", "shared_experts"};
  if (naming == MoeNaming::granite) return {"block_sparse_moe", "input_linear", "input_linear", "output_linear", ""};
  if (naming == MoeNaming::gpt_oss) return {"mlp", "gate_up_proj", "gate_up_proj", "down_proj", ""};
  return {"mlp", "gate_proj", "up_proj", "down_proj", "shared_expert"};
}

bool is_dense_mlp_projection(const ProjectionSpec& projection) {
  return projection.name == "gate_proj" || projection.name == "up_proj" || projection.name == "down_proj";
}

// Largest products the parameter count of MoE blocks may reach: Note [Input limits] keeps counts far inside 64 bits.
constexpr double kMaxModelElements = 1e17;

}  // namespace

void check_moe_architecture(const DecoderArchitecture& arch, const std::string& origin) {
  if (!arch.moe) return;
  const MoeArchitecture& moe = *arch.moe;
  const auto fail = [&](const char* field, const std::string& expected) {
    throw InputError(origin + ": field '" + field + "': expected " + expected);
  };
  if (moe.num_experts < 1 || moe.num_experts > 65536) fail("num_experts", "an expert count in 1..65536");
  if (moe.experts_per_token < 1 || moe.experts_per_token > moe.num_experts) {
    fail("num_experts_per_tok", "a top-k in 1..num_experts (" + std::to_string(moe.num_experts) + ")");
  }
  if (moe.expert_intermediate_size < 1 || moe.expert_intermediate_size > 10'000'000) {
    fail("moe_intermediate_size", "a positive integer at most 10000000");
  }
  if (moe.shared_intermediate_size < 0 || moe.shared_intermediate_size > 10'000'000) {
    fail("shared_expert_intermediate_size", "a non-negative integer at most 10000000");
  }
  if (moe.sparse_step < 1) fail("decoder_sparse_step", "a positive integer");
  if (moe.first_dense_layers < 0) fail("first_k_dense_replace", "a non-negative integer");
  if (!(moe.capacity_factor >= 1.0 && moe.capacity_factor <= 64.0)) fail("capacity_factor", "a factor in 1..64");
  const double elements = static_cast<double>(arch.num_layers) * static_cast<double>(moe.num_experts) * 3.0 *
                          static_cast<double>(arch.hidden_size) * static_cast<double>(moe.expert_intermediate_size);
  if (elements > kMaxModelElements) fail("num_experts", "a model below 1e17 parameters");
}

// HF MixtralSparseMoeBlock.forward (transformers/models/mixtral/modeling_mixtral.py) and Qwen2MoeSparseMoeBlock /
// Qwen3MoeSparseMoeBlock: router_logits = gate(x); routing_weights = softmax(router_logits, dtype=float32); top-k
// (Qwen3-MoE and Mixtral renormalise them); then per expert: top_x = where(expert_mask[e]); current_state =
// x[top_x] (index_select); expert(current_state) * routing_weights[top_x] (SwiGLU: w2(silu(w1 x) * w3 x)); index_add_
// into the output. Qwen2-MoE adds shared_expert(x) * sigmoid(shared_expert_gate(x)). DeepseekV2MoE / DeepseekV3MoE
// (transformers/models/deepseek_v2, deepseek_v3) run the same loop and add shared_experts(x) ungated (a SwiGLU of
// n_shared_experts × moe_intermediate_size); V3 scores with a sigmoid instead of the softmax, the same traffic.
void replace_mlp_with_moe(const DecoderArchitecture& arch, LayerSpec& block) {
  const MoeArchitecture& moe = *arch.moe;
  const MoeNames names = names_of(moe.naming);
  const std::int64_t h = arch.hidden_size, f_dense = arch.intermediate_size, fe = moe.expert_intermediate_size,
                     fs = moe.shared_intermediate_size, experts = moe.num_experts;
  const double hd = static_cast<double>(h), fed = static_cast<double>(fe), fsd = static_cast<double>(fs);
  const double slots = moe.slots_per_token();  // Note [Capacity factor]
  const double top_k = static_cast<double>(moe.experts_per_token);
  const std::string prefix = names.block + ".";

  // Tensors: the dense MLP's go; the router, every expert and the shared expert come in module order.
  auto& tensors = block.tensors;
  tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                               [](const TensorSpec& tensor) { return tensor.name.starts_with("mlp."); }),
                tensors.end());
  // GraniteMoeMoE: router.layer, two stacked parameters; GptOssMLP: a biased router, two stacked parameters and
  // their biases.
  const bool gpt_oss = moe.naming == MoeNaming::gpt_oss;
  const bool stacked = moe.naming == MoeNaming::granite || gpt_oss;
  const std::string router = prefix + (gpt_oss ? "router" : stacked ? "router.layer" : "gate");
  tensors.push_back({router + ".weight", {experts, h}});
  if (gpt_oss) tensors.push_back({router + ".bias", {experts}});
  if (moe.router_correction_bias) tensors.push_back({prefix + "gate.e_score_correction_bias", {experts}});
  std::int64_t routed_elements = 0;
  if (gpt_oss) {
    tensors.push_back({prefix + "experts.gate_up_proj", {experts, h, 2 * fe}});
    tensors.push_back({prefix + "experts.gate_up_proj_bias", {experts, 2 * fe}});
    tensors.push_back({prefix + "experts.down_proj", {experts, fe, h}});
    tensors.push_back({prefix + "experts.down_proj_bias", {experts, h}});
    routed_elements = (3 * fe * h + 2 * fe + h) * experts;
  } else if (stacked) {
    tensors.push_back({prefix + "input_linear.weight", {experts, 2 * fe, h}});
    tensors.push_back({prefix + "output_linear.weight", {experts, h, fe}});
    routed_elements = 3 * fe * h * experts;
  }
  for (std::int64_t expert = 0; expert < (stacked ? 0 : experts); ++expert) {
    const std::string path = prefix + "experts." + std::to_string(expert) + ".";
    tensors.push_back({path + names.gate + ".weight", {fe, h}});
    tensors.push_back({path + names.down + ".weight", {h, fe}});
    tensors.push_back({path + names.up + ".weight", {fe, h}});
    routed_elements += 3 * fe * h;
  }
  if (fs > 0) {
    tensors.push_back({prefix + names.shared + ".gate_proj.weight", {fs, h}});
    tensors.push_back({prefix + names.shared + ".up_proj.weight", {fs, h}});
    tensors.push_back({prefix + names.shared + ".down_proj.weight", {h, fs}});
  }
  if (moe.shared_expert_gate) tensors.push_back({prefix + "shared_expert_gate.weight", {1, h}});

  // Model FLOPs: top-k experts per token (the capacity's padding is hardware work, not model work); the router; the
  // shared expert. 2 FLOPs per multiply-add, as the dense block counts its matmuls.
  const double dense_mlp_flops = 2.0 * 3.0 * hd * static_cast<double>(f_dense);
  block.flops.matmul_flops_per_token += -dense_mlp_flops + 2.0 * hd * static_cast<double>(experts) +
                                        top_k * 2.0 * 3.0 * hd * fed + 2.0 * 3.0 * hd * fsd +
                                        (moe.shared_expert_gate ? 2.0 * hd : 0.0);

  // Kept for backward, per token, as autograd keeps it in the loop above: the router's logits and fp32 softmax
  // (counted as two activation-dtype tensors of `experts`); per routed slot, the gathered input (h), w1's and w3's
  // outputs, SiLU's output and the product feeding w2 (4·fe), and w2's output for the routing-weight multiply (h);
  // the shared expert's 4·fs and its output (h) for the gate's multiply. The dense MLP's 4·f (gate, SiLU, up and
  // down_proj's input) go; its norm input and the normed input (shared by router and experts) stay.
  auto& kept = block.activations;
  kept.elements_per_token += -4.0 * static_cast<double>(f_dense) + 2.0 * static_cast<double>(experts) +
                             slots * (2.0 * hd + 4.0 * fed) + (fs > 0 ? 4.0 * fsd + hd : 0.0);

  // Kernels: the router GEMM, the experts' GEMMs as one GEMM per projection over every routed slot (Note [Expert
  // GEMMs]), the shared expert's; memory-bound work per expert (HF's loop launches each kernel once per expert).
  // Note [Expert GEMMs]: an expert's GEMM has tokens·top_k/experts rows; shardplan times the experts of a projection
  // as one GEMM of tokens rows and slots × width columns — the same FLOPs and outputs, at a dense GEMM's efficiency,
  // which a grouped GEMM (torchtitan, MegaBlocks) approaches and HF's per-expert loop falls short of for many experts.
  LayerKernelSpec& spec = *block.kernels;
  spec.projections.erase(std::remove_if(spec.projections.begin(), spec.projections.end(), is_dense_mlp_projection),
                         spec.projections.end());
  const auto slot_width = [&](std::int64_t width) {
    return static_cast<std::int64_t>(std::llround(slots * static_cast<double>(width)));
  };
  // Forward order router, w1, w3, w2 (then the shared expert): torchtitan's policy saves every other matmul's output.
  spec.projections.push_back({router, h, experts, true});
  if (stacked) {  // GraniteMoeParallelExperts, GptOssExperts: one GEMM per expert for gate and up together
    spec.projections.push_back({prefix + (gpt_oss ? "experts.gate_up_proj" : "input_linear"), h, slot_width(2 * fe),
                                false});
    spec.projections.push_back({prefix + (gpt_oss ? "experts.down_proj" : "output_linear"), fe, slot_width(h), true});
  } else {
    spec.projections.push_back({prefix + "experts." + names.gate, h, slot_width(fe), false});
    spec.projections.push_back({prefix + "experts." + names.up, h, slot_width(fe), true});
    spec.projections.push_back({prefix + "experts." + names.down, fe, slot_width(h), false});
  }
  if (fs > 0) {
    spec.projections.push_back({prefix + names.shared + ".gate_proj", h, fs, true});
    spec.projections.push_back({prefix + names.shared + ".up_proj", h, fs, false});
    spec.projections.push_back({prefix + names.shared + ".down_proj", fs, h, true});
  }
  if (moe.shared_expert_gate) spec.projections.push_back({prefix + "shared_expert_gate", h, 1, false});
  const int per_expert = static_cast<int>(std::min<std::int64_t>(experts, 1 << 20));
  auto swiglu = std::find_if(spec.elementwise.begin(), spec.elementwise.end(),
                             [](const ElementwiseSpec& op) { return op.name == "silu * up"; });
  const double ed = static_cast<double>(experts);
  ElementwiseSpec routed_swiglu = elementwise_kernel("experts: silu * up", 5.0 * slots * fed, 0.0, 2 * per_expert);
  routed_swiglu.backward = {9.0 * slots * fed, 0.0, 0.0, 3 * per_expert};
  std::vector<ElementwiseSpec> moe_ops = {
      // softmax(dtype=float) reads E and writes E fp32; topk and the renormalisation read it again.
      elementwise_kernel("router softmax + top-k", ed, 3.0 * ed, 4),
      // where(expert_mask[e]) and x[top_x]: read and write h per routed slot.
      elementwise_kernel("expert dispatch (index_select)", 2.0 * slots * hd, 0.0, 2 * per_expert),
      routed_swiglu,
      // expert output * routing weight: read h, write h per slot; index_add_ reads it and the output row, writes it.
      elementwise_kernel("routing-weight multiply", 2.0 * slots * hd, 0.0, per_expert),
      elementwise_kernel("expert combine (index_add)", 3.0 * slots * hd, 0.0, per_expert)};
  if (fs > 0) {
    ElementwiseSpec shared_swiglu = elementwise_kernel("shared expert: silu * up", 5.0 * fsd, 0.0, 2);
    shared_swiglu.backward = {9.0 * fsd, 0.0, 0.0, 3};
    moe_ops.push_back(shared_swiglu);
    // sigmoid(gate) * shared output, added to the routed output.
    if (moe.shared_expert_gate) moe_ops.push_back(elementwise_kernel("shared expert gate", 3.0 * hd, 0.0, 2));
    moe_ops.push_back(elementwise_kernel("shared + routed add", 3.0 * hd, 0.0, 1));
  }
  SHARDPLAN_CHECK(swiglu != spec.elementwise.end(), "a llama block's kernels carry its SwiGLU");
  swiglu = spec.elementwise.erase(swiglu);
  spec.elementwise.insert(swiglu, moe_ops.begin(), moe_ops.end());
  kept.selective_op_elements_per_token = selective_op_kept_elements(spec, h);

  MoeLayerRouting routing;
  routing.num_experts = experts;
  routing.experts_per_token = moe.experts_per_token;
  routing.capacity_factor = moe.capacity_factor;
  routing.hidden_size = h;
  routing.routed_expert_elements = routed_elements;
  block.moe = routing;
}

}  // namespace shardplan
