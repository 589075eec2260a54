// The `shardplan` binary: the planning commands, `calibrate`, and `run` where MPI is built; errors to stderr.
#include <iostream>

#include "app.h"

int main(int argc, char** argv) {
  using namespace shardplan::cli;
  std::vector<Registrar> commands = planning_commands();
  // These two print their own documents (on rank 0 under mpirun), so they take no Output.
  commands.emplace_back([](CLI::App& app, const Output&) { return add_calibrate_command(app); });
#ifdef SHARDPLAN_HAVE_MPI
  commands.emplace_back([](CLI::App& app, const Output&) { return add_run_command(app); });
#endif
  CommandLine line(commands, stdout_output());
  const Outcome outcome = line.run(argc, argv);
  if (!outcome.error_line.empty()) std::cerr << outcome.error_line << "\n";
  return outcome.status;
}
