// Regression tests of issue 37 through the binary: a model with no block to wrap, --model values no file system takes,
// input files that are not regular or too large (refused before reading), and every echoed value clipped.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "case_skip.h"
#include "run_binary.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using shardplan_test::expect_input_error;
using shardplan_test::run_shardplan;
using shardplan_test::TempFile;
using Args = std::vector<std::string>;

// examples/models/whatif-explicit.json with its block layer changed by `change`.
std::string whatif_with(const std::function<void(json&)>& change) {
  std::ifstream stream("examples/models/whatif-explicit.json");
  json document = json::parse(stream);
  change(document["layers"][1]);
  return document.dump();
}

}  // namespace

TEST_CASE("input bounds: a model with no transformer block is refused by plan and capacity, not divided by") {
  // Reverted (no check in load_searchable_model): plan and capacity died of SIGFPE, exit 136.
  const TempFile blockless("blockless", whatif_with([](json& layer) {
                             layer["kind"] = "other";
                             layer["repeat"] = 1;
                           }));
  expect_input_error({"plan", "-m", blockless.path(), "-c", "8xH100-80GB"},
                     {blockless.path(), "no layer of kind 'transformer_block'", "plan searches"});
  expect_input_error({"capacity", "-m", blockless.path(), "--gpus", "H100-80GB"},
                     {"no layer of kind 'transformer_block'", "capacity searches"});
  // estimate takes it (nothing to search).
  CHECK(run_shardplan({"estimate", "-m", blockless.path(), "-c", "8xH100-80GB"}).exit_status == 0);
  // A layer without "kind" is refused, not taken for "other" (which made the reproducer blockless).
  const TempFile no_kind("no-kind", whatif_with([](json& layer) { layer.erase("kind"); }));
  expect_input_error({"plan", "-m", no_kind.path(), "-c", "2xcpu"},
                     {no_kind.path(), "missing field 'layers[1].kind'", "transformer_block"});
}

TEST_CASE("input bounds: --model values past NAME_MAX, with a BOM or a top-level array exit 2, not 1") {
  // Reverted (std::filesystem::is_regular_file's throwing overload): exit 1 "filesystem error: File name too long".
  const std::string long_name(300, 'x');
  const std::string line = expect_input_error({"estimate", "-m", long_name, "-c", "8xH100-80GB"},
                                              {"unknown model", "\u2026 (300 bytes)"});
  std::string llamas;
  for (int i = 0; i < 1000; ++i) llamas += "\U0001F999";
  expect_input_error({"estimate", "-m", llamas, "-c", "8xH100-80GB"}, {"unknown model", "(4000 bytes)"});
  expect_input_error({"estimate", "-m", "dir/" + long_name + ".json", "-c", "8xH100-80GB"},
                     {"\u2026 (309 bytes): cannot open file for reading"});
  // Inline JSON after a byte order mark is inline JSON; a top-level array is refused for what it is.
  const std::string bom = "\xEF\xBB\xBF";
  std::ifstream stream("examples/models/whatif-explicit.json");
  const std::string whatif((std::istreambuf_iterator<char>(stream)), std::istreambuf_iterator<char>());
  CHECK(run_shardplan({"estimate", "-m", bom + whatif, "-c", "8xH100-80GB"}).exit_status == 0);
  expect_input_error({"estimate", "-m", "[1, 2, 3]" + std::string(300, ' '), "-c", "8xH100-80GB"},
                     {"model (inline JSON)", "expected a JSON object, got [1,2,3]"});
  expect_input_error({"estimate", "-m", "gpt2", "-c", bom + "[]"}, {"cluster (inline JSON)", "a JSON object"});
  // A file with a byte order mark reads as JSON too (Windows editors write one).
  const TempFile with_bom("bom-model", bom + whatif);
  CHECK(run_shardplan({"estimate", "-m", with_bom.path(), "-c", "8xH100-80GB"}).exit_status == 0);
}

TEST_CASE("input bounds: a device, a FIFO or a file over its kind's bound is refused before reading, for every flag") {
  // Reverted (ifstream to the end): /dev/zero grew the process to gigabytes; a FIFO blocked or read as a preset name.
  const auto dir = shardplan_test::scratch("input-files");
  const std::string fifo = (dir / "in.fifo").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // 16 MiB + 1 byte: sparse, so making it costs nothing; refused by its size before a byte is read.
  const std::string large = (dir / "large.json").string();
  std::ofstream(large).close();
  fs::resize_file(large, (std::size_t{16} << 20) + 1);
  const auto started = std::chrono::steady_clock::now();
  expect_input_error({"estimate", "-c", "8xH100-80GB", "-m", "/dev/zero"},
                     {"/dev/zero: a character device, expected a regular file"});
  expect_input_error({"estimate", "-c", "8xH100-80GB", "-m", fifo}, {fifo + ": a FIFO, expected a regular file"});
  expect_input_error({"estimate", "-c", "8xH100-80GB", "-m", large},
                     {large + ": 16777217 bytes, expected at most 16 MiB"});
  for (const char* flag : {"--profile", "--catalog", "--plan"}) {
    CAPTURE(flag);
    expect_input_error({"simulate", "-m", "gpt2", "-c", "8xH100-80GB", flag, "/dev/zero"}, {"/dev/zero: a character"});
    expect_input_error({"simulate", "-m", "gpt2", "-c", "8xH100-80GB", flag, fifo}, {"a FIFO"});
    expect_input_error({"simulate", "-m", "gpt2", "-c", "8xH100-80GB", flag, large}, {"expected at most 16 MiB"});
  }
  expect_input_error({"estimate", "-m", "gpt2", "-c", "/dev/zero"}, {"/dev/zero: a character"});
  expect_input_error({"compare", "--predicted", "/dev/zero", "--measured", "/dev/zero"}, {"/dev/zero: a character"});
  expect_input_error({"compare", "--predicted", fifo, "--measured", fifo}, {"a FIFO"});
  expect_input_error({"calibrate", "--trace", "/dev/zero", "--out", (dir / "p.json").string()},
                     {"/dev/zero: a character"});
  // Refused before reading: at once (a bound, not a timing claim: /dev/zero never ended before).
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(30));
  fs::remove_all(dir);
}

