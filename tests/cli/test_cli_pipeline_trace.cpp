// Tests of pipeline plans' trace and report through the binary (Note [Pipeline trace]): `simulate` writes both,
// one Chrome-trace process per pipeline rank with send→recv flows, an HTML page naming each rank; `plan` writes the
// planned pipeline plan's trace.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_binary.h"

namespace {

using nlohmann::json;
using shardplan_test::RunResult;
using shardplan_test::run_shardplan;
using shardplan_test::TempFile;

// The process names of a written trace, and its flow events' count.
struct TraceShape {
  std::set<std::string> processes;
  std::size_t flow_events = 0;
};
TraceShape trace_shape(const TempFile& file) {
  const json trace = json::parse(file.contents());  // throws (fails the test) on invalid JSON
  TraceShape shape;
  for (const json& event : trace.at("traceEvents")) {
    if (event.at("ph") == "M" && event.at("name") == "process_name") {
      shape.processes.insert(event.at("args").at("name").get<std::string>());
    }
    if (event.at("ph") == "s" || event.at("ph") == "f") ++shape.flow_events;
  }
  return shape;
}

}  // namespace

TEST_CASE("`simulate --pipeline-parallel 2 --trace --report`: a process per pipeline rank, a page naming each") {
  TempFile trace("pipeline-trace", "", ".json");
  TempFile report("pipeline-report", "", ".html");
  const RunResult run = run_shardplan({"simulate", "-m", "tiny-llama", "-c", "8xcpu", "--seq-len", "64",
                                       "--global-batch", "16", "--pipeline-parallel", "2", "--trace", trace.path(),
                                       "--report", report.path()});
  INFO(run.err);
  REQUIRE(run.exit_status == 0);
  CHECK(run.out.find("trace written to") != std::string::npos);
  const TraceShape shape = trace_shape(trace);
  CHECK(shape.processes == std::set<std::string>{"pipeline rank 0 (stage 0)", "pipeline rank 1 (stage 1)"});
  CHECK(shape.flow_events > 0);
  CHECK(shape.flow_events % 2 == 0);
  const std::string html = report.contents();
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(html.find("</html>") != std::string::npos);
  CHECK(html.find("rank 0 / compute") != std::string::npos);
  CHECK(html.find("rank 1 / compute") != std::string::npos);
  CHECK(html.find("in flight") != std::string::npos);  // render_pipeline_text's table
}

TEST_CASE("`plan --pipeline-parallel 2 --trace`: the planned pipeline plan's trace, two rank processes") {
  TempFile trace("planned-pipeline-trace", "", ".json");
  const RunResult run = run_shardplan({"plan", "-m", "llama3-8b", "-c", "2x8xH100-80GB", "--seq-len", "2048",
                                       "--pipeline-parallel", "2", "--trace", trace.path()});
  INFO(run.err);
  REQUIRE(run.exit_status == 0);
  CHECK(run.out.find("planned: pp 2, ") != std::string::npos);
  const TraceShape shape = trace_shape(trace);
  REQUIRE(shape.processes.size() == 2);
  for (const std::string& name : shape.processes) CHECK(name.rfind("pipeline rank ", 0) == 0);
  CHECK(shape.flow_events > 0);
}
