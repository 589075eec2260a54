// startup_bench: start-up cost of shardplan binaries — peak resident memory and wall time of `--help`, `models` and
// `estimate`, the median of N runs each, as one table. Note [GPU plugin] in cli/gpu_executor.h says why the planning
// binary loads no CUDA library; compare a binary from before that change:
//   build/benchmarks/startup_bench before=/tmp/before/shardplan after=build/shardplan
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace {

struct Sample {
  double rss_mib = 0;
  double wall_ms = 0;
};

// One run, by fork and exec from this small process: wait4's ru_maxrss also counts the child's memory before exec,
// which is this program's (shown as the floor below), not a Python interpreter's.
bool run_once(const std::string& binary, const std::vector<std::string>& args, Sample& sample) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  const auto started = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execv(binary.c_str(), argv.data());
    ::_exit(127);
  }
  int status = 0;
  rusage usage{};
  if (::wait4(pid, &status, 0, &usage) != pid) return false;
  sample.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  sample.rss_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

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
      Sample sample;
      if (!run_once(binary, args, sample)) {  // also warms the page cache
        std::fprintf(stderr, "startup_bench: %s %s failed\n", binary.c_str(), name.c_str());
        return 1;
      }
      std::vector<double> rss, wall;
      for (int run = 0; run < runs; ++run) {
        if (!run_once(binary, args, sample)) return 1;
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
