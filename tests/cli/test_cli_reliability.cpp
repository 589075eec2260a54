// Regression tests of issue 20 through the binary: crashes, exit-1s and nonsense for bad input, unbounded requests,
// and output files (checked before the work, never a device or FIFO replaced, nothing left by a failing command).
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_binary.h"
#include "case_skip.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using shardplan_test::RunResult;
using shardplan_test::run_shardplan;
using shardplan_test::TempFile;
using Args = std::vector<std::string>;
using shardplan_test::expect_input_error;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A fresh directory under the temp directory, removed with everything in it at the end of the test.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name)
      : path_(fs::temp_directory_path() / ("shardplan-" + name + "-" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(path_)) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  fs::path path_;
};

std::string read_file(const std::string& path) {
  std::ifstream stream(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>());
}

Args plan_args(const Args& extra) {
  Args args = {"plan", "-m", "tiny-llama", "-c", "2xcpu", "--seq-len", "64"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

}  // namespace

TEST_CASE("reliability: JSON nested 100,000 deep exits 2 naming line:column, not 139") {
  // Reverted (no depth limit): exit 139, the error path's dump overflowed the stack.
  const TempFile deep("deep-model", R"({"name": "m", "architecture": {"vocab_size": )" + std::string(100000, '[') +
                                        std::string(100000, ']') + "}}");
  expect_input_error({"estimate", "-m", deep.path(), "-c", "8xH100-80GB"},
                     {deep.path() + ":1:", "JSON nested too deep", "128"});
}

TEST_CASE("reliability: flags out of their range exit 2 naming the range") {
  // Reverted (no range validators): each of these ran and printed nonsense or wrapped, exit 0.
  const Args estimate = {"estimate", "-m", "gpt2", "-c", "8xH100-80GB"};
  const auto with = [&](const Args& extra) {
    Args args = estimate;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  expect_input_error(with({"--price", "NaN"}), {"--price", "a finite number in [0, 1e+06]", "'NaN'"});
  expect_input_error(with({"--price", "1e308"}), {"--price"});
  expect_input_error(with({"--seq-len", "0"}), {"--seq-len", "an integer in 1..16777216", "'0'"});
  expect_input_error(plan_args({"--memory-cap", "0"}), {"--memory-cap", "a finite number"});
  expect_input_error(plan_args({"--memory-cap", "NaN"}), {"--memory-cap"});
  expect_input_error({"capacity", "-m", "gpt2", "--tokens", "inf"}, {"--tokens", "[1, 1e+18]", "'inf'"});
  expect_input_error({"capacity", "-m", "gpt2", "--max-gpus", "4294967297"}, {"--max-gpus", "1..1000000"});
  // A sweep with nothing in it is a mistake, not an empty table (both once printed "swept 0 configurations", exit 0).
  expect_input_error({"capacity", "-m", "gpt2", "--min-gpus", "16", "--max-gpus", "8"},
                     {"--min-gpus 16", "at most --max-gpus 8"});
  expect_input_error({"capacity", "-m", "gpt2", "--gpus", "H100-80GB", "--min-gpus", "3", "--max-gpus", "3"},
                     {"--min-gpus 3 --max-gpus 3", "no GPU count to sweep"});
}

TEST_CASE("reliability: a request whose work is unbounded is refused at once, naming the limit") {
  // Reverted (no step-work limit): bad_alloc after 13.5 s at 2.2 GB, and after 4 s for capacity.
  const auto started = std::chrono::steady_clock::now();
  expect_input_error({"estimate", "-m", "llama3-8b", "-c", "8xH100-80GB", "--global-batch", "1000000000"},
                     {"--global-batch 1000000000", "micro-batches per step", "at most 131072"});
  expect_input_error({"capacity", "-m", "llama3-8b", "--global-batch-tokens", "1000000000"},
                     {"capacity at 1 x", "expected at most 8192", "--min-gpus"});
  const TempFile plan("huge-accumulation", R"({"schema": "shardplan.plan/v1", "training": {"seq_len": 64,
      "grad_accumulation_steps": 1000000000}, "units": [{"root": true}]})");
  expect_input_error({"simulate", "-m", "tiny-llama", "-c", "2xcpu", "--plan", plan.path()},
                     {"grad_accumulation_steps", "1..131072"});
  // Refused before any work: well under a second each (a limit, not a timing claim: 10 s is the issue's line).
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(10));
}

TEST_CASE("reliability: capacity --profile with a mistyped device exits 2 like simulate does") {
  // Reverted (document.value("device", ...)): nlohmann's type_error, exit 1.
  const TempFile profile("device-5", R"({"schema": "shardplan.profile/v1", "device": 5})");
  expect_input_error({"capacity", "-m", "gpt2", "--gpus", "H100-80GB", "--profile", profile.path()},
                     {profile.path(), "field 'device'", "a non-empty string"});
}

