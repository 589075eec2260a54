// GemmRunner: row-major C = op(A)·op(B) (+= C) on one stream through cuBLAS, bf16 or fp32 operands, fp32 results.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace shardplan::gpu::kernels {

// Sizes of C[m × n] = op(A)[m × k] · op(B)[k × n]. Every matrix is row-major and dense (leading dimension = its
// number of columns as stored): A is [m × k], or [k × m] when transpose_a; B is [k × n], or [n × k] when transpose_b.
// The layer GEMMs of the CPU runtime (linear.h) are: y = x·Wᵀ → (m, n, k) = (rows, out, in), transpose_b;
// dx = dy·W → (rows, in, out), no transposes; dW += dyᵀ·x → (out, in, rows), transpose_a, accumulate.
struct GemmShape {
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
  bool transpose_a = false;
  bool transpose_b = false;
  bool accumulate = false;  // C += op(A)·op(B) instead of C = op(A)·op(B)
};

// Owns a cuBLAS handle bound to `stream`; every call enqueues on that stream and returns without waiting. Not
// thread-safe (one handle per stream and thread, as cuBLAS recommends). Errors (a cuBLAS status, a size over the
// int range cuBLAS takes) are InternalError with rank and file:line.
class GemmRunner {
 public:
  explicit GemmRunner(cudaStream_t stream);
  ~GemmRunner();
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;

  cudaStream_t stream() const { return stream_; }
  cublasHandle_t handle() const { return handle_; }

  // bf16 operands, fp32 accumulation (CUBLAS_COMPUTE_32F) and an fp32 C: the mixed-precision training GEMM
  // (bf16 weights and activations, fp32 outputs and gradients).
  void bf16(const GemmShape& shape, const __nv_bfloat16* a, const __nv_bfloat16* b, float* c);
  // All fp32, no TF32: the reference path, and what the fp32 executor uses.
  void fp32(const GemmShape& shape, const float* a, const float* b, float* c);

 private:
  void run(const GemmShape& shape, const void* a, const void* b, cudaDataType_t operand_type, float* c);

  cudaStream_t stream_;
  cublasHandle_t handle_ = nullptr;
};

}  // namespace shardplan::gpu::kernels
