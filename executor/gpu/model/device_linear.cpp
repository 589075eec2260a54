// Device linear layers: the three GEMMs of runtime/linear.cpp through GemmRunner, fp32 or bf16 by the weight's dtype.
#include "device_linear.h"

#include "device_buffers.h"
#include "device_elementwise.h"
#include "device_kernels.h"
#include "errors.h"
#include "gemm.h"

namespace shardplan::gpu {

const __nv_bfloat16* GemmOperand::bf16() const {
  if (!bf16_.allocated() && count_ > 0) {
    bf16_ = typed_buffer(*context_, DeviceDType::bf16, count_);
    kernels::cast_fp32_to_bf16(context_->stream, values_, bf16_.as<__nv_bfloat16>(), count_);
  }
  return bf16_.as<__nv_bfloat16>();
}

namespace {

void check_shape(const DeviceLinearShape& shape, const GemmOperand& x, const DeviceTensor& weight,
                 const DeviceTensor* bias) {
  SHARDPLAN_CHECK(shape.rows >= 0 && shape.in_features > 0 && shape.out_features > 0, "linear: bad shape");
  SHARDPLAN_CHECK(x.count() == shape.rows * shape.in_features, "linear: input does not match rows × in_features");
  SHARDPLAN_CHECK(weight.element_count == shape.out_features * shape.in_features,
                  "linear: tensor '" + weight.name + "' holds " + std::to_string(weight.element_count) +
                      " elements, expected " + std::to_string(shape.out_features) + " × " +
                      std::to_string(shape.in_features));
  SHARDPLAN_CHECK(bias == nullptr || bias->element_count == shape.out_features,
                  "linear: bias does not match the output features");
}

}  // namespace

void device_linear_forward(const DeviceContext& context, const DeviceLinearShape& s, const GemmOperand& x,
                           const DeviceTensor& weight, const DeviceTensor* bias, float* y) {
  check_shape(s, x, weight, bias);
  // y[rows × out] = x[rows × in]·W[out × in]ᵀ: (m, n, k) = (rows, out, in), W transposed (gemm.h).
  const kernels::GemmShape gemm{s.rows, s.out_features, s.in_features, false, true, false};
  if (weight.dtype == DeviceDType::f32) {
    context.gemm->fp32(gemm, x.fp32(), static_cast<const float*>(weight.data), y);
  } else {
    context.gemm->bf16(gemm, x.bf16(), static_cast<const __nv_bfloat16*>(weight.data), y);
  }
  if (bias != nullptr) {
    DeviceBuffer scratch;
    add_bias_rows(context.stream, y, fp32_values(context, *bias, scratch), s.rows, s.out_features);
  }
}

void device_linear_backward(const DeviceContext& context, const DeviceLinearShape& s, const GemmOperand& x,
                            const DeviceTensor& weight, const GemmOperand& dy, float* dx, bool accumulate_dx,
                            float* grad_weight, float* grad_bias) {
  check_shape(s, x, weight, nullptr);
  SHARDPLAN_CHECK(dy.count() == s.rows * s.out_features, "linear: dy does not match rows × out_features");
  // dW[out × in] += dy[rows × out]ᵀ·x[rows × in]: (m, n, k) = (out, in, rows), dy transposed, accumulating.
  const kernels::GemmShape weight_gemm{s.out_features, s.in_features, s.rows, true, false, true};
  // dx[rows × in] = dy[rows × out]·W[out × in]: (m, n, k) = (rows, in, out), no transposes.
  const kernels::GemmShape input_gemm{s.rows, s.in_features, s.out_features, false, false, accumulate_dx};
  if (weight.dtype == DeviceDType::f32) {
    context.gemm->fp32(weight_gemm, dy.fp32(), x.fp32(), grad_weight);
    context.gemm->fp32(input_gemm, dy.fp32(), static_cast<const float*>(weight.data), dx);
  } else {
    context.gemm->bf16(weight_gemm, dy.bf16(), x.bf16(), grad_weight);
    context.gemm->bf16(input_gemm, dy.bf16(), static_cast<const __nv_bfloat16*>(weight.data), dx);
  }
  // The bias gradient sums the fp32 dy in double (a column sum, not a GEMM, so no operand is rounded to bf16).
  if (grad_bias != nullptr) add_column_sums(context.stream, dy.fp32(), s.rows, s.out_features, grad_bias);
}

}  // namespace shardplan::gpu