TEST_CASE("reliability: outputs naming a device, FIFO or directory are refused before any work") {
  ScratchDir dir("outputs-special");
  // Before the fix, as root, `--out /dev/null` replaced /dev/null with a regular file. The test uses a device node
  // of its own (/dev/null's numbers, in its scratch directory), so a binary with the defect breaks nothing else.
  const std::string device = dir.file("null-device");
  if (::mknod(device.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {
    expect_input_error(plan_args({"--out", device}), {"--out", "'" + device + "'", "not a regular file"});
    struct stat info {};
    REQUIRE(::stat(device.c_str(), &info) == 0);
    CHECK(S_ISCHR(info.st_mode));
    fs::remove(device);
  } else {
    MESSAGE("device part skipped: mknod needs root (errno " << errno << ")");
  }
  const std::string fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  expect_input_error({"simulate", "-m", "tiny-llama", "-c", "2xcpu", "--trace", fifo}, {"--trace", "FIFO"});
  expect_input_error({"simulate", "-m", "tiny-llama", "-c", "2xcpu", "--report", dir.file("")}, {"--report"});
  expect_input_error(plan_args({"--out", ""}), {"--out", "expected a file name"});
  // Under a regular file no directory can be created: found before the search, not after.
  const TempFile regular("regular", "x", ".txt");
  expect_input_error(plan_args({"--report", regular.path() + "/r.html"}), {"--report", "not a directory"});
  CHECK(dir.entries() == std::vector<std::string>{"fifo"});
}

TEST_CASE("reliability: a failing command leaves none of its outputs, and old ones intact") {
  ScratchDir dir("outputs-failing");
  const std::string plan_file = dir.file("P.json"), trace_file = dir.file("T.json");
  const TempFile regular("not-a-dir", "x", ".txt");
  // Before the fix P.json was left although the command exited 2. Reverted (no parse-time check of --report): the
  // error came only after the search, from the writing, and named no flag (write_output_files still left nothing:
  // test_output_files.cpp reverts that part).
  expect_input_error(plan_args({"--out", plan_file, "--report", regular.path() + "/r.html"}), {"--report"});
  expect_input_error({"simulate", "-m", "tiny-llama", "-c", "2xcpu", "--trace", trace_file, "--report",
                      regular.path() + "/r.html"},
                     {"--report"});
  CHECK(dir.entries().empty());
  // An existing output survives a failed run untouched; a run that fails the search (exit 3) writes nothing either.
  { std::ofstream(plan_file) << "old"; }
  const RunResult infeasible = run_shardplan(plan_args({"--memory-cap", "0.001", "--out", plan_file}));
  CHECK(infeasible.exit_status == 3);
  CHECK(read_file(plan_file) == "old");
  expect_input_error(plan_args({"--out", plan_file, "--trace", plan_file}), {"the same file as --out"});
  CHECK(read_file(plan_file) == "old");
  CHECK(dir.entries() == std::vector<std::string>{"P.json"});
}

TEST_CASE("reliability: outputs create missing directories, write through symlinks, and clear stale temporaries") {
  ScratchDir dir("outputs-ok");
  const std::string nested = dir.file("a/b/P.json");
  const RunResult created = run_shardplan(plan_args({"--out", nested}));
  INFO(created.err);
  REQUIRE(created.exit_status == 0);
  CHECK(json::parse(read_file(nested)).at("schema") == "shardplan.plan/v1");
  // A symbolic link to an existing file is written through: the link stays a link, its target gets the file (a
  // dangling one is refused: test_output_files.cpp).
  const std::string target = dir.file("target.json"), link = dir.file("link.json");
  { std::ofstream(target) << "old"; }
  fs::create_symlink(target, link);
  REQUIRE(run_shardplan(plan_args({"--out", link})).exit_status == 0);
  CHECK(fs::is_symlink(link));
  CHECK(json::parse(read_file(target)).at("schema") == "shardplan.plan/v1");
  // A temporary of a writer that was killed (pid 999999999 never runs) goes; nothing else is touched.
  const std::string stale = dir.file("P.json.tmp.999999999"), other = dir.file("P.json.tmp.notapid");
  { std::ofstream(stale) << "half"; }
  { std::ofstream(other) << "keep"; }
  REQUIRE(run_shardplan(plan_args({"--out", dir.file("P.json")})).exit_status == 0);
  CHECK_FALSE(fs::exists(stale));
  CHECK(fs::exists(other));
  CHECK(dir.entries() == std::vector<std::string>{"P.json", "P.json.tmp.notapid", "a", "link.json", "target.json"});
}

TEST_CASE("reliability: run's output targets are refused before MPI starts, not after training") {
  if (run_shardplan({"run", "--help"}).exit_status != 0) {
    MESSAGE("skipped: this shardplan was built without MPI (no `run`)");
    return;
  }
  // Reverted (no output checks on run's flags): found only after training, then MPI_Abort, exit 1.
  expect_input_error({"run", "--steps", "1", "--checkpoint-dir", "/proc/x"}, {"--checkpoint-dir", "'/proc/x'"});
  const TempFile regular("run-trace-parent", "x", ".txt");
  expect_input_error({"run", "--steps", "1", "--trace", regular.path() + "/t.json"}, {"--trace", "not a directory"});
  expect_input_error({"run", "--steps", "0"}, {"--steps", "1..1000000"});
  // Found by scripts/fuzz-cli: 1e-300 was accepted, fired on the first normal step and exited 1.
  expect_input_error({"run", "--watchdog-timeout", "1e-300"}, {"--watchdog-timeout", "0 (no watchdog) or"});
  // Found by scripts/fuzz-cli (input 7341 of seed 20): the trace named the checkpoint directory itself; the
  // checkpoint made it a directory and the trace's write aborted the job after training (exit 4). Reverted: exit 4.
  const ScratchDir scratch("run-trace-in-checkpoint");
  const std::string checkpoint = scratch.file("ck");
  expect_input_error({"run", "--steps", "1", "--checkpoint-dir", checkpoint, "--trace", checkpoint},
                     {"--trace", "lies in --checkpoint-dir", "expected a file outside the checkpoint directory"});
  expect_input_error({"run", "--steps", "1", "--checkpoint-dir", checkpoint, "--trace", checkpoint + "/step-1/t.json"},
                     {"--trace", "lies in --checkpoint-dir"});
  CHECK_FALSE(fs::exists(checkpoint));  // refused before anything was written
}

TEST_CASE("reliability: a resume that does not match names the differing setting once, from rank 0") {
  if (const std::string why = shardplan_test::mpirun_missing(); !why.empty()) SKIP_CASE(why);
  ScratchDir dir("resume-mismatch");
  const std::string checkpoints = dir.file("ck");
  const auto run = [&](const Args& extra) {
    Args args = {"--oversubscribe", "-np", "2", shardplan_test::shardplan_binary(), "run", "--device", "cpu",
                 "--checkpoint-dir", checkpoints};
    args.insert(args.end(), extra.begin(), extra.end());
    return shardplan_test::run_program("mpirun", args);
  };
  const RunResult first = run({"--steps", "2"});
  INFO(first.err);
  REQUIRE(first.exit_status == 0);
  const auto error_lines = [](const RunResult& result) {
    std::vector<std::string> lines;
    for (const auto& line : result.err_lines()) {
      if (line.starts_with("shardplan: error: ")) lines.push_back(line);
    }
    return lines;
  };
  // Reverted (fingerprint only, every rank printing): "model 'tiny-llama', plan 'default' differ from this run's
  // model 'tiny-llama', plan 'default'", twice, interleaved; another --data was accepted silently.
  const RunResult micro_batch = run({"--steps", "4", "--resume", "--micro-batch", "2"});
  INFO("micro-batch run's stderr: " << micro_batch.err);
  CHECK(micro_batch.exit_status == 2);
  const auto micro_lines = error_lines(micro_batch);
  REQUIRE(micro_lines.size() == 1);
  CHECK(contains(micro_lines.front(), "written with --micro-batch 1, this run has --micro-batch 2"));
  const RunResult seq_len = run({"--steps", "4", "--resume", "--seq-len", "32"});
  INFO("seq-len run's stderr: " << seq_len.err);
  REQUIRE(error_lines(seq_len).size() == 1);
  CHECK(contains(error_lines(seq_len).front(), "written with --seq-len 64, this run has --seq-len 32"));
  const TempFile other_data("other-data", std::string(4096, 'x'), ".txt");
  const RunResult data = run({"--steps", "4", "--resume", "--data", other_data.path()});
  INFO("data run's exit status " << data.exit_status << ", stderr: " << data.err);
  REQUIRE(error_lines(data).size() == 1);
  CHECK(contains(error_lines(data).front(), "written from data file '/usr/share/common-licenses/GPL-3'"));
  CHECK(contains(error_lines(data).front(), "this run reads '" + other_data.path() + "' (4096 bytes, fnv1a64 "));
  const RunResult resumed = run({"--steps", "3", "--resume"});
  CHECK(resumed.exit_status == 0);
  for (const auto& entry : fs::recursive_directory_iterator(checkpoints)) {
    CHECK(!contains(entry.path().filename().string(), ".tmp."));
  }
}
