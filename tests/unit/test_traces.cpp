// Tests of traces/: Timeline queries, Chrome trace write/read round trip and errors, atomic writes, the HTML report.
#include <doctest/doctest.h>

#include "test_support.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <unistd.h>

#include "chrome_trace.h"
#include "errors.h"
#include "html_report.h"
#include "json_input.h"
#include "timeline.h"

namespace {

using nlohmann::json;
using namespace shardplan;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::size_t count(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (auto pos = text.find(part); pos != std::string::npos; pos = text.find(part, pos + part.size())) ++n;
  return n;
}

using shardplan::testing::input_error_message;

// The trace format stores microseconds; seconds must come back to within 1e-9 relative.
bool near(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b)) + 1e-15; }

TimelineEvent op(int id, std::string name, std::string kind, std::string stream, int rank, double start, double end) {
  TimelineEvent event;
  event.op_id = id;
  event.name = std::move(name);
  event.kind = std::move(kind);
  event.stream = std::move(stream);
  event.rank = rank;
  event.start_s = start;
  event.end_s = end;
  return event;
}

MemorySample sample(int rank, double time, std::map<MemoryCategory, long long> bytes) {
  MemorySample result;
  result.rank = rank;
  result.time_s = time;
  for (const auto& [category, value] : bytes) result.bytes[static_cast<std::size_t>(category)] = value;
  return result;
}

// Two ranks, three streams, five ops per rank (rank 1 shifted by 0.1 ms), four memory samples per rank.
Timeline hand_timeline() {
  Timeline timeline;
  timeline.source = "predicted";
  timeline.metadata = {{"model", "llama3-8b"}, {"world", 2}, {"plan", {{"units", 4}}}};
  for (int rank = 0; rank < 2; ++rank) {
    const double shift = rank * 0.0001;
    auto gather0 = op(rank * 10 + 0, "all_gather unit 0", "all_gather", "all_gather", rank, shift, shift + 0.002);
    gather0.unit = 0;
    gather0.bytes = 1 << 20;
    auto forward = op(rank * 10 + 1, "forward <&> \"layer\" 0 ü", "forward", "compute", rank, shift + 0.002,
                      shift + 0.005);
    forward.layer = 0;
    forward.unit = 0;
    forward.micro_batch = 1;
    forward.flops = 1.5e12;
    auto gather1 = op(rank * 10 + 2, "all_gather unit 1", "all_gather", "all_gather", rank, shift + 0.002, shift + 0.004);
    gather1.unit = 1;
    gather1.bytes = 3'000'000'000LL;  // beyond 32 bits
    auto backward = op(rank * 10 + 3, "backward layer 0", "backward", "compute", rank, shift + 0.005, shift + 0.011);
    backward.layer = 0;
    backward.flops = 3e12 + 0.25;
    auto reduce = op(rank * 10 + 4, "reduce_scatter unit 0", "reduce_scatter", "reduce_scatter", rank, shift + 0.011,
                     shift + 0.0135);
    reduce.unit = 0;
    reduce.bytes = 2 << 20;
    for (auto* event : {&gather0, &forward, &gather1, &backward, &reduce}) timeline.events.push_back(*event);
  }
  using C = MemoryCategory;
  for (int rank = 0; rank < 2; ++rank) {
    const double shift = rank * 0.0001;
    const long long extra = rank * 150;
    timeline.memory.push_back(sample(rank, shift, {{C::sharded_params, 100}, {C::optimizer_states, 200}, {C::overhead, 50}}));
    timeline.memory.push_back(sample(rank, shift + 0.002, {{C::sharded_params, 100}, {C::optimizer_states, 200},
                                                           {C::overhead, 50}, {C::unsharded_params, 1000}}));
    timeline.memory.push_back(sample(rank, shift + 0.005, {{C::sharded_params, 100}, {C::optimizer_states, 200},
                                                           {C::overhead, 50}, {C::unsharded_params, 1000},
                                                           {C::activations, 500 + extra}}));
    timeline.memory.push_back(sample(rank, shift + 0.011, {{C::sharded_params, 100}, {C::optimizer_states, 200},
                                                           {C::overhead, 50}, {C::activations, 500},
                                                           {C::sharded_grads, 300}}));
  }
  return timeline;
}

