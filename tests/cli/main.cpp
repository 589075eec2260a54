// doctest entry point of the `cli` tests (they drive the built binary): a case that cannot run here exits 77, Meson's
// SKIP (Note [Visible skips] in tests/support/case_skip.h), and filters that match no case fail.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "case_skip.h"

REGISTER_LISTENER("selected_cases", 1, shardplan_test::SelectedCases);

int main(int argc, char** argv) { return shardplan_test::run_doctest_with_skips(argc, argv); }
