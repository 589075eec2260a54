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

}  // namespace shardplan_test
