// gpu_bench: the GPU facts the cost model needs, as tables — cuBLAS GEMM TFLOP/s (bf16 with fp32 accumulation, and
// fp32) for square sizes and a ~1B llama's layer shapes, and NCCL bus bandwidth per collective and message size (the
// nccl-tests method and busbw definitions, NVIDIA/nccl-tests doc/PERFORMANCE.md). Run under mpirun, one rank per GPU;
// used by scripts/gpu-check. GEMM operands are random (uniform in [-1, 1), fixed seed), never zeros: a bf16 product
// ran 13% faster on zeros than on random data on an H200 (the device tool's METHOD.md).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "collective_cost.h"
#include "cuda_check.h"
#include "device_kernels.h"
#include "gemm.h"
#include "mpi_session.h"
#include "nccl_bootstrap.h"
#include "nccl_communicator.h"

using namespace shardplan;

namespace {

constexpr int kWarmup = 3;
constexpr int kIterations = 20;

struct GemmCase {
  std::string name;
  std::int64_t m, n, k;
};

// Mean seconds per call of `enqueue` on `stream`, timed by events around kIterations calls after kWarmup.
template <typename Enqueue>
double time_on_stream(cudaStream_t stream, Enqueue enqueue) {
  for (int i = 0; i < kWarmup; ++i) enqueue();
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < kIterations; ++i) enqueue();
  CUDA_CHECK(cudaEventRecord(stop, stream));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  return ms * 1e-3 / kIterations;
}

