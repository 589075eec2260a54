// The command line as a library: builds the CLI11 app from a list of commands, parses, runs, and maps every error to
// its one-line message and exit status. The `shardplan` binary and the Python module (python/) both run through it,
// so a call from Python takes the CLI's inputs and gives the CLI's documents and messages.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands.h"

namespace shardplan::cli {

// Registers one subcommand; `output` is where its --json document goes.
using Registrar = std::function<Action(CLI::App&, const Output&)>;

struct Outcome {
  int status = 0;          // the process exit status: 0, 2 (input), 1 (internal), 3 (`plan`: nothing fits)
  std::string error_line;  // "shardplan: error: ..." (one line, no newline); empty unless a message is due
};

class CommandLine {
 public:
  CommandLine(const std::vector<Registrar>& commands, Output output);
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  // The app, for callers that look up a command's options before building an argument list (the Python module).
  CLI::App& app() { return *app_; }
  // Parses argv (argv[0] is the program) and runs the chosen command. --help and --version print to stdout.
  Outcome run(int argc, const char* const* argv);

 private:
  std::unique_ptr<CLI::App> app_;
  Output output_;
  std::vector<std::pair<CLI::App*, Action>> commands_;
  bool verbose_ = false;
};

// The planning commands (models, gpus, estimate, simulate, plan, capacity, compare): no MPI, no CUDA. The binary adds
// calibrate and run (whose --bench and executor need MPI).
std::vector<Registrar> planning_commands();

// Output for the binary: documents printed to stdout, pretty, one per command.
Output stdout_output();

}  // namespace shardplan::cli
