// DeepSeek's Multi-head Latent Attention counted from transformers' DeepseekV2Attention forward (DeepSeek-V2 §2.1).
#include "mla_block.h"

#include <algorithm>

#include "block_kernels.h"
#include "errors.h"

namespace shardplan {
namespace {

// DeepseekV2RMSNorm is LlamaRMSNorm's code: the traffic block_kernels.cpp's rms_norm counts (4w + 7w fp32, 8 kernels).
ElementwiseSpec latent_rms_norm(std::string name, std::int64_t width) {
  const auto w = static_cast<double>(width);
  return elementwise_kernel(std::move(name), 4.0 * w, 7.0 * w, 8);
}

bool is_llama_attention_op(const std::string& name) {
  return name == "q_proj" || name == "k_proj" || name == "v_proj" || name == "o_proj";
}

}  // namespace

// DeepseekV2Attention.forward (transformers/models/deepseek_v2/modeling_deepseek_v2.py; DeepSeek-V2 paper §2.1.2,
// Eqs. (9)-(19)): q = q_b_proj(q_a_layernorm(q_a_proj(x))) (or q_proj(x)), split into q_nope and q_pe;
// kv_a_proj_with_mqa(x) split into the latent c_KV (kv_lora_rank) and k_pe (qk_rope_head_dim, one for all heads);
// kv_b_proj(kv_a_layernorm(c_KV)) split into k_nope and the values; RoPE on q_pe and k_pe; query = cat(q_nope, q_pe),
// key = cat(k_nope, k_pe expanded to every head); attention with qk_head_dim-wide queries and keys and
// v_head_dim-wide values; o_proj. This is the training-time (non-absorbed) form: the paper's §2.1.2 absorption of
// W^UK into W^UQ is an inference-time rewrite.
void replace_attention_with_mla(const DecoderArchitecture& arch, LayerSpec& block) {
  SHARDPLAN_CHECK(arch.mla.has_value(), "MLA replacement needs the MLA hyper-parameters");
  const MlaArchitecture& mla = *arch.mla;
  const std::int64_t h = arch.hidden_size, heads = arch.num_heads, rq = mla.q_lora_rank, rkv = mla.kv_lora_rank,
                     rope = mla.qk_rope_head_dim, qk = mla.qk_head_dim(), v = mla.v_head_dim;
  const std::int64_t q_width = heads * qk, kv_b_width = heads * (mla.qk_nope_head_dim + v), o_in = heads * v;

  // Tensors, in DeepseekV2Attention's module order, right after input_layernorm.
  std::vector<TensorSpec> attention;
  if (rq > 0) {
    attention.push_back({"self_attn.q_a_proj.weight", {rq, h}});
    attention.push_back({"self_attn.q_a_layernorm.weight", {rq}});
    attention.push_back({"self_attn.q_b_proj.weight", {q_width, rq}});
  } else {
    attention.push_back({"self_attn.q_proj.weight", {q_width, h}});
  }
  attention.push_back({"self_attn.kv_a_proj_with_mqa.weight", {rkv + rope, h}});
  attention.push_back({"self_attn.kv_a_layernorm.weight", {rkv}});
  attention.push_back({"self_attn.kv_b_proj.weight", {kv_b_width, rkv}});
  attention.push_back({"self_attn.o_proj.weight", {h, o_in}});
  auto& tensors = block.tensors;
  tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                               [](const TensorSpec& tensor) { return tensor.name.starts_with("self_attn."); }),
                tensors.end());
  const auto after_norm = std::find_if(tensors.begin(), tensors.end(), [](const TensorSpec& tensor) {
    return tensor.name == "input_layernorm.weight";
  });
  SHARDPLAN_CHECK(after_norm != tensors.end(), "a llama block starts with input_layernorm");
  tensors.insert(after_norm + 1, attention.begin(), attention.end());

  // FLOPs: 2 per multiply-add of every projection; QKᵀ over qk_head_dim and P·V over v_head_dim per head.
  const std::int64_t q = arch.q_dim(), kv = arch.kv_dim();
  const std::int64_t llama_attention_weights = h * q + 2 * h * kv + q * h;
  const std::int64_t mla_weights = (rq > 0 ? rq * h + q_width * rq : q_width * h) + (rkv + rope) * h +
                                   kv_b_width * rkv + h * o_in;
  block.flops.matmul_flops_per_token += 2.0 * static_cast<double>(mla_weights - llama_attention_weights);
  block.flops.attention_flops_per_token_per_position = 2.0 * static_cast<double>(heads * (qk + v));

  // Kept for backward, per token (as the llama block counts, Korthikanti §4.2): the llama attention's q after RoPE,
  // k, v and o_proj's input (2q + 2kv) go; the norm input and the normed input (2h) stay. MLA keeps q_a_proj's output
  // and q_a_layernorm's (2·q_lora_rank), kv_a_proj_with_mqa's output (kv_lora_rank + rope), kv_a_layernorm's output
  // (kv_lora_rank), the concatenated query and key (2·heads·qk_head_dim), the values and o_proj's input (2·heads·v).
  block.activations.elements_per_token +=
      static_cast<double>(-(2 * q + 2 * kv) + (rq > 0 ? 2 * rq : 0) + (rkv + rope) + rkv + 2 * q_width + 2 * o_in);

  // Kernels. Forward matmul order q (a, b), kv_a, kv_b, o, then the MLP's.
  LayerKernelSpec& spec = *block.kernels;
  std::vector<ProjectionSpec> projections;
  if (rq > 0) {
    projections.push_back({"q_a_proj", h, rq, false});
    projections.push_back({"q_b_proj", rq, q_width, false});
  } else {
    projections.push_back({"q_proj", h, q_width, false});
  }
  projections.push_back({"kv_a_proj_with_mqa", h, rkv + rope, false});
  projections.push_back({"kv_b_proj", rkv, kv_b_width, false});
  projections.push_back({"o_proj", o_in, h, false});
  spec.projections.erase(std::remove_if(spec.projections.begin(), spec.projections.end(),
                                        [](const ProjectionSpec& p) { return is_llama_attention_op(p.name); }),
                         spec.projections.end());
  spec.projections.insert(spec.projections.begin(), projections.begin(), projections.end());
  // torchtitan's selective-op policy saves every other matmul's output in forward order (the 1st, 3rd, ...), as
  // llama_block_kernels marks them; replace_mlp_with_moe re-marks the MLP's own after this.
  for (std::size_t index = 0; index < spec.projections.size(); ++index) {
    spec.projections[index].saved_by_op_policy = index % 2 == 0;
  }
  // The attention kernel's FLOPs are 4·s²·heads·head_dim (pass_kernels.cpp); with queries and keys qk_head_dim wide
  // and values v_head_dim wide they are 2·s²·heads·(qk + v), so the kernel is timed at the mean head dimension —
  // the same FLOPs. (transformers pads the values to qk_head_dim for flash_attention_2; SDPA takes them as they are.)
  spec.attention = AttentionSpec{heads, (qk + v) / 2, true};
  // Memory-bound work: the latent norms; RoPE (10w per tensor of width w, as block_kernels.cpp counts it) on q_pe
  // (heads·rope) and the shared k_pe (rope); the two cats building query and key (read and write heads·qk each);
  // the transpose of the attention output (heads·v). repeat_kv does not exist here (every head has its own k and v).
  std::vector<ElementwiseSpec> mla_ops;
  if (rq > 0) mla_ops.push_back(latent_rms_norm("q_a_layernorm", rq));
  mla_ops.push_back(latent_rms_norm("kv_a_layernorm", rkv));
  mla_ops.push_back(elementwise_kernel("rotary", 10.0 * static_cast<double>(heads * rope + rope), 0.0, 10));
  mla_ops.push_back(elementwise_kernel("query/key concat", 4.0 * static_cast<double>(q_width), 0.0, 2));
  mla_ops.push_back(elementwise_kernel("attention output transpose", 2.0 * static_cast<double>(o_in), 0.0, 1));
  auto& ops = spec.elementwise;
  ops.erase(std::remove_if(ops.begin(), ops.end(),
                           [](const ElementwiseSpec& op) {
                             return op.name == "rotary" || op.name == "repeat_kv" ||
                                    op.name == "attention output transpose";
                           }),
            ops.end());
  // After the first rmsnorm (input_layernorm), before the residual add.
  SHARDPLAN_CHECK(!ops.empty() && ops.front().name == "rmsnorm", "a llama block's kernels start with its norm");
  ops.insert(ops.begin() + 1, mla_ops.begin(), mla_ops.end());
  block.activations.selective_op_elements_per_token = selective_op_kept_elements(spec, h);
}

}  // namespace shardplan
