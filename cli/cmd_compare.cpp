// `shardplan compare`: predicted (simulate --trace) against measured (run --trace) timelines of the same plan.
#include <iostream>
#include <memory>

#include "chrome_trace.h"
#include "commands.h"
#include "compare.h"
#include "errors.h"
#include "flag_checks.h"
#include "html_report.h"
#include "input_limits.h"
#include "inputs.h"

namespace shardplan::cli {

Action add_compare_command(CLI::App& app, const Output& output) {
  auto* command = app.add_subcommand("compare", "predicted vs measured: op kinds, streams, step time, peak memory");
  struct Flags {
    std::string predicted, measured, report;
    int rank = 0;
    bool json = false;
    bool force = false;
  };
  auto flags = std::make_shared<Flags>();
  command->add_option("--predicted", flags->predicted, "Chrome trace from `simulate --trace`")->required();
  command->add_option("--measured", flags->measured, "Chrome trace from `run --trace`")->required();
  command->add_option("--rank", flags->rank, "measured rank to compare")
      ->capture_default_str()
      ->check(int_range(0, limits::kMaxWorldSize - 1));
  command->add_option("--report", flags->report, "HTML report overlaying both timelines")
      ->check(output_file("--report"));
  command->add_flag("--force", flags->force,
                    "compare traces of different models or plans (by their fingerprints) anyway");
  command->add_flag("--json", flags->json, "print JSON");
  return [flags, output]() {
    const Timeline predicted = read_chrome_trace(flags->predicted);
    const Timeline measured = read_chrome_trace(flags->measured);
    // Note [Trace fingerprint]: an error against another model or plan is no error of the cost model.
    const TraceMatch match = match_traces(predicted, measured);
    if (!match.mismatch.empty() && !flags->force) {
      throw InputError("compare: --predicted " + flags->predicted + " and --measured " + flags->measured +
                       " are traces of different runs: " + match.mismatch + "; expected one model and plan (--force "
                       "compares them anyway)");
    }
    if (!match.mismatch.empty()) std::cerr << "warning: compare: different runs (--force): " << match.mismatch << "\n";
    if (!match.unchecked.empty()) {
      std::cerr << "warning: compare: " << match.unchecked << " has no fingerprint (written before shardplan "
                << "recorded one, or by another tool): cannot check both are of one model and plan\n";
    }
    const Comparison comparison = compare_timelines(predicted, measured, flags->rank);
    if (!flags->report.empty()) {
      ReportInput report;
      report.title = "shardplan compare: " + flags->predicted + " vs " + flags->measured;
      report.timeline = &predicted;
      report.overlay = &measured;
      write_file_atomically(flags->report, render_html_report(report));
    }
    if (flags->json) {
      output.json(to_json(comparison));
    } else {
      std::cout << render_text(comparison);
    }
    return 0;
  };
}

}  // namespace shardplan::cli
