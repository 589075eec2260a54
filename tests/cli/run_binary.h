// Runs the built `shardplan` binary (path from $SHARDPLAN_BIN) with given arguments, capturing stdout, stderr and status.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

extern char** environ;

namespace shardplan_test {

struct RunResult {
  int exit_status = -1;  // the process's exit status; 128 + signal number when a signal killed it
  std::string out;       // stdout
  std::string err;       // stderr

  // Lines of stderr (a trailing newline ends the last line; it does not start an empty one).
  std::vector<std::string> err_lines() const {
    std::vector<std::string> lines;
    std::istringstream stream(err);
    for (std::string line; std::getline(stream, line);) lines.push_back(line);
    return lines;
  }
};

// A file under the temp directory, unique per process and per instance, removed on destruction.
class TempFile {
 public:
  explicit TempFile(const std::string& stem, const std::string& contents = "", const std::string& extension = ".json") {
    static int counter = 0;
    path_ = (std::filesystem::temp_directory_path() /
             (stem + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + extension))
                .string();
    std::ofstream(path_, std::ios::binary) << contents;
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  const std::string& path() const { return path_; }
  std::string contents() const {
    std::ifstream stream(path_, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>());
  }

 private:
  std::string path_;
};

inline std::string shardplan_binary() {
  const char* path = std::getenv("SHARDPLAN_BIN");
  REQUIRE_MESSAGE(path != nullptr, "SHARDPLAN_BIN is not set (meson test sets it to build/shardplan)");
  return path;
}

// Runs `binary` (a path, or a name looked up on PATH) with `args` (no shell: arguments pass through byte for byte),
// stdout and stderr redirected to separate temp files, stdin from /dev/null.
inline RunResult run_program(const std::string& binary, const std::vector<std::string>& args) {
  const TempFile out_file("shardplan-cli-out", "", ".txt");
  const TempFile err_file("shardplan-cli-err", "", ".txt");

  std::vector<std::string> argv_storage;
  argv_storage.push_back(binary);
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& arg : argv_storage) argv.push_back(arg.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_file.path().c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, 2, err_file.path().c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = 0;
  const int spawn_error = posix_spawnp(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE_MESSAGE(spawn_error == 0, "cannot start " << binary << ": errno " << spawn_error);

  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    REQUIRE_MESSAGE(errno == EINTR, "waitpid failed: errno " << errno);
  }
  RunResult result;
  if (WIFEXITED(status)) {
    result.exit_status = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.exit_status = 128 + WTERMSIG(status);
  }
  result.out = out_file.contents();
  result.err = err_file.contents();
  return result;
}

// Runs the shardplan binary under test (SHARDPLAN_BIN).
inline RunResult run_shardplan(const std::vector<std::string>& args) { return run_program(shardplan_binary(), args); }

// True when this shardplan has `run` (built with MPI); --bench needs the same executor.
inline bool mpi_build() { return run_shardplan({"run", "--help"}).exit_status == 0; }
// The contract for input errors: status 2, nothing on stdout, exactly one stderr line "shardplan: error: ...",
// containing every one of `expected`. Returns the line for further checks.
inline std::string expect_input_error(const std::vector<std::string>& args,
                                      const std::vector<std::string>& expected) {
  std::string command;
  for (const auto& arg : args) command += " '" + arg + "'";
  INFO("shardplan" << command);
  const RunResult result = run_shardplan(args);
  INFO("stdout: " << result.out);
  INFO("stderr: " << result.err);
  CHECK(result.exit_status == 2);
  CHECK(result.out.empty());
  const auto lines = result.err_lines();
  CHECK(lines.size() == 1);
  CHECK(result.err.ends_with("\n"));
  if (lines.empty()) return "";
  const std::string& line = lines.front();
  CHECK(line.starts_with("shardplan: error: "));
  for (const auto& part : expected) {
    CAPTURE(part);
    CHECK(line.find(part) != std::string::npos);
  }
  return line;
}


// Why a test that needs mpirun cannot run here, or "" when it can; when it can, lets Open MPI run as root, as CI does
// (the developers' guide: OMPI_ALLOW_RUN_AS_ROOT and its confirmation). Use as
// `if (const std::string why = mpirun_missing(); !why.empty()) SKIP_CASE(why);`.
inline std::string mpirun_missing() {
  if (!mpi_build()) return "this shardplan was built without MPI (`run` is missing)";
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) return "mpirun is not on PATH";
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  return "";
}

// Whether `text` holds `part` anywhere (the exports' and outputs' checks).
inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A whole file's bytes, "" when it cannot be read.
inline std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream stream(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>());
}

// A fresh, empty directory for one test's output files, named for the test and this process.
inline std::filesystem::path scratch(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("shardplan-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace shardplan_test