TEST_CASE("input bounds: every value an error line echoes is clipped to 80 bytes and its size") {
  // Reverted (no clipping in Error::one_line): the line echoed the whole 100 KB GPU name and 5 MB JSON string.
  const std::string gpu(100000, 'G');
  const std::string line = expect_input_error({"estimate", "-m", "gpt2", "-c", "8x" + gpu}, {"(100000 bytes)"});
  CHECK(line.size() < 600);
  const TempFile unterminated("unterminated", R"({"name": ")" + std::string(5'000'000, 'a'));
  const std::string parse_line =
      expect_input_error({"estimate", "-m", unterminated.path(), "-c", "8xH100-80GB"},
                         {unterminated.path() + ":1:", "malformed JSON", "\u2026 ("});
  CHECK(parse_line.size() < 600);
  const std::string flag_line =
      expect_input_error({"estimate", "-m", "gpt2", "-c", "8xH100-80GB", "--seq-len", std::string(1000, '9')},
                         {"--seq-len", "(1000 bytes)"});
  CHECK(flag_line.size() < 600);
}

TEST_CASE("input bounds: `run` refuses a model whose states exceed the host's available memory, naming both"
          * doctest::test_suite("can-skip")) {
  if (!shardplan_test::mpi_build()) SKIP_CASE("this shardplan was built without MPI (`run` is missing)");
  // Reverted (no check_run_host_memory): std::bad_alloc (exit 1) or the OOM killer. llama3-70b's fp32 states and
  // AdamW are 1.03 TiB on one rank; a host with that much available memory would start training instead.
  expect_input_error({"run", "--device", "cpu", "-m", "examples/hf/llama3-70b.json", "--steps", "1"},
                     {"run: the model states of llama3-70b need 1.03 TiB per rank (1 rank on this host)",
                      "the host's available memory", "MemAvailable in /proc/meminfo"});
}

TEST_CASE("input bounds: a checkpoint file that is a directory is refused naming it" * doctest::test_suite("can-skip")) {
  if (!shardplan_test::mpi_build()) SKIP_CASE("this shardplan was built without MPI (`run` is missing)");
  const auto dir = shardplan_test::scratch("checkpoint-directory");
  const std::string checkpoints = (dir / "ck").string();
  const Args run = {"run", "--device", "cpu", "--steps", "1", "--checkpoint-dir", checkpoints, "--json"};
  REQUIRE(run_shardplan(run).exit_status == 0);
  std::ifstream latest_stream(fs::path(checkpoints) / "latest");
  std::string latest;
  std::getline(latest_stream, latest);
  const fs::path shard = fs::path(checkpoints) / latest / "rank-0.bin";
  REQUIRE(fs::exists(shard));
  fs::remove(shard);
  fs::create_directory(shard);
  // Reverted (ifstream on it): "basic_filebuf::underflow error reading the file", without the file's name.
  Args resume = run;
  resume[4] = "2";
  resume.push_back("--resume");
  expect_input_error(resume, {shard.string() + ": a directory, expected a checkpoint file"});
  fs::remove_all(dir);
}

TEST_CASE("input bounds: under mpirun a set-up error is printed once, not once per rank"
          * doctest::test_suite("can-skip")) {
  if (const std::string why = shardplan_test::mpirun_missing(); !why.empty()) SKIP_CASE(why);
  // Reverted (every rank printed, Note [Set-up errors once]): two identical lines from -np 2.
  const auto dir = shardplan_test::scratch("errors-once");
  const auto lines_of = [&](const Args& extra) {
    Args args = {"--oversubscribe", "-np", "2", shardplan_test::shardplan_binary(), "run", "--device", "cpu"};
    args.insert(args.end(), extra.begin(), extra.end());
    const shardplan_test::RunResult result = shardplan_test::run_program("mpirun", args);
    INFO("stderr: " << result.err);
    CHECK(result.exit_status == 2);
    std::size_t count = 0;
    for (const std::string& line : result.err_lines()) count += line.starts_with("shardplan: error: ");
    return count;
  };
  CHECK(lines_of({"--trace", dir.string()}) == 1);                          // refused as it is parsed
  CHECK(lines_of({"-m", "examples/hf/llama3-70b.json", "--steps", "1"}) == 1);  // refused in set-up, agreed
  fs::remove_all(dir);
}