void check_same_timeline(const Timeline& read, const Timeline& written) {
  CHECK(read.source == written.source);
  CHECK(read.metadata == written.metadata);
  REQUIRE(read.events.size() == written.events.size());
  for (std::size_t i = 0; i < read.events.size(); ++i) {
    const auto &a = read.events[i], &b = written.events[i];
    CAPTURE(i);
    CHECK(a.op_id == b.op_id);
    CHECK(a.name == b.name);
    CHECK(a.kind == b.kind);
    CHECK(a.stream == b.stream);
    CHECK(a.rank == b.rank);
    CHECK(near(a.start_s, b.start_s));
    CHECK(near(a.end_s, b.end_s));
    CHECK(a.bytes == b.bytes);
    CHECK(a.flops == b.flops);
    CHECK(a.unit == b.unit);
    CHECK(a.layer == b.layer);
    CHECK(a.micro_batch == b.micro_batch);
  }
  REQUIRE(read.memory.size() == written.memory.size());
  for (std::size_t i = 0; i < read.memory.size(); ++i) {
    CAPTURE(i);
    CHECK(read.memory[i].rank == written.memory[i].rank);
    CHECK(near(read.memory[i].time_s, written.memory[i].time_s));
    CHECK(read.memory[i].bytes == written.memory[i].bytes);
  }
}

// A fresh directory under the temp directory, removed with everything in it when the test ends.
class TemporaryDirectory {
 public:
  TemporaryDirectory() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("shardplan-traces-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TemporaryDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::set<std::string> entries() const {
    std::set<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(path_)) names.insert(entry.path().filename().string());
    return names;
  }

 private:
  std::filesystem::path path_;
};

std::vector<json> events_of(const json& trace, const std::string& ph, const std::string& name = "") {
  std::vector<json> found;
  for (const auto& event : trace.at("traceEvents")) {
    if (event.at("ph") == ph && (name.empty() || event.at("name") == name)) found.push_back(event);
  }
  return found;
}

}  // namespace

TEST_CASE("traces: timeline streams, ranks, span and peak memory on the hand timeline") {
  const Timeline timeline = hand_timeline();
  CHECK(timeline.streams() == std::vector<std::string>{"all_gather", "compute", "reduce_scatter"});
  CHECK(timeline.ranks() == std::vector<int>{0, 1});
  CHECK(timeline.span_s() == (0.0001 + 0.0135) - 0.0);  // rank 1's last end − rank 0's first start
  // rank 0 peaks at t = 5 ms: 100 + 200 + 50 + 1000 + 500; rank 1 has 150 more activation bytes there.
  CHECK(timeline.memory[2].total_bytes() == 1850);
  CHECK(timeline.peak_memory_bytes(0) == 1850);
  CHECK(timeline.peak_memory_bytes(1) == 2000);
  CHECK(timeline.peak_memory_bytes(7) == 0);
  CHECK(Timeline{}.span_s() == 0);
  CHECK(Timeline{}.streams().empty());
}

TEST_CASE("traces: chrome trace round trip keeps every field") {
  const Timeline written = hand_timeline();
  const json trace = to_chrome_trace(written);
  // Through text too, as a file would carry it.
  check_same_timeline(from_chrome_trace(trace, "mem"), written);
  check_same_timeline(from_chrome_trace(parse_json_text(trace.dump(), "text"), "text"), written);
}