// `count` floats uniform in [-1, 1) into the device buffer `out` (fixed seed: every run times the same data).
void fill_random(cudaStream_t stream, float* out, std::size_t count) {
  std::vector<float> host(count);
  std::mt19937 generator(1234);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (float& x : host) x = uniform(generator);
  CUDA_CHECK(cudaMemcpyAsync(out, host.data(), count * sizeof(float), cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

void gemm_table(cudaStream_t stream) {
  // y = x·Wᵀ shapes of Llama 3.2 1B at 2048 tokens (hidden 2048, kv 512, intermediate 8192, vocab 128256).
  const std::vector<GemmCase> cases = {
      {"square 1024", 1024, 1024, 1024}, {"square 2048", 2048, 2048, 2048}, {"square 4096", 4096, 4096, 4096},
      {"square 8192", 8192, 8192, 8192}, {"q/o proj", 2048, 2048, 2048},   {"k/v proj", 2048, 512, 2048},
      {"gate/up proj", 2048, 8192, 2048}, {"down proj", 2048, 2048, 8192}, {"lm_head", 2048, 128256, 2048},
  };
  gpu::kernels::GemmRunner gemm(stream);
  std::printf("#  GEMM (cuBLAS, row-major y = x·Wᵀ)        m       n       k   bf16 TFLOP/s   fp32 TFLOP/s\n");
  for (const GemmCase& c : cases) {
    const std::size_t a_elems = static_cast<std::size_t>(c.m * c.k), b_elems = static_cast<std::size_t>(c.n * c.k);
    const std::size_t c_elems = static_cast<std::size_t>(c.m * c.n);
    float *a = nullptr, *b = nullptr, *out = nullptr;
    __nv_bfloat16 *a16 = nullptr, *b16 = nullptr;
    CUDA_CHECK(cudaMalloc(&a, a_elems * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&b, b_elems * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&out, c_elems * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&a16, a_elems * sizeof(__nv_bfloat16)));
    CUDA_CHECK(cudaMalloc(&b16, b_elems * sizeof(__nv_bfloat16)));
    fill_random(stream, a, a_elems);
    fill_random(stream, b, b_elems);
    gpu::kernels::cast_fp32_to_bf16(stream, a, a16, static_cast<std::int64_t>(a_elems));
    gpu::kernels::cast_fp32_to_bf16(stream, b, b16, static_cast<std::int64_t>(b_elems));
    const gpu::kernels::GemmShape shape{c.m, c.n, c.k, false, true, false};
    const double flops = 2.0 * static_cast<double>(c.m) * static_cast<double>(c.n) * static_cast<double>(c.k);
    const double bf16_s = time_on_stream(stream, [&] { gemm.bf16(shape, a16, b16, out); });
    const double fp32_s = time_on_stream(stream, [&] { gemm.fp32(shape, a, b, out); });
    std::printf("   %-36s %7lld %7lld %7lld %14.1f %14.1f\n", c.name.c_str(), static_cast<long long>(c.m),
                static_cast<long long>(c.n), static_cast<long long>(c.k), flops / bf16_s / 1e12,
                flops / fp32_s / 1e12);
    for (void* buffer : {static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(out),
                         static_cast<void*>(a16), static_cast<void*>(b16)}) {
      CUDA_CHECK(cudaFree(buffer));
    }
  }
}

void nccl_table(gpu::NcclCommunicator& world, bool lead) {
  const int ranks = world.size();
  if (lead) {
    std::printf("#  NCCL %d rank(s)%s\n#  collective       size(B)   count(elems)    time(us)  algbw(GB/s)  busbw(GB/s)\n",
                ranks, ranks == 1 ? " (one rank: NCCL copies locally, busbw = 0 by definition)" : "");
  }
  const std::int64_t max_bytes = std::int64_t{1} << 30;
  float* buffer = nullptr;
  float* output = nullptr;
  CUDA_CHECK(cudaMalloc(&buffer, static_cast<std::size_t>(max_bytes)));
  CUDA_CHECK(cudaMalloc(&output, static_cast<std::size_t>(max_bytes)));
  for (CollectiveKind kind : {CollectiveKind::all_gather, CollectiveKind::reduce_scatter, CollectiveKind::all_reduce}) {
    for (std::int64_t bytes = std::int64_t{1} << 20; bytes <= max_bytes; bytes *= 4) {
      // S as nccl-tests defines it: the gathered output, the reduce-scatter input, the all-reduce buffer.
      const auto total = static_cast<std::size_t>(bytes / 4);
      const std::size_t per_rank = total / static_cast<std::size_t>(ranks);
      comm::Collective collective = comm::Collective::all_reduce;
      if (kind == CollectiveKind::all_gather) collective = comm::Collective::all_gather;
      if (kind == CollectiveKind::reduce_scatter) collective = comm::Collective::reduce_scatter;
      cudaStream_t stream = world.stream(collective);
      world.barrier();
      // Handles are kept until the timing is done: dropping one waits for it on the host (Note [Dropping a handle]),
      // which would serialise the launches nccl-tests keeps back to back.
      std::vector<comm::CommHandle> handles;
      const double seconds = time_on_stream(stream, [&] {
        if (kind == CollectiveKind::all_gather) {
          handles.push_back(
              world.all_gather(output + static_cast<std::size_t>(world.rank()) * per_rank, per_rank, output));
        } else if (kind == CollectiveKind::reduce_scatter) {
          handles.push_back(world.reduce_scatter(buffer, output, per_rank));
        } else {
          handles.push_back(world.all_reduce(buffer, total));
        }
      });
      for (comm::CommHandle& handle : handles) handle.wait();
      double slowest = seconds;
      MPI_Allreduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, world.mpi_comm());
      if (lead) {
        std::printf("   %-14s %11lld %14zu %11.1f %12.2f %12.2f\n", to_string(kind), static_cast<long long>(bytes),
                    total, slowest * 1e6, algorithm_bandwidth(bytes, slowest) / 1e9,
                    bus_bandwidth(kind, bytes, slowest, ranks) / 1e9);
      }
    }
  }
  CUDA_CHECK(cudaFree(buffer));
  CUDA_CHECK(cudaFree(output));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    comm::MpiSession session(&argc, &argv);
    const gpu::LocalDevice device = gpu::bind_local_device(MPI_COMM_WORLD);
    if (device.shared()) {
      std::fprintf(stderr, "gpu_bench: %d ranks on this host but %d device(s); run one rank per GPU\n",
                   device.local_size, device.device_count);
      return 2;
    }
    gpu::NcclCommunicator world(MPI_COMM_WORLD);
    const bool lead = world.rank() == 0;
    if (lead) {
      cudaStream_t stream;
      CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      gemm_table(stream);
      CUDA_CHECK(cudaStreamDestroy(stream));
    }
    nccl_table(world, lead);
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "gpu_bench: %s\n", error.what());
    return 1;
  }
}
