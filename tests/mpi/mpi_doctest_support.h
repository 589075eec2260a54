// What every MPI doctest entry point shares: a listener that aborts the job when a test throws on one rank, and the
// one verdict for the job that every rank returns.
#pragma once

#include <doctest/doctest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "case_skip.h"

namespace shardplan_test {

// A test that throws on one rank would otherwise leave the other ranks waiting in its next collective (until the
// meson timeout; on a GPU, forever); aborting the job turns that into an immediate failure that names the rank and the
// exception. As SelectedCases (case_skip.h), it also counts the test cases the filters selected, so a run whose
// --test-case matches nothing can fail. Register it in one translation unit with
// REGISTER_LISTENER(name, 1, shardplan_test::AbortOnException).
struct AbortOnException : SelectedCases {
  explicit AbortOnException(const doctest::ContextOptions& options) : SelectedCases(options) {}
  void test_case_start(const doctest::TestCaseData& data) override { current_ = data.m_name; }
  void test_case_exception(const doctest::TestCaseException& e) override {
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr, "rank %d: test case \"%s\" threw: %s — aborting all ranks\n", rank, current_.c_str(),
                 e.error_string.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

 private:
  std::string current_;
};

// Runs doctest on every rank (rank 0 prints the full report, the others failures only; no colours: mpirun forwards
// output through a pseudo-terminal even into log files, where the ranks' lines interleave) and returns one verdict
// for the job, so every rank exits with the same status whatever rank a check failed on: 1 when any rank failed,
// else 77 (Meson's SKIP) when any rank skipped a case (SKIP_CASE, Note [Visible skips] in
// tests/support/case_skip.h), else 0. `label` heads rank 0's summary line. With `require_selected`, a run whose
// filters matched no test case fails.
inline int run_doctest_on_every_rank(int argc, char** argv, const std::string& label, bool require_selected) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  doctest::Context context(argc, argv);
  if (rank != 0) context.setOption("minimal", true);
  context.setOption("no-colors", true);
  const int status = context.run();
  if (context.shouldExit()) return status;
  const bool none_selected = require_selected && SelectedCases::selected == 0;
  if (none_selected && rank == 0) std::printf("no test case matched the filters\n");
  // Per rank: 2 failed, 1 skipped, 0 passed; the job's verdict is the worst.
  const int mine = status != 0 || none_selected ? 2 : (skipped_case_count() > 0 ? 1 : 0);
  std::vector<int> by_rank(static_cast<std::size_t>(size), 0);
  MPI_Allgather(&mine, 1, MPI_INT, by_rank.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int worst = 0;
  std::string failing;
  for (int r = 0; r < size; ++r) {
    const int verdict = by_rank[static_cast<std::size_t>(r)];
    worst = std::max(worst, verdict);
    if (verdict == 2) failing += (failing.empty() ? "" : ", ") + std::to_string(r);
  }
  if (rank == 0) {
    const std::string outcome = worst == 2   ? "FAILED on rank(s) " + failing
                                : worst == 1 ? "a case skipped (exit 77)"
                                             : "all ranks passed";
    std::printf("%s: %s\n", label.c_str(), outcome.c_str());
  }
  return worst == 2 ? 1 : (worst == 1 ? kSkipStatus : 0);
}

}  // namespace shardplan_test