TEST_CASE("traces: chrome trace layout: processes per rank, named threads per stream, memory counters") {
  const json trace = to_chrome_trace(hand_timeline());
  CHECK(trace.at("displayTimeUnit") == "ms");
  CHECK(trace.at("shardplan").at("schema") == "shardplan.trace/v1");
  CHECK(trace.at("shardplan").at("source") == "predicted");

  const auto processes = events_of(trace, "M", "process_name");
  REQUIRE(processes.size() == 2);
  std::set<std::pair<int, std::string>> process_names;
  for (const auto& event : processes) process_names.emplace(event.at("pid"), event.at("args").at("name"));
  CHECK(process_names == std::set<std::pair<int, std::string>>{{0, "rank 0"}, {1, "rank 1"}});
  CHECK(events_of(trace, "M", "process_sort_index").size() == 2);

  // Each rank runs all three streams: 2 × 3 named threads, and a stream has the same tid on both ranks.
  const auto threads = events_of(trace, "M", "thread_name");
  REQUIRE(threads.size() == 6);
  CHECK(events_of(trace, "M", "thread_sort_index").size() == 6);
  std::map<std::string, std::set<int>> tids_by_stream;
  std::map<int, std::set<std::string>> streams_by_pid;
  for (const auto& event : threads) {
    tids_by_stream[event.at("args").at("name")].insert(event.at("tid").get<int>());
    streams_by_pid[event.at("pid")].insert(event.at("args").at("name"));
  }
  CHECK(tids_by_stream == std::map<std::string, std::set<int>>{{"all_gather", {0}}, {"compute", {1}},
                                                               {"reduce_scatter", {2}}});
  for (int pid : {0, 1}) CHECK(streams_by_pid[pid].size() == 3);

  const auto ops = events_of(trace, "X");
  REQUIRE(ops.size() == 10);
  const json& backward = ops[3];
  CHECK(backward.at("name") == "backward layer 0");
  CHECK(backward.at("cat") == "backward");
  CHECK(backward.at("tid") == 1);
  CHECK(backward.at("ts").get<double>() == doctest::Approx(5000.0));
  CHECK(backward.at("dur").get<double>() == doctest::Approx(6000.0));
  for (const char* key : {"op_id", "kind", "stream", "unit", "layer", "micro_batch", "bytes", "flops"}) {
    CHECK(backward.at("args").contains(key));
  }

  const auto counters = events_of(trace, "C", "memory");
  REQUIRE(counters.size() == 8);
  for (const auto& counter : counters) {
    CHECK(counter.at("args").size() == kMemoryCategoryCount);
    for (auto name : kMemoryCategoryNames) CHECK(counter.at("args").contains(std::string(name)));
  }
  CHECK(counters[2].at("pid") == 0);
  CHECK(counters[2].at("args").at("activations") == 500);
  CHECK(counters[6].at("pid") == 1);
  CHECK(counters[6].at("args").at("activations") == 650);
}

TEST_CASE("traces: write_chrome_trace and read_chrome_trace through a file leave no temporary files") {
  TemporaryDirectory directory;
  const std::string path = directory.file("predicted.json");
  const Timeline written = hand_timeline();
  write_chrome_trace(written, path);
  write_chrome_trace(written, path);  // overwriting an existing trace works the same way
  CHECK(directory.entries() == std::set<std::string>{"predicted.json"});
  check_same_timeline(read_chrome_trace(path), written);
}

TEST_CASE("traces: write_file_atomically replaces the file and fails cleanly") {
  TemporaryDirectory directory;
  const std::string path = directory.file("out.txt");
  write_file_atomically(path, "first");
  write_file_atomically(path, "second");
  CHECK(read_text_file(path) == "second");
  CHECK(directory.entries() == std::set<std::string>{"out.txt"});

  // Note [Output files]: a missing directory is created.
  write_file_atomically(directory.file("new-dir/out.txt"), "x");
  CHECK(read_text_file(directory.file("new-dir/out.txt")) == "x");

  // A directory as the target is refused before anything is written: no temporary is left.
  std::filesystem::create_directory(directory.file("taken"));
  CHECK(contains(input_error_message([&] { write_file_atomically(directory.file("taken"), "x"); }), "cannot write"));
  CHECK(directory.entries() == std::set<std::string>{"out.txt", "taken", "new-dir"});
}

