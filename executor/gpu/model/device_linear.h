// Linear layers on the device (y = x·Wᵀ + b with Hugging Face [out, in] weights), forward and backward, as
// runtime/linear.h, in the precision of the weight's dtype.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "device_layer.h"

namespace shardplan::gpu {

// Note [Device linear precision]: the weight's dtype picks the GEMM. f32 weights: GemmRunner::fp32, IEEE fp32 (no
// TF32), the CPU runtime's arithmetic up to cuBLAS's summation order. bf16 weights (bf16-mixed plans): the fp32
// activation operand — x in forward; dy, and x, in backward — is rounded to bf16 (round-to-nearest-even) and
// GemmRunner::bf16 multiplies bf16 operands with fp32 accumulation into an fp32 result: torch.autocast(bfloat16)'s
// matmul precision (bf16 inputs, fp32 accumulate), except that outputs and activation gradients stay fp32 here where
// autocast returns them in bf16. Weight gradients accumulate into the fp32 gradient buffer (accumulate in the GEMM's
// epilogue, fp32), as FSDP's fp32 reduce keeps them.

// An fp32 activation matrix one or more GEMMs read, with its bf16 copy made the first time a bf16 GEMM needs it and
// reused after (q, k and v read the same normed input; their backward reads it again), freed with this object.
class GemmOperand {
 public:
  GemmOperand(const DeviceContext& context, const float* values, std::int64_t count)
      : context_(&context), values_(values), count_(count) {}
  const float* fp32() const { return values_; }
  const __nv_bfloat16* bf16() const;
  std::int64_t count() const { return count_; }

 private:
  const DeviceContext* context_;
  const float* values_;
  std::int64_t count_;
  mutable DeviceBuffer bf16_;
};

struct DeviceLinearShape {
  std::int64_t rows = 0;  // tokens
  std::int64_t in_features = 0;
  std::int64_t out_features = 0;
};

// y[rows × out] = x[rows × in] · weight[out × in]ᵀ (+ bias[out] when non-null). Overwrites y.
void device_linear_forward(const DeviceContext& context, const DeviceLinearShape& shape, const GemmOperand& x,
                           const DeviceTensor& weight, const DeviceTensor* bias, float* y);

// Given dy = dL/dy [rows × out]: grad_weight += dyᵀ·x, grad_bias += column sums of dy (when non-null), and
// dx = dy·weight, added to dx when accumulate_dx (several linears read the same input) or written otherwise.
void device_linear_backward(const DeviceContext& context, const DeviceLinearShape& shape, const GemmOperand& x,
                            const DeviceTensor& weight, const GemmOperand& dy, float* dx, bool accumulate_dx,
                            float* grad_weight, float* grad_bias);

}  // namespace shardplan::gpu
