// Entry point of the `mpi` doctest suite: MPI session, doctest on every rank, one combined verdict.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#include "mpi_session.h"

namespace {

// A test that throws on one rank would otherwise leave the other ranks waiting in its next collective until the meson
// timeout; aborting the job turns that into an immediate failure that names the rank and the exception.
struct AbortOnException : doctest::IReporter {
  explicit AbortOnException(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
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

 private:
  std::string current_;
};

}  // namespace

REGISTER_LISTENER("mpi_abort_on_exception", 1, AbortOnException);

int main(int argc, char** argv) {
  shardplan::comm::MpiSession session(&argc, &argv);
  const int rank = session.world_rank();
  const int size = session.world_size();

  doctest::Context context(argc, argv);
  // Every rank runs every test (they are collective); only rank 0 prints the full report, the others print failures
  // only, so a failing rank is still visible without N copies of the same output.
  if (rank != 0) context.setOption("minimal", true);
  // mpirun forwards every rank's output through a pseudo-terminal, so doctest would colour it even when it ends up in a
  // log file; ranks' lines interleave there, and escape codes only clutter them.
  context.setOption("no-colors", true);
  const int status = context.run();
  if (context.shouldExit()) return status;

  // One verdict for the job, so every rank exits with the same status whatever rank a check failed on.
  const int failed = status != 0 ? 1 : 0;
  std::vector<int> failed_by_rank(static_cast<std::size_t>(size), 0);
  MPI_Allgather(&failed, 1, MPI_INT, failed_by_rank.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) {
    std::string failing;
    for (int r = 0; r < size; ++r) {
      if (failed_by_rank[static_cast<std::size_t>(r)]) failing += (failing.empty() ? "" : ", ") + std::to_string(r);
    }
    std::printf("[mpi suite] %d rank(s), thread level %s: %s\n", size, to_string(session.provided()),
                any_failed ? ("FAILED on rank(s) " + failing).c_str() : "all ranks passed");
  }
  return any_failed;
}
