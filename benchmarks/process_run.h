// One run of another program for the table benchmarks: wall time, CPU time and peak resident memory, by fork and exec
// with stdout and stderr to /dev/null.
#pragma once

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

namespace shardplan::bench {

struct ProcessSample {
  double rss_mib = 0;
  double wall_ms = 0;
  double cpu_s = 0;  // user + system, the child's
  int exit_status = -1;
};

// True when the program ran and exited with a status (in sample.exit_status); wait4's ru_maxrss also counts the
// child's memory before exec, which is the caller's (a small table program).
inline bool run_process(const std::string& binary, const std::vector<std::string>& args, ProcessSample& sample) {
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
  const auto seconds = [](const timeval& time) { return static_cast<double>(time.tv_sec) + 1e-6 * time.tv_usec; };
  sample.cpu_s = seconds(usage.ru_utime) + seconds(usage.ru_stime);
  if (!WIFEXITED(status)) return false;
  sample.exit_status = WEXITSTATUS(status);
  return true;
}

}  // namespace shardplan::bench
