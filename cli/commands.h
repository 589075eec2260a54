// The subcommands of the `shardplan` binary: each registers its options and returns the action to run once parsed.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace shardplan::cli {

// The action a subcommand runs after parsing; returns the process exit status.
using Action = std::function<int()>;

Action add_models_command(CLI::App& app);
Action add_gpus_command(CLI::App& app);
Action add_estimate_command(CLI::App& app);
Action add_simulate_command(CLI::App& app);
Action add_plan_command(CLI::App& app);
Action add_capacity_command(CLI::App& app);
Action add_compare_command(CLI::App& app);
Action add_calibrate_command(CLI::App& app);
Action add_run_command(CLI::App& app);  // only built with MPI (SHARDPLAN_HAVE_MPI)

}  // namespace shardplan::cli