TEST_CASE("traces: from_chrome_trace errors name the origin and the field") {
  const json op = {{"ph", "X"}, {"name", "gemm"}, {"ts", 1.0}, {"dur", 2.0}, {"pid", 0}, {"tid", 0}};
  const json meta = {{"ph", "M"}, {"name", "thread_name"}, {"pid", 0}, {"tid", 0}, {"args", {{"name", "compute"}}}};
  const auto error_of = [](const json& document) {
    return input_error_message([&] { from_chrome_trace(document, "t.json"); });
  };
  CHECK(contains(error_of(json::array({op})), "t.json"));
  CHECK(contains(error_of(json{{"events", json::array()}}), "traceEvents"));
  CHECK(contains(error_of(json{{"traceEvents", 3}}), "traceEvents"));

  json no_dur = op;
  no_dur.erase("dur");
  CHECK(contains(error_of(json{{"traceEvents", {meta, no_dur}}}), "t.json: field 'traceEvents[1].dur'"));
  json negative = op;
  negative["dur"] = -5;
  const std::string message = error_of(json{{"traceEvents", {meta, negative}}});
  CHECK(contains(message, "traceEvents[1].dur"));
  CHECK(contains(message, "-5"));
  json no_ts = op;
  no_ts.erase("ts");
  CHECK(contains(error_of(json{{"traceEvents", {no_ts}}}), "traceEvents[0].ts"));
  CHECK(contains(error_of(json{{"traceEvents", {op, 7}}}), "traceEvents[1]"));
  CHECK(contains(error_of(json{{"traceEvents", {json{{"name", "x"}}}}}), "traceEvents[0].ph"));

  json ours = to_chrome_trace(hand_timeline());
  ours["shardplan"]["schema"] = "shardplan.trace/v9";
  CHECK(contains(error_of(ours), "shardplan.schema"));
  ours["shardplan"] = "yes";
  CHECK(contains(error_of(ours), "shardplan"));

  // In our own traces, a damaged arg is reported rather than guessed.
  json damaged = to_chrome_trace(hand_timeline());
  std::size_t index = 0;
  while (damaged["traceEvents"][index]["ph"] != "X") ++index;
  damaged["traceEvents"][index]["args"]["bytes"] = "lots";
  CHECK(contains(error_of(damaged), "traceEvents[" + std::to_string(index) + "].args.bytes"));

  CHECK(contains(input_error_message([] { read_chrome_trace("/nonexistent/trace.json"); }), "/nonexistent/trace.json"));
}

TEST_CASE("traces: unknown event types are skipped") {
  json trace = to_chrome_trace(hand_timeline());
  trace["traceEvents"].push_back({{"ph", "i"}, {"name", "marker"}, {"ts", 5}, {"pid", 0}, {"tid", 0}, {"s", "g"}});
  trace["traceEvents"].push_back({{"ph", "B"}, {"name", "open"}, {"ts", 5}, {"pid", 0}, {"tid", 0}});
  trace["traceEvents"].push_back({{"ph", "M"}, {"name", "process_labels"}, {"pid", 0}, {"args", {{"labels", "x"}}}});
  trace["traceEvents"].push_back({{"ph", "C"}, {"name", "other counter"}, {"ts", 5}, {"pid", 0}, {"args", {{"a", 1}}}});
  check_same_timeline(from_chrome_trace(trace, "t.json"), hand_timeline());
}

TEST_CASE("traces: a trace from another tool (no shardplan key) reads") {
  // The thread name comes after the ops that use it; tid 9 has no name; a string tid names itself.
  const json foreign = {
      {"traceEvents",
       {{{"ph", "X"}, {"cat", "kernel"}, {"name", "gemm"}, {"pid", 3}, {"tid", 7}, {"ts", 100}, {"dur", 50},
         {"args", {{"External id", 4}, {"bytes", "n/a"}}}},
        {{"ph", "X"}, {"cat", "cpu_op"}, {"name", "aten::mm"}, {"pid", 3}, {"tid", 9}, {"ts", 10.5}, {"dur", 5}},
        {{"ph", "X"}, {"cat", "nccl"}, {"name", "AllGather"}, {"pid", 0}, {"tid", "stream 12"}, {"ts", 0}, {"dur", 1}},
        {{"ph", "M"}, {"name", "thread_name"}, {"pid", 3}, {"tid", 7}, {"args", {{"name", "stream 7"}}}},
        {{"ph", "f"}, {"name", "flow"}, {"id", 1}, {"pid", 3}, {"tid", 7}, {"ts", 120}}}},
      {"displayTimeUnit", "ns"}};
  const Timeline timeline = from_chrome_trace(foreign, "kineto.json");
  CHECK(timeline.source.empty());
  CHECK(timeline.memory.empty());
  REQUIRE(timeline.events.size() == 3);
  const auto& gemm = timeline.events[0];
  CHECK(gemm.name == "gemm");
  CHECK(gemm.kind == "kernel");
  CHECK(gemm.stream == "stream 7");
  CHECK(gemm.rank == 3);
  CHECK(gemm.op_id == -1);
  CHECK(gemm.bytes == 0);
  CHECK(near(gemm.start_s, 100e-6));
  CHECK(near(gemm.end_s, 150e-6));
  CHECK(timeline.events[1].stream == "tid 9");
  CHECK(near(timeline.events[1].start_s, 10.5e-6));
  CHECK(timeline.events[2].stream == "stream 12");
  CHECK(timeline.events[2].kind == "nccl");
}

