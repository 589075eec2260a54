// Tests of `shardplan calibrate --bench` through the binary: the nccl-tests-like table under mpirun, the profile it
// writes (fits per collective × group size with residuals, raw samples, machine, date), `simulate --profile` taking
// that profile, the single-process run without collectives, and one-line exit-2 errors for bad flag combinations.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "case_skip.h"
#include "run_binary.h"

namespace {

using nlohmann::json;
using shardplan_test::RunResult;
using shardplan_test::run_program;
using shardplan_test::run_shardplan;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> words_of(const std::string& line) {
  std::vector<std::string> words;
  std::istringstream stream(line);
  for (std::string word; stream >> word;) words.push_back(word);
  return words;
}

bool is_collective(const std::string& word) {
  return word == "all_gather" || word == "reduce_scatter" || word == "all_reduce";
}

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& stem)
      : path(std::filesystem::temp_directory_path() / (stem + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

}  // namespace

TEST_CASE("`calibrate --bench` under mpirun -np 2: nccl-tests table, kernel table, fits, and a profile simulate takes"
          * doctest::test_suite("can-skip")) {
  if (const std::string why = shardplan_test::mpirun_missing(); !why.empty()) SKIP_CASE(why);
  const TempDir dir("shardplan-bench");
  const std::string profile = (dir.path / "p.json").string();
  const RunResult bench =
      run_program("mpirun", {"-np", "2", "--oversubscribe", shardplan_test::shardplan_binary(), "calibrate", "--bench",
                             "--max-bytes", "65536", "--iters", "3", "--out", profile});
  INFO(bench.out);
  INFO(bench.err);
  REQUIRE(bench.exit_status == 0);

  // The collective table: nccl-tests' columns, one row per collective × size (1 KiB … 64 KiB, ×2: 7 sizes) at 2 ranks.
  const auto lines = lines_of(bench.out);
  bool header = false, in_table = false;
  int rows = 0;
  for (const auto& line : lines) {
    if (line.find("collective") != std::string::npos && line.find("size(B)") != std::string::npos) {
      header = line.find("ranks") != std::string::npos && line.find("count(elems)") != std::string::npos &&
               line.find("time(us)") != std::string::npos && line.find("algbw(GB/s)") != std::string::npos &&
               line.find("busbw(GB/s)") != std::string::npos;
      in_table = true;
      continue;
    }
    if (line.starts_with("#")) in_table = false;  // the table ends where the next section's comments start
    const auto words = words_of(line);
    if (!in_table) continue;
    REQUIRE(words.size() == 8);
    REQUIRE(is_collective(words[0]));
    ++rows;
    CHECK(words[1] == "2");
    CHECK(words[2] == "intra");
    const long long bytes = std::stoll(words[3]), count = std::stoll(words[4]);
    CHECK(bytes >= 1024);
    CHECK(bytes <= 65536);
    CHECK(count * 4 == bytes);
    CHECK(std::stod(words[5]) > 0);  // time(us)
    // busbw = algbw × (n−1)/n or × 2(n−1)/n at n = 2: ½ or 1 (nccl-tests doc/PERFORMANCE.md); 3 decimals printed.
    const double algbw = std::stod(words[6]), busbw = std::stod(words[7]);
    const double factor = words[0] == "all_reduce" ? 1.0 : 0.5;
    CHECK(busbw == doctest::Approx(algbw * factor).epsilon(0.01).scale(0.002));
  }
  CHECK(header);
  CHECK(rows == 21);
  // The kernel table and the fits.
  CHECK(bench.out.find("transformer_block fwd") != std::string::npos);
  CHECK(bench.out.find("transformer_block bwd") != std::string::npos);
  CHECK(bench.out.find("gemm ") != std::string::npos);
  CHECK(bench.out.find("adamw step") != std::string::npos);
  CHECK(bench.out.find("alpha(us)") != std::string::npos);
  CHECK(bench.out.find("f_half") != std::string::npos);

  // The profile: schema, fits per collective × group size with residuals, raw samples, machine, date.
  std::ifstream profile_stream(profile);
  REQUIRE(profile_stream.good());
  const json document = json::parse(profile_stream);
  CHECK(document.at("schema") == "shardplan.profile/v1");
  const auto& cells = document.at("fits").at("collectives");
  REQUIRE(cells.size() == 3);
  for (const auto& cell : cells) {
    CHECK(is_collective(cell.at("collective").get<std::string>()));
    CHECK(cell.at("ranks") == 2);
    CHECK(cell.at("spans_nodes") == false);
    CHECK(cell.at("samples") == 7);
    CHECK(cell.at("bus_bytes_per_s").get<double>() > 0);
    CHECK(cell.at("rms_relative_residual").get<double>() >= 0);
    CHECK(cell.at("max_relative_residual").get<double>() >= cell.at("rms_relative_residual").get<double>());
  }
  CHECK(document.at("fits").at("intra_node").at("samples") == 21);
  CHECK(document.at("fits").at("compute").at("per_s").get<double>() > 0);
  CHECK(document.at("fits").at("memory").at("per_s").get<double>() > 0);
  CHECK(document.at("samples").at("collectives").size() == 21);
  CHECK(document.at("samples").at("collectives")[0].contains("relative_residual"));
  CHECK(!document.at("samples").at("compute").empty());
  CHECK(!document.at("samples").at("gemm").empty());
  CHECK(!document.at("samples").at("memory").empty());
  CHECK(!document.at("machine").at("host").get<std::string>().empty());
  CHECK(document.at("machine").at("ranks") == 2);
  CHECK(document.at("machine").at("nodes") == 1);
  CHECK(document.at("date").get<std::string>().size() == 20);  // 2026-11-29T10:00:00Z
  // Only the profile is left behind (written to a temporary and renamed).
  int files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir.path)) ++files;
  CHECK(files == 1);

  // `simulate --profile` accepts it and its numbers change the prediction.
  const std::vector<std::string> simulate = {"simulate", "-m", "tiny-llama", "-c", "2xcpu", "--plan",
                                             "examples/plans/tiny-llama-per-block.json", "--json"};
  std::vector<std::string> with_profile = simulate;
  with_profile.insert(with_profile.end(), {"--profile", profile});
  const RunResult calibrated = run_shardplan(with_profile);
  INFO(calibrated.err);
  REQUIRE(calibrated.exit_status == 0);
  const RunResult catalog = run_shardplan(simulate);
  REQUIRE(catalog.exit_status == 0);
  CHECK(json::parse(calibrated.out) != json::parse(catalog.out));
}

