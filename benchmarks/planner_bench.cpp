// planner_bench: the planning commands users run (issue 32), each timed as a whole `shardplan` process, as one table
// with the goal beside each figure; then the growth of `plan` with model and cluster size. Give it one binary, or
// several to compare side by side in one run (same machine, same build type):
//   build/benchmarks/planner_bench now=build/shardplan
//   build/benchmarks/planner_bench before=/tmp/before/shardplan after=build/shardplan --runs 3
// A row's figure is the fastest of --runs runs (the machines are shared and noisy: compare ratios in one run).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "process_run.h"

namespace {

using shardplan::bench::ProcessSample;
using shardplan::bench::run_process;

struct Row {
  std::string name;
  double goal_s = 0;  // 0: no goal (the growth table)
  std::vector<std::string> args;
};

// The goals are issue 32's (measured on the 2-core reference machine).
std::vector<Row> user_commands() {
  return {
      {"plan 405B, 256x8 H100 (TP searched)", 0.1, {"plan", "--model", "llama3.1-405b", "--cluster", "256x8xH100-80GB"}},
      {"plan 70B, 256x8 H100", 0.2, {"plan", "--model", "llama3-70b", "--cluster", "256x8xH100-80GB"}},
      {"demo capacity 70B, 3 types, 8..1024", 2.0,
       {"capacity", "--model", "llama3-70b", "--gpus", "A100-80GB,H100-80GB,H200-141GB", "--min-gpus", "8",
        "--max-gpus", "1024", "--ac", "full"}},
      {"capacity 7B, 4M-token batch, 8..512", 5.0,
       {"capacity", "--model", "llama2-7b", "--gpus", "A100-80GB,H100-80GB", "--min-gpus", "8", "--max-gpus", "512",
        "--global-batch-tokens", "4194304"}},
  };
}

// Plan time for 8B / 70B / 405B on 8 / 256 / 2048 H100s (issue 32, must show 4).
std::vector<Row> growth() {
  std::vector<Row> rows;
  for (const char* model : {"llama3-8b", "llama3-70b", "llama3.1-405b"}) {
    for (const auto& [gpus, cluster] : std::vector<std::pair<int, const char*>>{
             {8, "8xH100-80GB"}, {256, "32x8xH100-80GB"}, {2048, "256x8xH100-80GB"}}) {
      rows.push_back({std::string("plan ") + model + " on " + std::to_string(gpus), 0.0,
                      {"plan", "--model", model, "--cluster", cluster}});
    }
  }
  return rows;
}

// The fastest of `runs` runs; false when the command failed (exit 3, `plan`'s "nothing fits", is an answer).
bool measure(const std::string& binary, const Row& row, int runs, ProcessSample& best) {
  for (int run = 0; run < runs; ++run) {
    ProcessSample sample;
    if (!run_process(binary, row.args, sample) || (sample.exit_status != 0 && sample.exit_status != 3)) return false;
    if (run == 0 || sample.wall_ms < best.wall_ms) best = sample;
  }
  return true;
}

void print_table(const char* title, const std::vector<Row>& rows,
                 const std::vector<std::pair<std::string, std::string>>& binaries, int runs) {
  std::printf("\n%s\n%-38s %8s", title, "command", "goal s");
  for (const auto& binary : binaries) {
    std::printf(" | %-8s %7s %7s %7s", binary.first.c_str(), "wall s", "CPU s", "MiB");
  }
  std::printf(" | meets goal\n");
  for (const Row& row : rows) {
    std::printf("%-38s %8s", row.name.c_str(), row.goal_s > 0 ? std::to_string(row.goal_s).substr(0, 4).c_str() : "-");
    double last_wall_s = 0;
    bool last_failed = false;
    for (const auto& [label, binary] : binaries) {
      ProcessSample sample;
      last_failed = !measure(binary, row, runs, sample);
      if (last_failed) {
        std::printf(" | %-8s %23s", label.c_str(), "failed");
        continue;
      }
      last_wall_s = sample.wall_ms / 1000.0;
      std::printf(" | %-8s %7.3f %7.3f %7.0f", label.c_str(), last_wall_s, sample.cpu_s, sample.rss_mib);
    }
    if (row.goal_s <= 0) {
      std::printf(" | -\n");
    } else if (last_failed) {
      std::printf(" | no (the command failed)\n");  // a failed run meets no goal, however fast it failed
    } else {
      std::printf(" | %s (%.1fx the goal)\n", last_wall_s <= row.goal_s ? "yes" : "no", last_wall_s / row.goal_s);
    }
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 1;
  bool with_growth = true;
  std::vector<std::pair<std::string, std::string>> binaries;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--runs" && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--no-growth") {
      with_growth = false;
    } else if (arg.starts_with("-")) {
      std::fprintf(stderr, "planner_bench: unknown option '%s'\n", arg.c_str());
      binaries.clear();
      break;
    } else if (const auto equals = arg.find('='); equals != std::string::npos) {
      binaries.emplace_back(arg.substr(0, equals), arg.substr(equals + 1));
    } else {
      binaries.emplace_back(arg, arg);
    }
  }
  if (binaries.empty()) {
    std::fprintf(stderr, "usage: planner_bench [--runs N] [--no-growth] LABEL=BINARY [LABEL=BINARY ...]\n");
    return 2;
  }
  std::printf("planner_bench: fastest of %d run(s) per row; 'meets goal' reads the last binary's wall time\n", runs);
  print_table("The commands users run (issue 32's goals)", user_commands(), binaries, runs);
  if (with_growth) print_table("Growth: plan time by model and cluster size (H100-80GB)", growth(), binaries, runs);
  return 0;
}
