// CUDA and cuBLAS error reporting with the launcher's rank and the caller's file:line.
#include "cuda_check.h"

#include <cstdlib>
#include <string>

#include "errors.h"

namespace shardplan::gpu {

int launcher_rank() {
  // The variables each launcher sets for its ranks: Open MPI, PMIx (Open MPI 5, Slurm + PMIx), MPICH/Hydra, Slurm.
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* value = std::getenv(name)) {
      char* end = nullptr;
      long rank = std::strtol(value, &end, 10);
      if (end != value && *end == '\0' && rank >= 0) return static_cast<int>(rank);
    }
  }
  return -1;
}

namespace {
std::string located(const char* call, std::source_location where) {
  std::string file = where.file_name();
  auto slash = file.rfind("executor/");
  if (slash != std::string::npos) file = file.substr(slash);
  return std::string(call) + " failed on rank " + std::to_string(launcher_rank()) + " at " + file + ":" +
         std::to_string(where.line()) + ": ";
}
}  // namespace

void throw_cuda_error(cudaError_t code, const char* call, std::source_location where) {
  throw InternalError(located(call, where) + cudaGetErrorName(code) + ": " + cudaGetErrorString(code), where,
                      launcher_rank());
}

void throw_cublas_error(cublasStatus_t code, const char* call, std::source_location where) {
  throw InternalError(located(call, where) + cublasGetStatusName(code) + ": " + cublasGetStatusString(code), where,
                      launcher_rank());
}

}  // namespace shardplan::gpu
