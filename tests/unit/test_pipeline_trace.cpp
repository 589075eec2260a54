// Tests of a pipeline step's Chrome trace (Note [Pipeline trace]): one named process per pipeline rank, an event for
// every op of every program, and one flow pair per cross dependency, from the send's slice to its recv's.
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <string>
#include <utility>

#include "pipeline_schedule.h"
#include "pipeline_simulator.h"
#include "pipeline_trace.h"
#include "schedule_fixtures.h"

using namespace shardplan;
using namespace shardplan::testing;

namespace {

// `blocks` toy blocks cut into pp × v equal stages, `micro_batches` per step, 2 data-parallel ranks per stage.
PipelineStepAnalysis toy_pipeline_step(int blocks, PipelineScheduleKind schedule, int pp, int v, int micro_batches) {
  const ModelSpec model = toy_blocks(blocks);
  Plan plan = toy_plan(model, 2);
  plan.grad_accumulation_steps = micro_batches;
  PipelineLayout layout;
  layout.schedule = schedule;
  layout.degree = pp;
  ParallelDegrees degrees;
  degrees.pp = pp;
  layout.dims = ParallelDims(degrees, 2 * pp);  // 2 data-parallel ranks per stage
  layout.stages_per_rank = v;
  const std::size_t per_stage = static_cast<std::size_t>(blocks / (pp * v));
  for (int stage = 0; stage < pp * v; ++stage) {
    const auto begin = static_cast<std::size_t>(stage) * per_stage;
    layout.stages.push_back({begin, begin + per_stage});
  }
  PipelineStepAnalysis analysis;
  analysis.schedule = lower_pipeline(plan, model, toy_options(2), layout);
  analysis.simulation = simulate_pipeline(analysis.schedule, round_profile(), true);
  return analysis;
}

}  // namespace

TEST_CASE("pipeline trace: a process per rank, every op of every program, a flow pair per send→recv") {
  struct Case {
    PipelineScheduleKind schedule;
    int pp, v, micro_batches;
  };
  // 1F1B, GPipe on an odd number of ranks, interleaved with two stages per rank.
  for (const Case& shape : {Case{PipelineScheduleKind::one_f_one_b, 2, 1, 4},
                            Case{PipelineScheduleKind::gpipe, 3, 1, 3},
                            Case{PipelineScheduleKind::interleaved_1f1b, 2, 2, 4}}) {
    CAPTURE(to_string(shape.schedule));
    CAPTURE(shape.pp);
    const PipelineStepAnalysis analysis = toy_pipeline_step(12, shape.schedule, shape.pp, shape.v, shape.micro_batches);
    const nlohmann::json trace = pipeline_chrome_trace(analysis);
    std::map<int, std::string> process_names;
    std::map<int, std::size_t> ops_per_rank;
    std::set<std::pair<int, int>> op_events;  // (pid, op_id)
    std::map<std::pair<int, int>, std::pair<double, double>> slice;  // (pid, op_id) → [ts, ts + dur]
    std::map<long long, std::vector<nlohmann::json>> flows;          // id → its "s" and "f"
    for (const nlohmann::json& event : trace.at("traceEvents")) {
      const std::string ph = event.at("ph");
      if (ph == "M" && event.at("name") == "process_name") {
        process_names[event.at("pid")] = event.at("args").at("name");
      } else if (ph == "X") {
        const std::pair<int, int> key{event.at("pid").get<int>(), event.at("args").at("op_id").get<int>()};
        CHECK(op_events.insert(key).second);
        ++ops_per_rank[key.first];
        const double ts = event.at("ts");
        slice[key] = {ts, ts + event.at("dur").get<double>()};
      } else if (ph == "s" || ph == "f") {
        flows[event.at("id").get<long long>()].push_back(event);
      }
    }
    REQUIRE(process_names.size() == static_cast<std::size_t>(shape.pp));
    CHECK(process_names.at(0) == (shape.v == 1 ? "pipeline rank 0 (stage 0)" : "pipeline rank 0 (stages 0, 2)"));
    for (int rank = 0; rank < shape.pp; ++rank) {
      CHECK(ops_per_rank[rank] == analysis.schedule.programs[static_cast<std::size_t>(rank)].ops.size());
    }
    const auto& dependencies = analysis.schedule.cross_dependencies;
    REQUIRE(!dependencies.empty());
    REQUIRE(flows.size() == dependencies.size());
    std::set<std::pair<std::pair<int, int>, std::pair<int, int>>> expected, drawn;
    for (const auto& dependency : dependencies) {
      const StepSchedule& sender = analysis.schedule.programs[static_cast<std::size_t>(dependency.on_program)];
      CHECK(sender.ops[static_cast<std::size_t>(dependency.on_op)].kind == OpKind::send);
      expected.insert({{dependency.on_program, dependency.on_op}, {dependency.program, dependency.op}});
    }
    for (const auto& [id, pair] : flows) {
      REQUIRE(pair.size() == 2);
      const nlohmann::json& start = pair[0].at("ph") == "s" ? pair[0] : pair[1];
      const nlohmann::json& finish = pair[0].at("ph") == "s" ? pair[1] : pair[0];
      REQUIRE(start.at("ph") == "s");
      REQUIRE(finish.at("ph") == "f");
      CHECK(finish.at("bp") == "e");
      // Each end at the start of its op's slice: the send's, and the recv's (which waits for the send's end).
      const std::pair<int, int> from{start.at("pid").get<int>(), start.at("args").at("from_op_id").get<int>()};
      const std::pair<int, int> to{finish.at("pid").get<int>(), finish.at("args").at("to_op_id").get<int>()};
      CHECK(start.at("args") == finish.at("args"));
      REQUIRE(slice.count(from) == 1);
      REQUIRE(slice.count(to) == 1);
      CHECK(start.at("ts").get<double>() == slice.at(from).first);
      CHECK(finish.at("ts").get<double>() == slice.at(to).first);
      CHECK(finish.at("ts").get<double>() >= slice.at(from).second - 1e-9);
      drawn.insert({from, to});
    }
    CHECK(drawn == expected);
  }
}
