// GPU kernel tests, elementwise families: casts, embedding, RoPE, SwiGLU and AdamW against the CPU runtime.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "adamw.h"
#include "device_kernels.h"
#include "kernel_test_support.h"
#include "linear.h"
#include "mlp.h"
#include "rope.h"
#include "saved_activations.h"

namespace shardplan::gpu::kernels::testing {
namespace {

// No CPU bf16 code exists, so the reference is bf16_bits_rne (IEEE round-to-nearest-even on the top 16 bits). Both
// directions are exact functions of the input: bits must match exactly, specials included.
TEST_CASE("kernel: cast") {
  Stream stream;
  std::vector<float> values = uniform_buffer(1031, 11, -4.0f, 4.0f);
  const float infinity = std::numeric_limits<float>::infinity();
  values.insert(values.end(), {0.0f, -0.0f, float_of_bits(0x00000001u), float_of_bits(0x00012345u),  // subnormals
                               float_of_bits(0x3f808000u), float_of_bits(0x3f818000u),  // ties: to even, down / up
                               float_of_bits(0x3f808001u), float_of_bits(0xbf817fffu),  // just off a tie
                               1e38f, -3e38f, 65504.0f, infinity, -infinity});
  const auto count = static_cast<std::int64_t>(values.size());
  DeviceBuffer<float> in(stream, values);
  Bf16Buffer bf16(stream, values.size());
  DeviceBuffer<float> back(stream, values.size());
  cast_fp32_to_bf16(stream, in.get(), bf16_data(bf16), count);
  cast_bf16_to_fp32(stream, bf16_data(bf16), back.get(), count);
  const std::vector<std::uint16_t> got_bits = bf16.download();
  const std::vector<float> got_back = back.download();
  std::size_t wrong_bits = 0, wrong_back = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (got_bits[i] != bf16_bits_rne(values[i])) ++wrong_bits;
    if (bits_of(got_back[i]) != bits_of(float_of_bf16(got_bits[i]))) ++wrong_back;
  }
  CHECK_MESSAGE(wrong_bits == 0, "fp32 → bf16 differs from round-to-nearest-even");
  CHECK_MESSAGE(wrong_back == 0, "bf16 → fp32 is not the exact widening");
}

// Reference: the CPU embedding layer (make_embedding_layer) forward and backward. Forward is a copy (exact);
// backward sums a repeated token's rows with atomicAdd in any order, so rel 1e-6 / abs 1e-6 (values O(1)).
TEST_CASE("kernel: embedding") {
  Stream stream;
  const runtime::DecoderDims dims = test_dims();
  std::vector<float> table = uniform_buffer(static_cast<std::size_t>(kVocab * kHidden), 21, -1.0f, 1.0f);
  std::vector<float> grad_table = uniform_buffer(table.size(), 22, -0.5f, 0.5f);  // nonzero: backward adds
  const std::vector<float> grad_table_before = grad_table;
  runtime::Batch batch{kMicroBatch, kSeqLen, random_ids(kTokens, kVocab, 23), random_ids(kTokens, kVocab, 24)};
  const std::vector<float> d_out = uniform_buffer(static_cast<std::size_t>(kTokens * kHidden), 25, -1.0f, 1.0f);

  const auto layer = runtime::make_embedding_layer(dims);
  const runtime::LayerParams params = bind({{"weight", {kVocab, kHidden}, &table}});
  const runtime::LayerParams grads = bind({{"weight", {kVocab, kHidden}, &grad_table}});
  const runtime::LayerForward forward = layer->forward(params, batch, {}, ActivationCheckpointing::none);
  layer->backward(params, forward.saved, {kMicroBatch, kSeqLen, kHidden, d_out}, grads);

  DeviceBuffer<std::int32_t> tokens(stream, batch.tokens);
  DeviceBuffer<float> table_d(stream, table), out(stream, forward.output.values.size());
  DeviceBuffer<float> d_out_d(stream, d_out), grad_d(stream, grad_table_before);
  embedding_forward(stream, tokens.get(), table_d.get(), kTokens, kVocab, kHidden, out.get());
  embedding_backward(stream, tokens.get(), d_out_d.get(), kTokens, kVocab, kHidden, grad_d.get());
  check_close(out.download(), forward.output.values, 0.0, 0.0, "embedding forward");
  check_close(grad_d.download(), grad_table, 1e-6, 1e-6, "embedding backward (added into grad)");
}

// Reference: runtime::rope_table and runtime::rope_rotate. The table is computed in double on both sides and
// rounded once; CUDA's double pow/cos/sin are within 2 ulp, so the floats agree to 1 float ulp (abs 1e-7 for
// |values| ≤ 1), also for Llama 3's 4096 × 64 table with theta 5e5. The rotation is two products and a sum per
// element: rel 1e-5 / abs 1e-6 (FMA contraction on the GPU, a table ulp; values O(1)).
TEST_CASE("kernel: rope") {
  Stream stream;
  struct TableCase {
    std::int64_t seq_len, head_dim;
    double theta;
  };
  for (const auto& [seq_len, head_dim, theta] : {TableCase{kSeqLen, kHeadDim, 1e4}, TableCase{4096, 128, 5e5}}) {
    const runtime::RopeTable want = runtime::rope_table(seq_len, head_dim, theta);
    DeviceBuffer<float> cos(stream, want.cos.size()), sin(stream, want.sin.size());
    rope_table(stream, seq_len, head_dim, theta, cos.get(), sin.get());
    check_close(cos.download(), want.cos, 1e-6, 1e-7, "rope table cos, seq " + std::to_string(seq_len));
    check_close(sin.download(), want.sin, 1e-6, 1e-7, "rope table sin, seq " + std::to_string(seq_len));
  }

  const runtime::RopeTable table = runtime::rope_table(kSeqLen, kHeadDim, 1e4);
  DeviceBuffer<float> cos(stream, table.cos.size()), sin(stream, table.sin.size());
  rope_table(stream, kSeqLen, kHeadDim, 1e4, cos.get(), sin.get());
  // q layout (num_heads) and k layout (num_kv_heads), each turned forward and backward.
  for (const std::int64_t heads : {kHeads, kKvHeads}) {
    for (const bool inverse : {false, true}) {
      const std::vector<float> x = uniform_buffer(static_cast<std::size_t>(kTokens * heads * kHeadDim),
                                                  31 + static_cast<std::uint64_t>(heads), -1.0f, 1.0f);
      std::vector<float> want = x;
      runtime::rope_rotate(table, want.data(), kTokens, heads, kHeadDim, inverse);
      DeviceBuffer<float> got(stream, x);
      (inverse ? rope_backward : rope_forward)(stream, cos.get(), sin.get(), kSeqLen, got.get(), kTokens, heads,
                                               kHeadDim);
      check_close(got.download(), want, 1e-5, 1e-6,
                  std::string(inverse ? "rope backward" : "rope forward") + ", heads " + std::to_string(heads));
    }
  }
}

// Reference: runtime::mlp_forward / mlp_backward with the identity as normalized input (Note [Identity input]):
// forward compares with the CPU's saved "mlp.act" given its "mlp.gate" and "mlp.up"; backward reads d_gate and d_up
// from the gate/up projection gradients, given the d_act the CPU computes from d_out (the same linear_backward call
// mlp_backward makes, deterministic). Elementwise with expf vs std::exp (each within 2 ulp):
// rel 1e-5 / abs 1e-6, the abs for d_gate's 1 + g·(1 − σ) cancelling near g ≈ −1.28.
TEST_CASE("kernel: swiglu") {
  Stream stream;
  const runtime::DecoderDims dims = test_dims();
  const auto weights = static_cast<std::size_t>(kIntermediate * kHidden), n = weights;  // T·f = f·h: T == h
  std::vector<float> w_gate = uniform_buffer(weights, 41, -3.0f, 3.0f);  // gate = w_gateᵀ: σ well into saturation
  std::vector<float> w_up = uniform_buffer(weights, 42, -1.0f, 1.0f);
  std::vector<float> w_down = uniform_buffer(weights, 43, -0.5f, 0.5f);
  std::vector<float> g_gate(weights), g_up(weights), g_down(weights);
  const runtime::LayerParams params = bind({{"mlp.gate_proj.weight", {kIntermediate, kHidden}, &w_gate},
                                            {"mlp.up_proj.weight", {kIntermediate, kHidden}, &w_up},
                                            {"mlp.down_proj.weight", {kHidden, kIntermediate}, &w_down}});
  const runtime::LayerParams grads = bind({{"mlp.gate_proj.weight", {kIntermediate, kHidden}, &g_gate},
                                           {"mlp.up_proj.weight", {kIntermediate, kHidden}, &g_up},
                                           {"mlp.down_proj.weight", {kHidden, kIntermediate}, &g_down}});
  const std::vector<float> normed = identity(kHidden);
  runtime::SavedActivations saved;
  std::vector<float> out(static_cast<std::size_t>(kTokens * kHidden));
  runtime::mlp_forward(dims, params, kTokens, normed.data(), saved, out.data());
  const std::vector<float> d_out = uniform_buffer(out.size(), 44, -1.0f, 1.0f);
  std::vector<float> d_normed(out.size());
  runtime::mlp_backward(dims, params, kTokens, normed.data(), saved, d_out.data(), grads, d_normed.data());
  std::vector<float> d_act(n), scratch(weights);
  runtime::linear_backward({kTokens, kIntermediate, kHidden}, saved.get("mlp.act").data(), w_down.data(),
                           d_out.data(), d_act.data(), false, scratch.data(), nullptr);

  DeviceBuffer<float> gate(stream, saved.get("mlp.gate")), up(stream, saved.get("mlp.up")), act(stream, n);
  DeviceBuffer<float> d_act_d(stream, d_act), d_gate(stream, n), d_up(stream, n);
  swiglu_forward(stream, gate.get(), up.get(), static_cast<std::int64_t>(n), act.get());
  swiglu_backward(stream, gate.get(), up.get(), d_act_d.get(), static_cast<std::int64_t>(n), d_gate.get(),
                  d_up.get());
  check_close(act.download(), saved.get("mlp.act"), 1e-5, 1e-6, "swiglu forward");
  check_close(d_gate.download(), transposed(g_gate, kIntermediate, kTokens), 1e-5, 1e-6, "swiglu d_gate");
  check_close(d_up.download(), transposed(g_up, kIntermediate, kTokens), 1e-5, 1e-6, "swiglu d_up");
}

// Reference: runtime::adamw_step, three steps on an odd-sized shard. Note [AdamW rounding] makes the GPU's
// arithmetic the CPU's operation for operation (bit-equal on x86-64); the tolerance, rel 1e-6 / abs 1e-8 (a few
// ulp of the O(1e-2) moments), only allows for a host compiler that contracts to FMA. The bf16 copy must be the
// round-to-nearest-even of the GPU's own fp32 result, bit for bit.
TEST_CASE("kernel: adamw") {
  Stream stream;
  constexpr std::size_t count = 4099;
  runtime::AdamWOptions cpu_options;
  cpu_options.learning_rate = 1e-2;
  AdamWOptions gpu_options;
  gpu_options.learning_rate = cpu_options.learning_rate;
  gpu_options.beta1 = cpu_options.beta1;
  gpu_options.beta2 = cpu_options.beta2;
  gpu_options.eps = cpu_options.eps;
  gpu_options.weight_decay = cpu_options.weight_decay;
  std::vector<float> params = uniform_buffer(count, 51, -1.0f, 1.0f);
  std::vector<float> m = uniform_buffer(count, 52, -1e-2f, 1e-2f);
  std::vector<float> v = uniform_buffer(count, 53, 0.0f, 1e-4f);
  DeviceBuffer<float> params_d(stream, params), m_d(stream, m), v_d(stream, v), grads_d(stream, count);
  Bf16Buffer params_bf16(stream, count);
  for (std::int64_t step = 1; step <= 3; ++step) {
    const std::vector<float> grads = uniform_buffer(count, 60 + static_cast<std::uint64_t>(step), -0.1f, 0.1f);
    runtime::adamw_step(params, grads, m, v, step, cpu_options);
    grads_d.upload(grads);
    adamw_step(stream, params_d.get(), grads_d.get(), m_d.get(), v_d.get(), static_cast<std::int64_t>(count), step,
               gpu_options, step == 3 ? bf16_data(params_bf16) : nullptr);
  }
  const std::vector<float> got_params = params_d.download();
  check_close(got_params, params, 1e-6, 1e-8, "adamw params");
  check_close(m_d.download(), m, 1e-6, 1e-8, "adamw exp_avg");
  check_close(v_d.download(), v, 1e-6, 1e-10, "adamw exp_avg_sq");
  const std::vector<std::uint16_t> got_bf16 = params_bf16.download();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) wrong += got_bf16[i] != bf16_bits_rne(got_params[i]) ? 1 : 0;
  CHECK_MESSAGE(wrong == 0, "the bf16 copy is not the rounded fp32 master weight");
}

}  // namespace
}  // namespace shardplan::gpu::kernels::testing