TEST_CASE("`calibrate --bench` in a single process skips collectives with a note and still times the kernels"
          * doctest::test_suite("can-skip")) {
  if (!shardplan_test::mpi_build()) SKIP_CASE("this shardplan was built without MPI (`calibrate --bench` is missing)");
  const TempDir dir("shardplan-bench-1");
  const std::string profile = (dir.path / "p1.json").string();
  const RunResult single =
      run_shardplan({"calibrate", "--bench", "--iters", "1", "--warmup-iters", "0", "--out", profile, "--json"});
  INFO(single.err);
  REQUIRE(single.exit_status == 0);
  const json document = json::parse(single.out);
  CHECK(document.at("fits").at("collectives").empty());
  CHECK(document.at("samples").at("collectives").empty());
  CHECK(document.at("fits").at("compute").at("samples").get<int>() > 0);
  CHECK(document.at("machine").at("ranks") == 1);
  CHECK(std::filesystem::exists(profile));
  const RunResult table = run_shardplan({"calibrate", "--bench", "--iters", "1", "--warmup-iters", "0", "--out", profile});
  REQUIRE(table.exit_status == 0);
  CHECK(table.out.find("collectives skipped") != std::string::npos);
  CHECK(table.out.find("transformer_block fwd") != std::string::npos);
}

TEST_CASE("`calibrate` needs exactly one of --trace and --bench; bad bench flags exit 2 with one line") {
  const auto expect_error = [](const std::vector<std::string>& args, const std::string& named) {
    const RunResult result = run_shardplan(args);
    INFO(result.err);
    CHECK(result.exit_status == 2);
    CHECK(result.out.empty());
    REQUIRE(result.err_lines().size() == 1);
    CHECK(result.err.find(named) != std::string::npos);
  };
  const TempDir dir("shardplan-bench-bad");
  const std::string out = (dir.path / "p.json").string();
  expect_error({"calibrate", "--out", out}, "--bench");
  expect_error({"calibrate", "--bench", "--trace", "measured.json", "--out", out}, "--trace");
  expect_error({"calibrate", "--trace", "measured.json", "--iters", "3", "--out", out}, "--iters");
  if (shardplan_test::mpi_build()) {
    expect_error({"calibrate", "--bench", "--max-bytes", "512", "--out", out}, "--max-bytes");
    expect_error({"calibrate", "--bench", "--min-bytes", "2", "--out", out}, "--min-bytes");
    expect_error({"calibrate", "--bench", "--iters", "0", "--out", out}, "--iters");
    expect_error({"calibrate", "--bench", "--step-factor", "1", "--out", out}, "--step-factor");
    expect_error({"calibrate", "--bench", "--model", "tiny-lama", "--out", out}, "tiny-llama");
    expect_error({"calibrate", "--bench", "--out", (dir.path / "missing" / "p.json").string()}, "--out");
  }
  CHECK(!std::filesystem::exists(out));
}
