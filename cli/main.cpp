// The `shardplan` binary: the planning commands, `calibrate`, and `run` where MPI is built; errors to stderr.
#include <cstdlib>
#include <iostream>
#include <string_view>

#include "app.h"

namespace {

// Note [Set-up errors once] (cmd_run.cpp): a flag refused as it is parsed (`run --trace <a directory>`) is refused
// before MPI starts, identically on every rank of an mpirun, which used to print the line once per rank. The rank is
// then known only from the launcher's environment (Open MPI, PMIx, MPICH/Slurm's PMI): rank 0 prints it.
bool quiet_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    if (const char* rank = std::getenv(name)) return std::string_view(rank) != "0";
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace shardplan::cli;
  std::vector<Registrar> commands = planning_commands();
  // These two print their own documents (on rank 0 under mpirun), so they take no Output.
  commands.emplace_back([](CLI::App& app, const Output&) { return add_calibrate_command(app); });
#ifdef SHARDPLAN_HAVE_MPI
  commands.emplace_back([](CLI::App& app, const Output&) { return add_run_command(app); });
#endif
  // Last, so that they see every command above (their flag table is read when they run).
  commands.emplace_back([](CLI::App& app, const Output&) { return add_completion_command(app); });
  commands.emplace_back([](CLI::App& app, const Output&) { return add_man_command(app); });
  CommandLine line(commands, stdout_output());
  const Outcome outcome = line.run(argc, argv);
  if (!outcome.error_line.empty() && !(outcome.status == 2 && quiet_rank())) std::cerr << outcome.error_line << "\n";
  return outcome.status;
}
