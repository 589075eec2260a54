// A job where one rank fails: `abort` calls Communicator::abort, `throw` throws and its handler aborts. Must not hang.
#include <cstdio>
#include <exception>
#include <string>

#include "errors.h"
#include "mpi_communicator.h"
#include "mpi_session.h"

int main(int argc, char** argv) {
  shardplan::comm::MpiSession session(&argc, &argv);
  const std::string mode = argc > 1 ? argv[1] : "abort";
  shardplan::comm::MpiCommunicator world;
  const int failing_rank = world.size() > 1 ? 1 : 0;
  try {
    if (world.rank() == failing_rank) {
      if (mode == "throw") throw shardplan::InternalError("boom", std::source_location::current(), world.rank());
      world.abort("boom");
    }
    // The healthy ranks wait for the failing one; only the abort can release them.
    world.barrier();
    float x = 1.0f;
    world.all_reduce(&x, 1).wait();
  } catch (const shardplan::Error& e) {
    // What an executor's main does with any error: take the job down with the message, never leave peers waiting.
    world.abort(std::string(e.what()) + " at " + e.raised_at());
  }
  std::printf("rank %d finished normally (this is the failure being tested for)\n", world.rank());
  return 0;
}
