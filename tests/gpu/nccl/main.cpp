// Entry point of the NCCL tests of the `gpu` suite: skip without a GPU, MPI session, one device per rank, doctest on
// every rank, one combined verdict.
//
// Not gpu_test_main (tests/gpu/gpu_test_main.cpp): these tests also need MPI and a device per rank. It keeps its
// contract: without a usable CUDA device every rank prints "SKIP: no usable CUDA device (<reason>)" and exits 77
// (Meson's skip code; mpirun passes it on) — before MPI_Init, so a machine without a driver never gets that far.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <cstdio>
#include <exception>
#include <string>

#include "device_probe.h"
#include "mpi_doctest_support.h"
#include "mpi_session.h"
#include "nccl_bootstrap.h"

namespace {

constexpr int kSkip = 77;

}  // namespace

// tests/mpi/mpi_doctest_support.h: a test that throws on one rank aborts the job (on the GPU the others would wait
// forever), and a Meson test whose --test-case matches nothing fails instead of passing.
REGISTER_LISTENER("nccl_abort_on_exception", 1, shardplan_test::AbortOnException);

int main(int argc, char** argv) {
  const shardplan::gpu::DeviceProbe probe = shardplan::gpu::probe_devices();
  if (!probe.usable()) {
    std::printf("SKIP: no usable CUDA device (%s)\n", probe.reason.c_str());
    return kSkip;
  }

  shardplan::comm::MpiSession session(&argc, &argv);
  const int rank = session.world_rank();
  const int size = session.world_size();

  // One device per rank (Note [Device per rank]); with fewer devices than ranks on a host, every rank skips.
  int shared = 0;
  try {
    const shardplan::gpu::LocalDevice device = shardplan::gpu::bind_local_device(MPI_COMM_WORLD);
    shared = device.shared() ? 1 : 0;
    if (shared) {
      std::printf("SKIP: %d ranks on this host but %d CUDA device(s); NCCL needs one device per rank\n",
                  device.local_size, device.device_count);
    } else if (rank == 0) {
      std::printf("CUDA device 0: %s (sm_%d), %d device(s); %d rank(s)\n", probe.name.c_str(),
                  probe.compute_capability, probe.device_count, size);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: binding a CUDA device failed: %s — aborting all ranks\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int any_shared = 0;
  MPI_Allreduce(&shared, &any_shared, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any_shared) return kSkip;

  return shardplan_test::run_doctest_on_every_rank(argc, argv, "[gpu nccl suite] " + std::to_string(size) + " rank(s)",
                                                   true);
}
