// SwiGLU MLP forward and backward: three projections around an elementwise gated SiLU.
#include "mlp.h"

#include "projection.h"
#include "row_reductions.h"

namespace shardplan::runtime {

void mlp_forward(const DecoderDims& dims, const LayerParams& params, std::int64_t tokens, const float* normed,
                 SavedActivations& saved, float* out, const ProgressPoll& progress) {
  const std::int64_t h = dims.hidden_size, f = dims.intermediate_size;
  const auto size = static_cast<std::size_t>(tokens * f);
  std::vector<float>& gate = saved.put("mlp.gate", std::vector<float>(size));
  std::vector<float>& up = saved.put("mlp.up", std::vector<float>(size));
  // Note [LoRA projection]: each projection with its adapter, where the layer has one.
  projection_forward(dims, params, "mlp.gate_proj", {tokens, h, f}, normed, saved, gate.data());
  poll(progress);
  projection_forward(dims, params, "mlp.up_proj", {tokens, h, f}, normed, saved, up.data());
  poll(progress);
  std::vector<float>& silu = saved.put("mlp.silu", std::vector<float>(size));
  std::vector<float>& act = saved.put("mlp.act", std::vector<float>(size));
  // Elementwise with std::exp, not Eigen's vectorised exp (Note [Deterministic reductions]).
  for (std::size_t i = 0; i < size; ++i) {
    silu[i] = gate[i] * sigmoid(gate[i]);
    act[i] = silu[i] * up[i];
  }
  projection_forward(dims, params, "mlp.down_proj", {tokens, f, h}, act.data(), saved, out);
}

void mlp_backward(const DecoderDims& dims, const LayerParams& params, std::int64_t tokens, const float* normed,
                  const SavedActivations& saved, const float* d_out, const LayerParams& grads, float* d_normed,
                  const ProgressPoll& progress) {
  const std::int64_t h = dims.hidden_size, f = dims.intermediate_size, n = tokens * f;
  std::vector<float> d_act(static_cast<std::size_t>(n));
  projection_backward(dims, params, "mlp.down_proj", {tokens, f, h}, saved.get("mlp.act").data(), saved, d_out,
                      d_act.data(), false, grads);
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
  projection_backward(dims, params, "mlp.gate_proj", {tokens, h, f}, normed, saved, d_gate.data(), d_normed, false,
                      grads);
  poll(progress);
  projection_backward(dims, params, "mlp.up_proj", {tokens, h, f}, normed, saved, d_up.data(), d_normed, true, grads);
}

}  // namespace shardplan::runtime
