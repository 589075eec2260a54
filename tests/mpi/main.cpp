// Entry point of the `mpi` doctest suite: MPI session, doctest on every rank, one combined verdict (a filter that
// matches no case fails; a skipped case makes it 77, Meson's SKIP).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <string>

#include "mpi_doctest_support.h"
#include "mpi_session.h"

REGISTER_LISTENER("mpi_abort_on_exception", 1, shardplan_test::AbortOnException);

int main(int argc, char** argv) {
  shardplan::comm::MpiSession session(&argc, &argv);
  const std::string label = "[mpi suite] " + std::to_string(session.world_size()) + " rank(s), thread level " +
                            to_string(session.provided());
  return shardplan_test::run_doctest_on_every_rank(argc, argv, label, true);
}
