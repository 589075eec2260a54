// The `shardplan` binary: parses the command line with CLI11 and maps errors to exit statuses (2 input, 1 internal).
#include <algorithm>
#include <iostream>

#include "commands.h"
#include "errors.h"
#include "name_suggest.h"

int main(int argc, char** argv) {
  using namespace shardplan;
  CLI::App app{"shardplan: plan, simulate and run Fully Sharded Data Parallel training"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "shardplan 0.1.0");
  std::vector<std::pair<CLI::App*, cli::Action>> commands;
  const auto keep = [&](cli::Action action) { commands.emplace_back(app.get_subcommands({}).back(), action); };
  keep(cli::add_models_command(app));
  keep(cli::add_gpus_command(app));
  keep(cli::add_estimate_command(app));
  keep(cli::add_simulate_command(app));
  keep(cli::add_plan_command(app));
  keep(cli::add_capacity_command(app));
  keep(cli::add_compare_command(app));
  keep(cli::add_calibrate_command(app));
#ifdef SHARDPLAN_HAVE_MPI
  keep(cli::add_run_command(app));
#endif
  bool verbose = false;
  app.add_flag("--verbose", verbose, "on errors, also print where in shardplan's source they were raised");
  if (argc > 1 && argv[1][0] != '-') {
    // CLI11 only says "a subcommand is required"; name the unknown command and the closest known one.
    std::vector<std::string> names;
    for (const auto* command : app.get_subcommands({})) names.push_back(command->get_name());
    if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      std::cerr << "shardplan: error: unknown command '" << Error::one_line(argv[1]) << "'"
                << did_you_mean(argv[1], names) << " (see --help)\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForAllHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForVersion& version) {
    return app.exit(version);
  } catch (const CLI::ParseError& error) {
    // One line, exit 2, like every other input error; `--help` shows the full usage.
    std::cerr << "shardplan: error: " << error.what() << " (see --help)\n";
    return 2;
  }
  try {
    for (auto& [command, action] : commands) {
      if (command->parsed()) return action();
    }
    return 2;
  } catch (const InputError& error) {
    std::cerr << "shardplan: error: " << error.what() << (verbose ? " [raised at " + error.raised_at() + "]" : "")
              << "\n";
    return 2;
  } catch (const Error& error) {
    std::cerr << "shardplan: internal error: " << error.what() << " [raised at " << error.raised_at() << "]\n";
    return 1;
  } catch (const std::exception& error) {
    std::cerr << "shardplan: internal error: " << error.what() << "\n";
    return 1;
  }
}
