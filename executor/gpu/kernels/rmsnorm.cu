// RMSNorm kernels (Zhang & Sennrich 2019): per-row forward saving 1/rms, backward for the input and the weight.
#include "device_kernels.h"
#include "launch_helpers.cuh"

namespace shardplan::gpu::kernels {
namespace {

// One block per row: the mean of squares accumulates in double (as the CPU's row_dot), then r = 1/sqrt(ms + eps)
// is computed in double and rounded once, as rmsnorm_forward in rmsnorm_layer.cpp.
__global__ void rmsnorm_forward_kernel(const float* x, const float* weight, std::int64_t width, double eps, float* y,
                                       float* inv_rms) {
  const std::int64_t row = blockIdx.x;
  const float* xr = x + row * width;
  double sum = 0.0;
  for (std::int64_t c = threadIdx.x; c < width; c += blockDim.x) sum += static_cast<double>(xr[c]) * xr[c];
  sum = detail::block_reduce(sum, detail::SumOp{}, 0.0);
  const float r = static_cast<float>(1.0 / sqrt(sum / static_cast<double>(width) + eps));
  if (threadIdx.x == 0) inv_rms[row] = r;
  float* yr = y + row * width;
  for (std::int64_t c = threadIdx.x; c < width; c += blockDim.x) yr[c] = xr[c] * r * weight[c];
}

// One block per row: m = mean(g ⊙ x̂) in double, then dx = (g − x̂·m)·r elementwise, in the CPU's operation order.
__global__ void rmsnorm_backward_input_kernel(const float* x, const float* inv_rms, const float* weight,
                                              const float* dy, std::int64_t width, float* dx, bool accumulate) {
  const std::int64_t row = blockIdx.x;
  const float* xr = x + row * width;
  const float* dyr = dy + row * width;
  const float r = inv_rms[row];
  double sum = 0.0;
  for (std::int64_t c = threadIdx.x; c < width; c += blockDim.x) {
    sum += static_cast<double>(dyr[c] * weight[c]) * static_cast<double>(xr[c] * r);
  }
  sum = detail::block_reduce(sum, detail::SumOp{}, 0.0);
  const float mean_g_xhat = static_cast<float>(sum / static_cast<double>(width));
  float* dxr = dx + row * width;
  for (std::int64_t c = threadIdx.x; c < width; c += blockDim.x) {
    const float g = dyr[c] * weight[c], x_hat = xr[c] * r;
    const float value = (g - x_hat * mean_g_xhat) * r;
    dxr[c] = accumulate ? dxr[c] + value : value;
  }
}

// Note [Column sums]: grad_weight[c] += Σ_rows dy[row, c]·x̂[row, c]. A block owns 32 columns (threadIdx.x, so a warp
// reads 32 consecutive floats of a row) and splits the rows among kRowLanes lanes (threadIdx.y); the lanes' double
// partial sums meet in shared memory in a fixed order and one thread adds the column's total. No atomics: the result
// is the same on every run.
constexpr int kRowLanes = 8;

__global__ void rmsnorm_backward_weight_kernel(const float* x, const float* inv_rms, const float* dy,
                                               std::int64_t rows, std::int64_t width, float* grad_weight) {
  __shared__ double partial[kRowLanes][detail::kWarp];
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * detail::kWarp + threadIdx.x;
  double sum = 0.0;
  if (col < width) {
    for (std::int64_t row = threadIdx.y; row < rows; row += kRowLanes) {
      const std::int64_t at = row * width + col;
      sum += static_cast<double>(dy[at] * (x[at] * inv_rms[row]));
    }
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < width) {
    double total = 0.0;
    for (int lane = 0; lane < kRowLanes; ++lane) total += partial[lane][threadIdx.x];
    grad_weight[col] += static_cast<float>(total);
  }
}

}  // namespace

void rmsnorm_forward(cudaStream_t stream, const float* x, const float* weight, std::int64_t rows, std::int64_t width,
                     double eps, float* y, float* inv_rms) {
  KERNEL_CHECK(rows >= 0 && width > 0 && eps >= 0.0, "rmsnorm needs a positive width and a non-negative eps");
  if (rows == 0) return;
  rmsnorm_forward_kernel<<<detail::row_grid(rows), detail::kBlock, 0, stream>>>(x, weight, width, eps, y, inv_rms);
  CUDA_CHECK_LAUNCH();
}

void rmsnorm_backward(cudaStream_t stream, const float* x, const float* inv_rms, const float* weight, const float* dy,
                      std::int64_t rows, std::int64_t width, float* dx, bool accumulate_dx, float* grad_weight) {
  KERNEL_CHECK(rows >= 0 && width > 0, "rmsnorm needs a positive width");
  if (rows == 0) return;
  rmsnorm_backward_input_kernel<<<detail::row_grid(rows), detail::kBlock, 0, stream>>>(x, inv_rms, weight, dy, width,
                                                                                       dx, accumulate_dx);
  CUDA_CHECK_LAUNCH();
  const auto column_blocks = static_cast<unsigned int>((width + detail::kWarp - 1) / detail::kWarp);
  rmsnorm_backward_weight_kernel<<<column_blocks, dim3(detail::kWarp, kRowLanes), 0, stream>>>(x, inv_rms, dy, rows,
                                                                                              width, grad_weight);
  CUDA_CHECK_LAUNCH();
}

}  // namespace shardplan::gpu::kernels
