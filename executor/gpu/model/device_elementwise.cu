// Small elementwise kernels of the device layers: residual add, bias rows and column sums, SiLU, bf16 row gather.
#include <math_constants.h>

#include <algorithm>
#include <source_location>
#include <string>

#include "cuda_check.h"
#include "device_elementwise.h"
#include "errors.h"

namespace shardplan::gpu {
namespace {

constexpr int kBlock = 256;
constexpr std::int64_t kMaxGrid = std::int64_t{1} << 20;  // grid-stride loops cover any count beyond this

// A launch function's precondition: InternalError with the caller's file:line and the rank, as KERNEL_CHECK.
void check(bool condition, const char* what, std::source_location where = std::source_location::current()) {
  if (!condition) throw InternalError(std::string("device elementwise kernel: ") + what, where, launcher_rank());
}

unsigned int grid_for(std::int64_t count) {
  return static_cast<unsigned int>(std::min<std::int64_t>((count + kBlock - 1) / kBlock, kMaxGrid));
}

__device__ inline std::int64_t grid_start() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline std::int64_t grid_stride() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

__global__ void add_in_place_kernel(float* y, const float* x, std::int64_t count) {
  for (std::int64_t i = grid_start(); i < count; i += grid_stride()) y[i] += x[i];
}

__global__ void add_bias_rows_kernel(float* y, const float* bias, std::int64_t count, std::int64_t cols) {
  for (std::int64_t i = grid_start(); i < count; i += grid_stride()) y[i] += bias[i % cols];
}

// One thread per column: consecutive threads read consecutive floats of a row, so every row read is coalesced.
__global__ void add_column_sums_kernel(const float* dy, std::int64_t rows, std::int64_t cols, float* grad_bias) {
  for (std::int64_t c = grid_start(); c < cols; c += grid_stride()) {
    double sum = 0.0;
    for (std::int64_t r = 0; r < rows; ++r) sum += static_cast<double>(dy[r * cols + c]);
    grad_bias[c] += static_cast<float>(sum);
  }
}

__global__ void silu_kernel(const float* gate, std::int64_t count, float* silu) {
  for (std::int64_t i = grid_start(); i < count; i += grid_stride()) {
    const float g = gate[i];
    silu[i] = g * (1.0f / (1.0f + expf(-g)));
  }
}

__global__ void embedding_bf16_kernel(const std::int32_t* tokens, const __nv_bfloat16* table, std::int64_t count,
                                      std::int64_t vocab, std::int64_t width, float* out) {
  for (std::int64_t i = grid_start(); i < count; i += grid_stride()) {
    const std::int64_t token = tokens[i / width];
    out[i] = token >= 0 && token < vocab ? __bfloat162float(table[token * width + i % width]) : CUDART_NAN_F;
  }
}

}  // namespace

void add_in_place(cudaStream_t stream, float* y, const float* x, std::int64_t count) {
  check(count >= 0, "negative element count");
  if (count == 0) return;
  add_in_place_kernel<<<grid_for(count), kBlock, 0, stream>>>(y, x, count);
  CUDA_CHECK_LAUNCH();
}

void add_bias_rows(cudaStream_t stream, float* y, const float* bias, std::int64_t rows, std::int64_t cols) {
  check(rows >= 0 && cols > 0, "bias rows need a positive width");
  if (rows == 0) return;
  add_bias_rows_kernel<<<grid_for(rows * cols), kBlock, 0, stream>>>(y, bias, rows * cols, cols);
  CUDA_CHECK_LAUNCH();
}

void add_column_sums(cudaStream_t stream, const float* dy, std::int64_t rows, std::int64_t cols, float* grad_bias) {
  check(rows >= 0 && cols > 0, "column sums need a positive width");
  add_column_sums_kernel<<<grid_for(cols), kBlock, 0, stream>>>(dy, rows, cols, grad_bias);
  CUDA_CHECK_LAUNCH();
}

void silu_forward(cudaStream_t stream, const float* gate, std::int64_t count, float* silu) {
  check(count >= 0, "negative element count");
  if (count == 0) return;
  silu_kernel<<<grid_for(count), kBlock, 0, stream>>>(gate, count, silu);
  CUDA_CHECK_LAUNCH();
}

void embedding_forward_bf16(cudaStream_t stream, const std::int32_t* tokens, const __nv_bfloat16* table,
                            std::int64_t token_count, std::int64_t vocab, std::int64_t width, float* out) {
  check(token_count >= 0 && vocab > 0 && width > 0, "embedding needs a vocabulary and a width");
  const std::int64_t count = token_count * width;
  if (count == 0) return;
  embedding_bf16_kernel<<<grid_for(count), kBlock, 0, stream>>>(tokens, table, count, vocab, width, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace shardplan::gpu
