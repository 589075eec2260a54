// startup_bench: start-up cost of shardplan binaries — peak resident memory and wall time of `--help`, `models` and
// `estimate`, the median of N runs each, as one table. Note [GPU plugin] in cli/gpu_executor.h says why the planning
// binary loads no CUDA library; compare a binary from before that change:
//   build/benchmarks/startup_bench before=/tmp/before/shardplan after=build/shardplan
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "process_run.h"

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 20;
  std::vector<std::pair<std::string, std::string>> binaries;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--runs" && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (const auto equals = arg.find('='); equals != std::string::npos) {
      binaries.emplace_back(arg.substr(0, equals), arg.substr(equals + 1));
    } else {
      binaries.emplace_back(arg, arg);
    }
  }
  if (binaries.empty()) {
    std::fprintf(stderr, "usage: startup_bench [--runs N] LABEL=BINARY [LABEL=BINARY ...]\n");
    return 2;
  }
  const std::vector<std::pair<std::string, std::vector<std::string>>> commands = {
      {"--help", {"--help"}},
      {"models", {"models"}},
      {"estimate", {"estimate", "--model", "llama3-8b", "--cluster", "8xH100-80GB"}},
  };
  std::printf("%-10s %-10s %13s %17s %14s\n", "binary", "command", "peak RSS MiB", "wall ms (median)",
              "wall ms (min)");
  for (const auto& [label, binary] : binaries) {
    for (const auto& [name, args] : commands) {
      shardplan::bench::ProcessSample sample;
      if (!shardplan::bench::run_process(binary, args, sample) || sample.exit_status != 0) {  // also warms the page cache
        std::fprintf(stderr, "startup_bench: %s %s failed\n", binary.c_str(), name.c_str());
        return 1;
      }
      std::vector<double> rss, wall;
      for (int run = 0; run < runs; ++run) {
        if (!shardplan::bench::run_process(binary, args, sample) || sample.exit_status != 0) return 1;
        rss.push_back(sample.rss_mib);
        wall.push_back(sample.wall_ms);
      }
      std::printf("%-10s %-10s %13.1f %17.1f %14.1f\n", label.c_str(), name.c_str(), median(rss), median(wall),
                  *std::min_element(wall.begin(), wall.end()));
    }
  }
  rusage self{};
  ::getrusage(RUSAGE_SELF, &self);
  std::printf("(%d runs each; estimate: llama3-8b on 8xH100-80GB; RSS floor, this program's own: %.1f MiB)\n", runs,
              static_cast<double>(self.ru_maxrss) / 1024.0);
  return 0;
}
