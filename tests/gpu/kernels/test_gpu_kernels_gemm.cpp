// GPU kernel tests, GEMM: GemmRunner's fp32 and bf16 paths against the CPU runtime's linear layer GEMMs.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "device_kernels.h"
#include "gemm.h"
#include "kernel_test_support.h"
#include "linear.h"
#include "runtime_types.h"

namespace shardplan::gpu::kernels::testing {
namespace {

// Odd sizes (no multiple of 8 or 16), so neither cuBLAS's aligned tensor-core paths nor its tails are assumed.
constexpr std::int64_t kRows = 33, kIn = 29, kOut = 47;

// The GEMMs of one linear layer (linear.h: x [rows × in], W [out × in], dy [rows × out]) and one with both operands
// transposed, each with its reference from the CPU runtime: linear_forward for y = x·Wᵀ, linear_backward for
// dW += dyᵀ·x (accumulating into a nonzero dW) and dx = dy·W, and an Eigen product for the transposed pair.
struct GemmCase {
  std::string name;
  GemmShape shape;
  std::vector<float> a, b, c_before, want;
};

std::vector<GemmCase> linear_cases(bool round_inputs_to_bf16) {
  auto input = [&](std::size_t count, std::uint64_t seed) {
    std::vector<float> values = uniform_buffer(count, seed, -1.0f, 1.0f);
    if (round_inputs_to_bf16) {
      for (float& value : values) value = round_to_bf16(value);
    }
    return values;
  };
  const std::vector<float> x = input(static_cast<std::size_t>(kRows * kIn), 101);
  const std::vector<float> w = input(static_cast<std::size_t>(kOut * kIn), 102);
  const std::vector<float> dy = input(static_cast<std::size_t>(kRows * kOut), 103);
  const std::vector<float> at = input(static_cast<std::size_t>(kIn * kRows), 104);  // [in × rows]: Aᵀ is [rows × in]
  const std::vector<float> dw_before = uniform_buffer(static_cast<std::size_t>(kOut * kIn), 105, -1.0f, 1.0f);
  const std::vector<float> garbage_y(static_cast<std::size_t>(kRows * kOut), 1e30f);
  const std::vector<float> garbage_x(static_cast<std::size_t>(kRows * kIn), 1e30f);

  std::vector<float> y(garbage_y.size()), dx(garbage_x.size()), dw = dw_before;
  runtime::linear_forward({kRows, kIn, kOut}, x.data(), w.data(), nullptr, y.data());
  runtime::linear_backward({kRows, kIn, kOut}, x.data(), w.data(), dy.data(), dx.data(), false, dw.data(), nullptr);
  // C[rows × out] = Aᵀ·Wᵀ with A stored [in × rows] and W [out × in].
  const runtime::RowMatrix both = runtime::ConstMatrixView(at.data(), kIn, kRows).transpose() *
                                  runtime::ConstMatrixView(w.data(), kOut, kIn).transpose();
  return {
      {"y = x·Wᵀ", {kRows, kOut, kIn, false, true, false}, x, w, garbage_y, y},
      {"dW += dyᵀ·x", {kOut, kIn, kRows, true, false, true}, dy, x, dw_before, dw},
      {"dx = dy·W", {kRows, kIn, kOut, false, false, false}, dy, w, garbage_x, dx},
      {"C = Aᵀ·Wᵀ", {kRows, kOut, kIn, true, true, false}, at, w, garbage_y, {both.data(), both.data() + both.size()}},
  };
}

// Σ_k |op(A)[i, k]|·|op(B)[k, j]| (+ |C_before| when accumulating): the scale of each element's rounding error.
std::vector<double> error_scale(const GemmCase& g) {
  const GemmShape& s = g.shape;
  std::vector<double> scale(static_cast<std::size_t>(s.m * s.n));
  for (std::int64_t i = 0; i < s.m; ++i) {
    for (std::int64_t j = 0; j < s.n; ++j) {
      double sum = s.accumulate ? std::abs(g.c_before[static_cast<std::size_t>(i * s.n + j)]) : 0.0;
      for (std::int64_t k = 0; k < s.k; ++k) {
        const float a = g.a[static_cast<std::size_t>(s.transpose_a ? k * s.m + i : i * s.k + k)];
        const float b = g.b[static_cast<std::size_t>(s.transpose_b ? j * s.k + k : k * s.n + j)];
        sum += std::abs(static_cast<double>(a) * b);
      }
      scale[static_cast<std::size_t>(i * s.n + j)] = sum;
    }
  }
  return scale;
}

void check_gemm(const std::vector<float>& got, const GemmCase& g, double relative_to_scale, const std::string& what) {
  const std::vector<double> scale = error_scale(g);
  std::size_t failures = 0, worst = 0;
  double worst_ratio = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double ratio = std::abs(static_cast<double>(got[i]) - g.want[i]) / (scale[i] + 1e-30);
    if (!(ratio <= relative_to_scale)) {
      ++failures;
      if (!(ratio <= worst_ratio)) {
        worst_ratio = ratio;
        worst = i;
      }
    }
  }
  if (failures > 0) {
    std::ostringstream message;
    message << what << " [" << g.name << "]: " << failures << " of " << got.size() << " elements off by more than "
            << relative_to_scale << "·Σ|a·b|; worst at " << worst << ": got " << got[worst] << ", expected "
            << g.want[worst] << " (" << worst_ratio << "·Σ|a·b|)";
    FAIL_CHECK(message.str());
  }
}

// fp32: both sides accumulate in fp32 in different orders, each within k·2⁻²⁴·Σ|a·b| ≈ 2e-6·Σ|a·b| for k ≤ 47;
// tolerance 1e-5·Σ|a·b|. The handle uses CUBLAS_DEFAULT_MATH, so no TF32 (which would need ~1e-3).
TEST_CASE("kernel: gemm_fp32") {
  Stream stream;
  GemmRunner gemm(stream);
  CHECK(gemm.stream() == static_cast<cudaStream_t>(stream));
  for (const GemmCase& g : linear_cases(false)) {
    DeviceBuffer<float> a(stream, g.a), b(stream, g.b), c(stream, g.c_before);
    gemm.fp32(g.shape, a.get(), b.get(), c.get());
    check_gemm(c.download(), g, 1e-5, "fp32 GEMM");
  }
}

// bf16 operands, fp32 accumulation. Against the CPU on the same bf16-rounded inputs the products are exact in fp32
// (8 × 8 significant bits), so only the accumulation order differs: 1e-4·Σ|a·b| (tensor cores need not round each
// addition to nearest like an FMA chain). Against the CPU on the unrounded fp32 inputs, rounding each operand to bf16
// (8 significant bits: relative error ≤ 2⁻⁹) moves each product by ≤ 2⁻⁸ ≈ 3.9e-3 of its size: 1e-2·Σ|a·b|. The
// operands are rounded on the device by cast_fp32_to_bf16, as the executor does.
TEST_CASE("kernel: gemm_bf16") {
  Stream stream;
  GemmRunner gemm(stream);
  const std::vector<GemmCase> rounded = linear_cases(true), exact = linear_cases(false);
  for (std::size_t i = 0; i < exact.size(); ++i) {
    const GemmCase& g = exact[i];
    DeviceBuffer<float> a(stream, g.a), b(stream, g.b), c(stream, g.c_before);
    Bf16Buffer a16(stream, g.a.size()), b16(stream, g.b.size());
    cast_fp32_to_bf16(stream, a.get(), bf16_data(a16), static_cast<std::int64_t>(g.a.size()));
    cast_fp32_to_bf16(stream, b.get(), bf16_data(b16), static_cast<std::int64_t>(g.b.size()));
    gemm.bf16(g.shape, bf16_data(a16), bf16_data(b16), c.get());
    const std::vector<float> got = c.download();
    check_gemm(got, rounded[i], 1e-4, "bf16 GEMM vs fp32 GEMM of the rounded inputs");
    check_gemm(got, g, 1e-2, "bf16 GEMM vs fp32 GEMM of the exact inputs");
  }
}

}  // namespace
}  // namespace shardplan::gpu::kernels::testing
