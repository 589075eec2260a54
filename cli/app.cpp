// CommandLine: CLI11 app assembly, the unknown-command message, parsing and the error-to-exit-status mapping.
#include "app.h"

#include <algorithm>
#include <iostream>

#include "errors.h"
#include "inputs.h"
#include "name_suggest.h"

namespace shardplan::cli {

CommandLine::CommandLine(const std::vector<Registrar>& commands, Output output)
    : app_(std::make_unique<CLI::App>("shardplan: plan, simulate and run Fully Sharded Data Parallel training")),
      output_(std::move(output)) {
  app_->require_subcommand(1);
  app_->set_version_flag("--version", "shardplan " SHARDPLAN_VERSION);  // meson.build's project version
  for (const Registrar& registrar : commands) {
    Action action = registrar(*app_, output_);
    commands_.emplace_back(app_->get_subcommands({}).back(), std::move(action));
  }
  app_->add_flag("--verbose", verbose_, "on errors, also print where in shardplan's source they were raised");
}

Outcome CommandLine::run(int argc, const char* const* argv) {
  if (argc > 1 && argv[1][0] != '-') {
    // CLI11 only says "a subcommand is required"; name the unknown command and the closest known one.
    std::vector<std::string> names;
    for (const auto* command : app_->get_subcommands({})) names.push_back(command->get_name());
    if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      return {2, "shardplan: error: unknown command '" + Error::one_line(argv[1]) + "'" + did_you_mean(argv[1], names) +
                     " (see --help)"};
    }
  }
  try {
    app_->parse(argc, argv);
  } catch (const CLI::CallForHelp& help) {
    return {app_->exit(help), ""};
  } catch (const CLI::CallForAllHelp& help) {
    return {app_->exit(help), ""};
  } catch (const CLI::CallForVersion& version) {
    return {app_->exit(version), ""};
  } catch (const CLI::ParseError& error) {
    // One line, exit 2, like every other input error; `--help` shows the full usage.
    return {2, "shardplan: error: " + Error::one_line(error.what()) + " (see --help)"};
  }
  try {
    for (auto& [command, action] : commands_) {
      if (command->parsed()) return {action(), ""};
    }
    return {2, ""};
  } catch (const InputError& error) {
    return {2, "shardplan: error: " + std::string(error.what()) +
                   (verbose_ ? " [raised at " + error.raised_at() + "]" : "")};
  } catch (const Error& error) {
    return {1, "shardplan: internal error: " + std::string(error.what()) + " [raised at " + error.raised_at() + "]"};
  } catch (const std::exception& error) {
    return {1, "shardplan: internal error: " + Error::one_line(error.what())};
  }
}

std::vector<Registrar> planning_commands() {
  return {add_models_command, add_gpus_command,     add_estimate_command, add_simulate_command,
          add_plan_command,   add_capacity_command, add_compare_command};
}

Output stdout_output() {
  return Output{[](const nlohmann::json& document) { print_json(document); }};
}

}  // namespace shardplan::cli
