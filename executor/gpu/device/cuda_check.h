// CUDA_CHECK / CUBLAS_CHECK: a failed CUDA runtime or cuBLAS call becomes an InternalError with rank and file:line.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <source_location>

namespace shardplan::gpu {

// The rank the launcher gave this process (Open MPI, PMIx, MPICH/Hydra or Slurm environment), or -1 outside a
// distributed launch. Read from the environment so that the GPU layer names the rank in its errors without linking MPI.
int launcher_rank();

// Throw InternalError: "<call> failed on rank R at file:line: <CUDA error name>: <description>".
[[noreturn]] void throw_cuda_error(cudaError_t code, const char* call, std::source_location where);
[[noreturn]] void throw_cublas_error(cublasStatus_t code, const char* call, std::source_location where);

inline void check_cuda(cudaError_t code, const char* call, std::source_location where) {
  if (code != cudaSuccess) throw_cuda_error(code, call, where);
}
inline void check_cublas(cublasStatus_t code, const char* call, std::source_location where) {
  if (code != CUBLAS_STATUS_SUCCESS) throw_cublas_error(code, call, where);
}

}  // namespace shardplan::gpu

// Macros (not functions) so that the failing call is named by its own source text; the location is the caller's.
#define CUDA_CHECK(call) ::shardplan::gpu::check_cuda((call), #call, std::source_location::current())
#define CUBLAS_CHECK(call) ::shardplan::gpu::check_cublas((call), #call, std::source_location::current())
// After a kernel launch: launch-configuration errors are reported by cudaGetLastError, not by the launch itself.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
