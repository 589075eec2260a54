// GemmRunner: the row-major GEMMs of the layers as column-major cublasGemmEx calls.
#include "gemm.h"

#include <limits>
#include <string>

#include "cuda_check.h"
#include "errors.h"

namespace shardplan::gpu::kernels {

GemmRunner::GemmRunner(cudaStream_t stream) : stream_(stream) {
  CUBLAS_CHECK(cublasCreate(&handle_));
  try {
    CUBLAS_CHECK(cublasSetStream(handle_, stream_));
    // CUBLAS_DEFAULT_MATH: tensor cores for the bf16 path; an fp32 GEMM with CUBLAS_COMPUTE_32F stays IEEE fp32
    // (TF32 needs CUBLAS_TF32_TENSOR_OP_MATH or CUBLAS_COMPUTE_32F_FAST_TF32, neither used here).
    CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
  } catch (...) {
    cublasDestroy(handle_);
    throw;
  }
}

GemmRunner::~GemmRunner() {
  // A destructor must not throw; a failure here means the context is already gone, and nothing is left to free.
  if (handle_ != nullptr) cublasDestroy(handle_);
}

void GemmRunner::bf16(const GemmShape& shape, const __nv_bfloat16* a, const __nv_bfloat16* b, float* c) {
  run(shape, a, b, CUDA_R_16BF, c);
}

void GemmRunner::fp32(const GemmShape& shape, const float* a, const float* b, float* c) {
  run(shape, a, b, CUDA_R_32F, c);
}

// Note [Row-major GEMM through cuBLAS]: cuBLAS is column-major (cuBLAS Library User Guide, "Data Layout"; the
// operation is cublasGemmEx, C = α·op(A)·op(B) + β·C, https://docs.nvidia.com/cuda/cublas/#cublasgemmex). A row-major
// r × c matrix with leading dimension c is, byte for byte, the column-major c × r matrix — its transpose. So the
// row-major C[m × n] we want is the column-major Cᵀ[n × m], and Cᵀ = op(B)ᵀ·op(A)ᵀ: we ask cuBLAS for the product
// with the operands swapped (B first), m and n swapped, and each operand's transpose flag unchanged — an operand
// stored untransposed is already, read column-major, the transpose the swapped product needs. Leading dimensions are
// the row-major column counts: lda = k (or m when transpose_a), ldb = n (or k when transpose_b), ldc = n.
// The combination A/B = CUDA_R_16BF, C = CUDA_R_32F, CUBLAS_COMPUTE_32F with float α, β is one cublasGemmEx supports
// (its table of type combinations); CUDA_R_32F throughout is plain SGEMM.
void GemmRunner::run(const GemmShape& shape, const void* a, const void* b, cudaDataType_t operand_type, float* c) {
  constexpr std::int64_t int_max = std::numeric_limits<int>::max();
  if (shape.m < 0 || shape.n < 0 || shape.k < 0 || shape.m > int_max || shape.n > int_max || shape.k > int_max) {
    throw InternalError("GemmRunner: sizes m=" + std::to_string(shape.m) + " n=" + std::to_string(shape.n) +
                            " k=" + std::to_string(shape.k) + " outside cuBLAS's int range",
                        std::source_location::current(), launcher_rank());
  }
  if (shape.m == 0 || shape.n == 0) return;
  const int m = static_cast<int>(shape.m), n = static_cast<int>(shape.n), k = static_cast<int>(shape.k);
  const int lda = shape.transpose_a ? m : k;
  const int ldb = shape.transpose_b ? k : n;
  const float alpha = 1.0f, beta = shape.accumulate ? 1.0f : 0.0f;
  // k = 0 gives C = β·C, which cuBLAS handles; a zero leading dimension is not allowed, so clamp it to 1.
  CUBLAS_CHECK(cublasGemmEx(handle_, shape.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                            shape.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, operand_type,
                            ldb > 0 ? ldb : 1, a, operand_type, lda > 0 ? lda : 1, &beta, c, CUDA_R_32F, n,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace shardplan::gpu::kernels
