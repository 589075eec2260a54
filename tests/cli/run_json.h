// Runs the shardplan binary under test with `--json`-style arguments and returns its stdout parsed, requiring exit 0.
#pragma once

#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "run_binary.h"

namespace shardplan_test {

// The command must succeed; its stderr is shown when it does not.
inline nlohmann::json run_json(const std::vector<std::string>& args) {
  const RunResult result = run_shardplan(args);
  INFO(result.err);
  REQUIRE(result.exit_status == 0);
  return nlohmann::json::parse(result.out);
}

// A command's text output and the same command's `--json` document; both must succeed.
struct TextAndJson {
  RunResult text;
  nlohmann::json document;
};
inline TextAndJson run_text_and_json(const std::vector<std::string>& args) {
  TextAndJson both{run_shardplan(args), {}};
  INFO(both.text.err);
  REQUIRE(both.text.exit_status == 0);
  std::vector<std::string> with_json = args;
  with_json.push_back("--json");
  both.document = run_json(with_json);
  return both;
}

}  // namespace shardplan_test
