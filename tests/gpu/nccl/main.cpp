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
#include <vector>

#include "device_probe.h"
#include "mpi_session.h"
#include "nccl_bootstrap.h"

namespace {

constexpr int kSkip = 77;

// As tests/mpi/main.cpp: a test that throws on one rank would leave the others waiting in its next collective (on the
// GPU, forever); aborting the job turns that into an immediate failure naming the rank and the exception. Also counts
// the test cases the filters selected, so a Meson test whose --test-case matches nothing fails instead of passing.
struct AbortOnException : doctest::IReporter {
  explicit AbortOnException(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override { selected = stats.numTestCasesPassingFilters; }
  void test_case_start(const doctest::TestCaseData& data) override { current_ = data.m_name; }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException& e) override {
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr, "rank %d: test case \"%s\" threw: %s — aborting all ranks\n", rank, current_.c_str(),
                 e.error_string.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}

  static inline unsigned selected = 0;

 private:
  std::string current_;
};

}  // namespace

REGISTER_LISTENER("nccl_abort_on_exception", 1, AbortOnException);

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

  doctest::Context context(argc, argv);
  if (rank != 0) context.setOption("minimal", true);
  context.setOption("no-colors", true);
  const int status = context.run();
  if (context.shouldExit()) return status;

  // One verdict for the job, so every rank exits with the same status whatever rank a check failed on.
  const int failed = status != 0 || AbortOnException::selected == 0 ? 1 : 0;
  if (AbortOnException::selected == 0 && rank == 0) std::printf("no test case matched the filters\n");
  std::vector<int> failed_by_rank(static_cast<std::size_t>(size), 0);
  MPI_Allgather(&failed, 1, MPI_INT, failed_by_rank.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int any_failed = 0;
  for (const int f : failed_by_rank) any_failed |= f;
  if (rank == 0) {
    std::string failing;
    for (int r = 0; r < size; ++r) {
      if (failed_by_rank[static_cast<std::size_t>(r)]) failing += (failing.empty() ? "" : ", ") + std::to_string(r);
    }
    std::printf("[gpu nccl suite] %d rank(s): %s\n", size,
                any_failed ? ("FAILED on rank(s) " + failing).c_str() : "all ranks passed");
  }
  return any_failed;
}
