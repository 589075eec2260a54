// The subcommands of the `shardplan` binary: each registers its options and returns the action to run once parsed.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace shardplan::cli {

// The action a subcommand runs after parsing; returns the process exit status.
using Action = std::function<int()>;

// Where a command's --json document goes: printed by the binary, kept by the Python module (app.h).
struct Output {
  std::function<void(const nlohmann::json&)> json;
};

Action add_models_command(CLI::App& app, const Output& output);
Action add_gpus_command(CLI::App& app, const Output& output);
Action add_estimate_command(CLI::App& app, const Output& output);
Action add_simulate_command(CLI::App& app, const Output& output);
Action add_plan_command(CLI::App& app, const Output& output);
Action add_capacity_command(CLI::App& app, const Output& output);
Action add_compare_command(CLI::App& app, const Output& output);
Action add_calibrate_command(CLI::App& app);  // prints its own JSON (rank 0 under mpirun)
Action add_run_command(CLI::App& app);        // only built with MPI (SHARDPLAN_HAVE_MPI); prints on rank 0
// Hidden (cmd_docs.cpp): the shell completions and the man page from the flag table of `app`, the root.
Action add_completion_command(CLI::App& app);
Action add_man_command(CLI::App& app);

}  // namespace shardplan::cli
