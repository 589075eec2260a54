// SwiGLU MLP forward and backward: three projections around an elementwise gated SiLU.
#include "mlp.h"

#include "linear.h"
#include "row_reductions.h"

namespace shardplan::runtime {

void mlp_forward(const DecoderDims& dims, const LayerParams& params, std::int64_t tokens, const float* normed,
                 SavedActivations& saved, float* out, const ProgressPoll& progress) {
  const std::int64_t h = dims.hidden_size, f = dims.intermediate_size;
  const auto size = static_cast<std::size_t>(tokens * f);
  std::vector<float>& gate = saved.put("mlp.gate", std::vector<float>(size));
  std::vector<float>& up = saved.put("mlp.up", std::vector<float>(size));
  linear_forward({tokens, h, f}, normed, params.tensor("mlp.gate_proj.weight"), nullptr, gate.data());
  poll(progress);
  linear_forward({tokens, h, f}, normed, params.tensor("mlp.up_proj.weight"), nullptr, up.data());
  poll(progress);
  std::vector<float>& silu = saved.put("mlp.silu", std::vector<float>(size));
  std::vector<float>& act = saved.put("mlp.act", std::vector<float>(size));
  // Elementwise with std::exp, not Eigen's vectorised exp (Note [Deterministic reductions]).
  for (std::size_t i = 0; i < size; ++i) {
    silu[i] = gate[i] * sigmoid(gate[i]);
    act[i] = silu[i] * up[i];
  }
  linear_forward({tokens, f, h}, act.data(), params.tensor("mlp.down_proj.weight"), nullptr, out);
}

void mlp_backward(const DecoderDims& dims, const LayerParams& params, std::int64_t tokens, const float* normed,
                  const SavedActivations& saved, const float* d_out, const LayerParams& grads, float* d_normed,
                  const ProgressPoll& progress) {
  const std::int64_t h = dims.hidden_size, f = dims.intermediate_size, n = tokens * f;
  std::vector<float> d_act(static_cast<std::size_t>(n));
  linear_backward({tokens, f, h}, saved.get("mlp.act").data(), params.tensor("mlp.down_proj.weight"), d_out,
                  d_act.data(), false, grads.tensor("mlp.down_proj.weight"), nullptr);
  poll(progress);
  const std::vector<float>& gate = saved.get("mlp.gate");
  const std::vector<float>& up = saved.get("mlp.up");
  const std::vector<float>& silu = saved.get("mlp.silu");
  // act = silu(g)·u: d_up = da·silu(g); d_gate = da·u·silu'(g) with silu'(g) = σ(g)·(1 + g·(1 − σ(g))).
  std::vector<float> d_up(static_cast<std::size_t>(n)), d_gate(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < d_up.size(); ++i) {
    const float s = sigmoid(gate[i]);
    d_up[i] = d_act[i] * silu[i];
    d_gate[i] = d_act[i] * up[i] * s * (1.0f + gate[i] * (1.0f - s));
  }
  linear_backward({tokens, h, f}, normed, params.tensor("mlp.gate_proj.weight"), d_gate.data(), d_normed, false,
                  grads.tensor("mlp.gate_proj.weight"), nullptr);
  poll(progress);
  linear_backward({tokens, h, f}, normed, params.tensor("mlp.up_proj.weight"), d_up.data(), d_normed, true,
                  grads.tensor("mlp.up_proj.weight"), nullptr);
}

}  // namespace shardplan::runtime
