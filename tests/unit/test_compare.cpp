// Tests of predicted-vs-measured comparison on hand-made timelines.
#include <doctest/doctest.h>

#include "compare.h"
#include "errors.h"

using namespace shardplan;

namespace {

TimelineEvent event(int id, const char* kind, const char* stream, double start, double end, int rank = 0) {
  TimelineEvent e;
  e.op_id = id;
  e.name = std::string(kind) + " " + std::to_string(id);
  e.kind = kind;
  e.stream = stream;
  e.start_s = start;
  e.end_s = end;
  e.rank = rank;
  return e;
}

}  // namespace

TEST_CASE("compare: totals by kind and stream, step time, peak memory, worst ops") {
  Timeline predicted, measured;
  predicted.events = {event(0, "all_gather", "all_gather", 0, 1), event(1, "forward", "compute", 1, 3),
                      event(2, "backward", "compute", 3, 7)};
  MemorySample sample;
  sample.bytes[static_cast<std::size_t>(MemoryCategory::activations)] = 100;
  predicted.memory = {sample};
  for (int rank : {0, 1}) {
    measured.events.push_back(event(0, "all_gather", "all_gather", 0, 2, rank));
    measured.events.push_back(event(1, "forward", "compute", 2, 4, rank));
    measured.events.push_back(event(2, "backward", "compute", 4, 9, rank));
    measured.events.push_back(event(3, "optimizer_step", "compute", 9, 10, rank));  // not in the prediction
    MemorySample measured_sample;
    measured_sample.rank = rank;
    measured_sample.bytes[static_cast<std::size_t>(MemoryCategory::activations)] = rank == 1 ? 125 : 80;
    measured.memory.push_back(measured_sample);
  }
  const Comparison comparison = compare_timelines(predicted, measured, 0);
  CHECK(comparison.matched_ops == 3);
  CHECK(comparison.unmatched_ops == 1);
  CHECK(comparison.predicted_step_s == doctest::Approx(7));
  CHECK(comparison.measured_step_s == doctest::Approx(10));
  CHECK(comparison.step_relative_error() == doctest::Approx(-0.3));
  CHECK(comparison.measured_peak_bytes == 125);  // the largest rank
  CHECK(comparison.peak_relative_error() == doctest::Approx(-0.2));
  REQUIRE(comparison.by_stream.size() == 2);
  CHECK(comparison.by_stream[0].name == "compute");  // sorted by measured time
  CHECK(comparison.by_stream[0].predicted_s == doctest::Approx(6));
  CHECK(comparison.by_stream[0].measured_s == doctest::Approx(7));
  REQUIRE_FALSE(comparison.worst_ops.empty());
  CHECK(comparison.worst_ops.front().op_id == 0);  // ops 0 and 2 both differ by 1 s: ties keep op order
  CHECK(to_json(comparison).at("step_time").at("relative_error").get<double>() == doctest::Approx(-0.3));
  CHECK_THROWS_AS(compare_timelines(predicted, measured, 5), InputError);
}

TEST_CASE("compare: traces match by their fingerprints (model, parameters, plan digest)") {
  Timeline predicted, measured;
  const nlohmann::json fingerprint = {{"model", "llama3-70b"}, {"parameters", 70553706496LL}, {"plan_digest", "0123"}};
  predicted.metadata["fingerprint"] = fingerprint;
  measured.metadata["fingerprint"] = fingerprint;
  CHECK(match_traces(predicted, measured).mismatch.empty());
  CHECK(match_traces(predicted, measured).unchecked.empty());
  measured.metadata["fingerprint"]["plan_digest"] = "4567";
  CHECK(match_traces(predicted, measured).mismatch.find("plan digest") != std::string::npos);
  measured.metadata["fingerprint"]["model"] = "tiny-llama";
  CHECK(match_traces(predicted, measured).mismatch.find("model \"llama3-70b\"") != std::string::npos);
  measured.metadata.erase("fingerprint");
  CHECK(match_traces(predicted, measured).mismatch.empty());
  CHECK(match_traces(predicted, measured).unchecked == "the measured trace");
}
