// AdamW step kernel (Loshchilov & Hutter 2019) on fp32 master weights and moments, with an optional bf16 copy.
#include <cmath>

#include "device_kernels.h"
#include "launch_helpers.cuh"

namespace shardplan::gpu::kernels {
namespace {

// The step's scalars, computed on the host exactly as adamw.cpp computes them (double, then rounded to float).
struct AdamWScalars {
  float decay, beta1, beta2, one_minus_beta1, one_minus_beta2, step_size, bias_correction2_sqrt, eps;
};

// Note [AdamW rounding]: the per-element arithmetic is adamw.cpp's, operation for operation, written with the
// round-to-nearest intrinsics so nvcc cannot contract a multiply and an add into one FMA (which rounds once instead
// of twice). With IEEE sqrt and division (nvcc's defaults, -prec-sqrt and -prec-div) the result equals the CPU's bit
// for bit on a host that does not contract either (x86-64 without -mfma); tests still allow a few ulp.
__global__ void adamw_kernel(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::int64_t count,
                             AdamWScalars k, __nv_bfloat16* params_bf16) {
  for (std::int64_t i = detail::grid_start(); i < count; i += detail::grid_stride()) {
    const float g = grads[i];
    float p = __fmul_rn(params[i], k.decay);
    const float m = __fadd_rn(__fmul_rn(k.beta1, exp_avg[i]), __fmul_rn(k.one_minus_beta1, g));
    const float v = __fadd_rn(__fmul_rn(k.beta2, exp_avg_sq[i]), __fmul_rn(__fmul_rn(k.one_minus_beta2, g), g));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), k.bias_correction2_sqrt), k.eps);
    p = __fsub_rn(p, __fdiv_rn(__fmul_rn(k.step_size, m), denom));
    params[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    if (params_bf16 != nullptr) params_bf16[i] = __float2bfloat16_rn(p);
  }
}

}  // namespace

void adamw_step(cudaStream_t stream, float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                std::int64_t count, std::int64_t step, const AdamWOptions& options, __nv_bfloat16* params_bf16) {
  KERNEL_CHECK(count >= 0, "negative element count");
  KERNEL_CHECK(step >= 1, "AdamW steps count from 1, got " + std::to_string(step));
  if (count == 0) return;
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(options.beta1, t);
  AdamWScalars k{};
  k.decay = static_cast<float>(1.0 - options.learning_rate * options.weight_decay);
  k.beta1 = static_cast<float>(options.beta1);
  k.beta2 = static_cast<float>(options.beta2);
  k.one_minus_beta1 = static_cast<float>(1.0 - options.beta1);
  k.one_minus_beta2 = static_cast<float>(1.0 - options.beta2);
  k.step_size = static_cast<float>(options.learning_rate / bias_correction1);
  k.bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(options.beta2, t)));
  k.eps = static_cast<float>(options.eps);
  adamw_kernel<<<detail::grid_for(count), detail::kBlock, 0, stream>>>(params, grads, exp_avg, exp_avg_sq, count, k,
                                                                       params_bf16);
  CUDA_CHECK_LAUNCH();
}

}  // namespace shardplan::gpu::kernels
