// How a doctest case that cannot run on this machine says so, and the exit status that makes Meson report it as SKIP.
//
// Note [Visible skips]: a case that returns early after a MESSAGE counts as passed in doctest and as OK in Meson, so
// a machine without mpirun (or without the GPL-3 text, or python3) would report features as tested that never ran.
// Instead a case calls SKIP_CASE(reason): the reason goes to stdout as "SKIP: <reason>" (scripts/test-summary lists
// it), the case returns, and the program's verdict becomes 77, Meson's skip code, unless something failed. A skip is
// therefore never counted as a pass — but a program whose other cases ran would then show as SKIP too, so every case
// that can skip is registered as its own Meson test (tests/meson.build, tests/runtime/meson.build).
#pragma once

#include <doctest/doctest.h>

#include <cstdio>
#include <string>

namespace shardplan_test {

inline constexpr int kSkipStatus = 77;  // Meson: SKIP

// Cases of this process that skipped.
inline int& skipped_case_count() {
  static int count = 0;
  return count;
}

inline void report_skip(const std::string& reason) {
  std::printf("SKIP: %s\n", reason.c_str());
  std::fflush(stdout);
  ++skipped_case_count();
}

// Counts the test cases the filters selected, so a Meson test whose --test-case matches nothing (a renamed case, a
// typo) fails instead of passing with 0 cases. Register it once per program:
// REGISTER_LISTENER("selected_cases", 1, shardplan_test::SelectedCases).
struct SelectedCases : doctest::IReporter {
  explicit SelectedCases(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override { selected = stats.numTestCasesPassingFilters; }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}

  static inline unsigned selected = 0;
};

// The exit status of a single-process doctest program: 1 when a case failed or the filters selected none (with
// `require_selected`), else 77 when a case skipped (Note [Visible skips]), else 0.
inline int verdict(int doctest_status, bool require_selected) {
  if (doctest_status != 0) return 1;
  if (require_selected && SelectedCases::selected == 0) {
    std::printf("no test case matched the filters\n");
    return 1;
  }
  return skipped_case_count() > 0 ? kSkipStatus : 0;
}

// main() of a single-process doctest program (register SelectedCases in the same program).
inline int run_doctest_with_skips(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int status = context.run();
  if (context.shouldExit()) return status;
  return verdict(status, true);
}

}  // namespace shardplan_test

// Ends the current test case as skipped (Note [Visible skips]). Only in a TEST_CASE's own body: it returns from the
// function it is written in.
#define SKIP_CASE(reason)                     \
  do {                                        \
    ::shardplan_test::report_skip(reason);    \
    return;                                   \
  } while (false)
