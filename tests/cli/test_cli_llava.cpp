// Tests of LLaVA-1.5-7B through the binary (issue 17): `plan` on 8 x A100-80GB wraps units from both towers, and the
// FSDP2 export names the modules as transformers does (vision_tower.vision_model.encoder.layers.N,
// language_model.model.layers.N); `estimate` reports the published count and the vision layers' 577 tokens.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_binary.h"

namespace {

using nlohmann::json;
using shardplan_test::RunResult;
using shardplan_test::run_shardplan;

const char* const kLlava = "examples/hf/llava-1.5-7b.json";

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string read_text(const std::filesystem::path& path) {
  std::ifstream stream(path);
  std::ostringstream text;
  text << stream.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("`plan` LLaVA-1.5-7B on 8xA100-80GB: FSDP2 units from both towers, named as transformers names them") {
  const auto dir = std::filesystem::temp_directory_path() / ("shardplan-llava-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const RunResult planned = run_shardplan({"plan", "-m", kLlava, "-c", "8xA100-80GB", "--seq-len", "2048",
                                           "--export", "fsdp2", "--out-dir", dir.string()});
  INFO(planned.err);
  REQUIRE(planned.exit_status == 0);
  const std::string script = read_text(dir / "fsdp2_plan.py");
  // The fully_shard calls, children before the root: each tower's blocks are wrapped, under their real paths.
  const std::size_t calls = script.find("\n    fully_shard(");
  REQUIRE(calls != std::string::npos);
  const std::string wrapped = script.substr(calls);
  CHECK(contains(wrapped, "vision_tower.vision_model.encoder.layers"));
  CHECK(contains(wrapped, "language_model.model.layers"));
  const std::size_t groups = script.find("PLANNED_GROUPS = [");
  REQUIRE(groups != std::string::npos);
  const std::string listed = script.substr(groups, script.find("\n]", groups) - groups);
  CHECK(contains(listed, "\"vision_tower.vision_model.encoder.layers.0\""));
  CHECK(contains(listed, "\"language_model.model.layers.31\""));
  CHECK(contains(listed, "\"multi_modal_projector\""));
  CHECK_FALSE(contains(listed, "\"model.layers."));  // no bare decoder path: the language model is nested
  std::filesystem::remove_all(dir);

  const RunResult estimate = run_shardplan({"estimate", "-m", kLlava, "-c", "8xA100-80GB", "--seq-len", "2048",
                                            "--json"});
  INFO(estimate.err);
  REQUIRE(estimate.exit_status == 0);
  const json document = json::parse(estimate.out);
  CHECK(document["params"] == 7'063'427'072);
  for (const json& layer : document["layers"]) {
    const std::string name = layer["name"];
    if (name.starts_with("vision_tower.vision_model.encoder.layers.")) {
      CHECK(layer["tokens_per_sample"] == 577);
      CHECK(layer["causal_attention"] == false);
    } else if (name.starts_with("language_model.model.layers.")) {
      CHECK(layer["tokens_per_sample"] == 2048);
    }
  }
}
