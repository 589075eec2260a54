// Tests of the step watchdog (Note [Step watchdog]) through the binary: `mpirun -np 3 run` with one rank stopped
// mid-run exits non-zero within the timeout, each surviving rank naming itself, the step and what it waits on.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "run_binary.h"
#include "case_skip.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string read_file(const std::string& path) {
  std::ifstream stream(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>());
}

// The parent pid of `pid`, from /proc/<pid>/stat (field 4, after the parenthesised command name).
std::optional<pid_t> parent_of(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  char state = 0;
  int parent = 0;
  if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &parent) != 2) return std::nullopt;
  return parent;
}

// The process of MPI rank `rank` started by our mpirun `launcher` (a descendant of it: other engineers' jobs on the
// same machine are never touched), found by its OMPI_COMM_WORLD_RANK.
std::optional<pid_t> rank_process(pid_t launcher, int rank) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(std::stol(name));
    bool ours = false;
    for (std::optional<pid_t> at = pid; at && *at > 1; at = parent_of(*at)) ours = ours || *at == launcher;
    if (!ours || pid == launcher) continue;
    std::string environment = read_file("/proc/" + name + "/environ");
    for (char& c : environment) c = c == '\0' ? '\n' : c;
    if (("\n" + environment).find("\nOMPI_COMM_WORLD_RANK=" + std::to_string(rank) + "\n") != std::string::npos) {
      return pid;
    }
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("watchdog: mpirun -np 3 with one rank stopped mid-run exits non-zero within the timeout, naming the op") {
  if (const std::string why = shardplan_test::mpirun_missing(); !why.empty()) SKIP_CASE(why);
  const shardplan_test::TempFile out("watchdog-out", "", ".txt"), err("watchdog-err", "", ".txt");
  constexpr double kTimeoutS = 3;
  const std::vector<std::string> args = {"mpirun", "--oversubscribe", "-np", "3",
                                         shardplan_test::shardplan_binary(), "run", "--device", "cpu",
                                         "--steps", "1000000", "--watchdog-timeout", "3"};
  std::vector<char*> argv;
  std::vector<std::string> storage = args;
  for (auto& arg : storage) argv.push_back(arg.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out.path().c_str(), O_WRONLY | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, 2, err.path().c_str(), O_WRONLY | O_TRUNC, 0600);
  pid_t launcher = 0;
  REQUIRE(posix_spawnp(&launcher, "mpirun", &actions, nullptr, argv.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&actions);

  // Training is under way once rank 0 printed a few steps; then stop rank 1 between two of its collectives.
  const auto started = Clock::now();
  while (read_file(out.path()).find("step 3:") == std::string::npos &&
         Clock::now() - started < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::optional<pid_t> stopped = rank_process(launcher, 1);
  REQUIRE_MESSAGE(stopped.has_value(), "rank 1 not found; stdout: " << read_file(out.path()));
  REQUIRE(::kill(*stopped, SIGSTOP) == 0);
  const auto stopped_at = Clock::now();

  // Reverted (no watchdog, --watchdog-timeout 0): the job never ended; ranks 0 and 2 spun at 100% CPU. 60 s bounds
  // this test's wait, far past the 3 s timeout and mpirun's tear-down.
  int status = 0;
  bool exited = false;
  while (Clock::now() - stopped_at < std::chrono::seconds(60)) {
    if (::waitpid(launcher, &status, WNOHANG) == launcher) {
      exited = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double took_s = std::chrono::duration<double>(Clock::now() - stopped_at).count();
  if (!exited) {
    ::kill(launcher, SIGKILL);
    ::waitpid(launcher, &status, 0);
  }
  ::kill(*stopped, SIGKILL);  // mpirun kills it too; a stopped process dies of SIGKILL, never of SIGTERM alone
  const std::string errors = read_file(err.path());
  INFO("stderr: " << errors);
  REQUIRE(exited);
  CHECK(WIFEXITED(status));
  // Note [Aborted status]: its own status. Reverted (MPI_Abort with 1): the status of an internal error.
  CHECK(WEXITSTATUS(status) == 4);
  MESSAGE("the job ended " << took_s << " s after rank 1 was stopped (timeout " << kTimeoutS << " s)");
  CHECK(took_s >= kTimeoutS - 1.0);  // a step is far shorter than the timeout: it is the watchdog that fired
  CHECK(took_s < kTimeoutS + 30);
  // A surviving rank says who it is, which step and what it waits on (a collective over all three ranks).
  const bool rank0 = errors.find("shardplan: watchdog: rank 0: step ") != std::string::npos;
  const bool rank2 = errors.find("shardplan: watchdog: rank 2: step ") != std::string::npos;
  CHECK((rank0 || rank2));
  CHECK(errors.find("shardplan: watchdog: rank 1:") == std::string::npos);
  CHECK(errors.find(" on ") != std::string::npos);
  CHECK(errors.find("over ranks 0,1,2") != std::string::npos);
  CHECK(errors.find("a peer rank is stopped, hung or dead") != std::string::npos);
}