TEST_CASE("traces: html report is self-contained, escaped and shows every lane and summary row") {
  const Timeline predicted = hand_timeline();
  ReportInput input;
  input.title = "plan <&> \"report\"";
  input.timeline = &predicted;
  input.summary = {{"step time", "13.600 ms"}, {"peak memory", "2000 B"}, {"odd <&>", "a \"b\""}};
  const std::string html = render_html_report(input);
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(contains(html, "<style>"));
  CHECK(contains(html, "<svg"));
  for (const auto& stream : predicted.streams()) CHECK(contains(html, stream));
  for (const auto& row : {"step time", "13.600 ms", "peak memory", "2000 B"}) CHECK(contains(html, row));
  CHECK(contains(html, "odd &lt;&amp;&gt;"));
  CHECK(contains(html, "a &quot;b&quot;"));
  CHECK(contains(html, "plan &lt;&amp;&gt; &quot;report&quot;"));
  CHECK(contains(html, "forward &lt;&amp;&gt; &quot;layer&quot; 0"));
  CHECK_FALSE(contains(html, "<&>"));
  CHECK_FALSE(contains(html, "http"));
  CHECK_FALSE(contains(html, "<script"));
  CHECK_FALSE(contains(html, "<link"));
  CHECK(count(html, "<rect class=\"k") == 10);  // one rect per op
  CHECK(count(html, "<rect class=\"lane\"") == 6);  // 2 ranks × 3 streams
  CHECK(contains(html, "<polygon"));
  for (auto name : kMemoryCategoryNames) CHECK(contains(html, std::string(name)));
  CHECK(contains(html, " GiB"));
  CHECK(contains(html, " ms<"));

  // With a measured overlay every lane gets its measured twin directly below it.
  Timeline measured = hand_timeline();
  measured.source = "measured";
  for (auto& event : measured.events) event.end_s += 0.0005;
  input.overlay = &measured;
  const std::string both = render_html_report(input);
  CHECK(count(both, "<rect class=\"k") == 20);
  CHECK(count(both, "<rect class=\"lane\"") == 12);
  const auto predicted_lane = both.find("rank 0 / compute (predicted)");
  const auto measured_lane = both.find("rank 0 / compute (measured)");
  REQUIRE(predicted_lane != std::string::npos);
  REQUIRE(measured_lane != std::string::npos);
  CHECK(measured_lane > predicted_lane);
  CHECK(both.find("rank 0 / ", predicted_lane + 1) == measured_lane);  // no other lane between them
}

TEST_CASE("traces: html report of a large timeline merges tiny ops and stays small") {
  Timeline big;
  for (int i = 0; i < 60000; ++i) {
    big.events.push_back(op(i, "op " + std::to_string(i), i % 2 ? "forward" : "all_gather", i % 2 ? "compute" : "comm",
                            i % 4 / 2, i * 1e-6, i * 1e-6 + 8e-7));
  }
  for (int i = 0; i < 5000; ++i) big.memory.push_back(sample(0, i * 1e-5, {{MemoryCategory::activations, i * 1000LL}}));
  ReportInput input;
  input.title = "big";
  input.timeline = &big;
  const std::string html = render_html_report(input);
  CHECK(html.size() < 4'000'000);
  CHECK(contains(html, "merged"));
  CHECK(count(html, "<rect class=\"k") <= 21000);
}

TEST_CASE("traces: html report without memory samples or ops still renders") {
  Timeline empty;
  ReportInput input;
  input.title = "empty";
  input.timeline = &empty;
  const std::string html = render_html_report(input);
  CHECK(contains(html, "<svg"));
  CHECK(contains(html, "No memory samples"));
  CHECK_THROWS_AS(render_html_report(ReportInput{}), InternalError);
}
