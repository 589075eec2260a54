// Chrome trace JSON (Trace Event Format) writer and reader for Timeline, and the atomic file write every output uses.
#include "chrome_trace.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <system_error>
#include <unistd.h>
#include <utility>

#include "errors.h"
#include "input_limits.h"
#include "json_input.h"

namespace shardplan {
namespace {

using nlohmann::json;

constexpr const char* kTraceSchema = "shardplan.trace/v1";
// The Trace Event Format counts in microseconds; Timeline counts in seconds.
constexpr double kMicrosecondsPerSecond = 1e6;

json metadata_event(int pid, int tid, const char* name, json args) {
  return json{{"ph", "M"}, {"name", name}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
}

// Note [Strict and foreign traces]: a trace carrying our "shardplan" key was written by to_chrome_trace, so any field
// of the wrong type is damage and is reported by name. A trace from another tool (PyTorch profiler, Nsight export)
// uses the same envelope with its own args, so there we take what fits and skip the rest instead of failing.
struct ReadContext {
  bool strict = false;
  std::map<std::pair<long long, std::string>, std::string> thread_names;  // (pid, tid as JSON text) → name
};

// Note [Input limits] for traces: a timestamp within ±1e18 us (31,700 years: absolute epoch microseconds, 1.7e15,
// fit) and a duration of at most 1e12 us (11.6 days, far past any op); 1e308 made calibrate's fit fail as an
// internal error, and ts + dur must stay finite.
constexpr double kMostAbsTimestampUs = 1e18;
constexpr double kMostDurationUs = 1e12;

double required_time(const JsonObjectReader& event, std::string_view key, bool duration) {
  const char* expected = duration ? "a duration in [0, 1e12] (microseconds)"
                                  : "a timestamp in [-1e18, 1e18] (microseconds)";
  if (!event.has(key)) event.fail(key, expected);
  const json& value = event.raw().at(std::string(key));
  const double number = value.is_number() ? value.get<double>() : NAN;
  const bool in_range = duration ? number >= 0 && number <= kMostDurationUs : std::fabs(number) <= kMostAbsTimestampUs;
  if (!in_range) event.fail(key, expected);
  return number;
}

// An integer field that fits an int; `fallback` when absent (or, in a foreign trace, when it has another type).
int int_field(const JsonObjectReader& reader, std::string_view key, int fallback, bool strict) {
  if (!reader.has(key)) return fallback;
  const json& value = reader.raw().at(std::string(key));
  if (value.is_number_integer()) {
    const auto number = value.is_number_unsigned() ? static_cast<long long>(std::min<std::uint64_t>(
                                                         value.get<std::uint64_t>(), std::uint64_t{LLONG_MAX}))
                                                   : value.get<long long>();
    if (number >= INT_MIN && number <= INT_MAX) return static_cast<int>(number);
  }
  if (strict) reader.fail(key, "an integer");
  return fallback;
}

// Bytes of one op or one memory category: at most 2^50 (1 PiB, limits::kMostMemoryBytes), so the sums a Timeline
// and a comparison take over categories and events stay exact in 64 bits.
std::int64_t bytes_field(const JsonObjectReader& reader, std::string_view key, bool strict) {
  if (!reader.has(key)) return 0;
  const json& value = reader.raw().at(std::string(key));
  if (const auto bytes = JsonObjectReader::integer_in(value, 0, limits::kMostMemoryBytes)) return *bytes;
  if (!strict && value.is_number() && value.get<double>() >= 0 &&
      value.get<double>() <= static_cast<double>(limits::kMostMemoryBytes)) {
    return std::llround(value.get<double>());
  }
  if (strict) reader.fail(key, "an integer in 0..2^50 (bytes)");
  return 0;
}

// FLOPs of one op: at most 1e30 (10^12 s of the fastest device), so sums over events stay finite.
constexpr double kMostOpFlops = 1e30;

double number_field(const JsonObjectReader& reader, std::string_view key, bool strict) {
  if (!reader.has(key)) return 0;
  const json& value = reader.raw().at(std::string(key));
  if (value.is_number() && std::fabs(value.get<double>()) <= kMostOpFlops) return value.get<double>();
  if (strict) reader.fail(key, "a number in [-1e30, 1e30]");
  return 0;
}

std::optional<std::string> string_field(const JsonObjectReader& reader, std::string_view key, bool strict) {
  if (!reader.has(key)) return std::nullopt;
  const json& value = reader.raw().at(std::string(key));
  if (value.is_string()) return value.get<std::string>();
  if (strict) reader.fail(key, "a string");
  return std::nullopt;
}

// pid and tid: integers in our traces; other tools sometimes use strings for tid ("stream 7"), which we keep as text.
long long pid_of(const JsonObjectReader& event, bool strict) { return int_field(event, "pid", 0, strict); }

std::string tid_key(const JsonObjectReader& event) {
  return event.has("tid") ? event.raw().at("tid").dump() : std::string("0");
}

void read_metadata_event(const JsonObjectReader& event, ReadContext& context) {
  // Only thread names matter to the Timeline (they name the streams of a foreign trace); other metadata is cosmetic.
  if (string_field(event, "name", false) != "thread_name") return;
  if (!event.has("args") || !event.raw().at("args").is_object()) return;
  const json& args = event.raw().at("args");
  if (!args.contains("name") || !args.at("name").is_string()) return;
  context.thread_names[{pid_of(event, false), tid_key(event)}] = args.at("name").get<std::string>();
}

TimelineEvent read_op_event(const JsonObjectReader& event, const ReadContext& context) {
  const bool strict = context.strict;
  TimelineEvent op;
  const double ts = required_time(event, "ts", false);
  const double dur = required_time(event, "dur", true);
  op.start_s = ts / kMicrosecondsPerSecond;
  op.end_s = (ts + dur) / kMicrosecondsPerSecond;
  if (strict && !event.has("name")) event.fail("name", "a string");
  op.name = string_field(event, "name", strict).value_or("");
  op.rank = static_cast<int>(pid_of(event, strict));
  op.kind = string_field(event, "cat", strict).value_or("");

  std::optional<std::string> stream;
  const bool has_args = event.has("args") && event.raw().at("args").is_object();
  if (strict && event.has("args") && !has_args) event.fail("args", "a JSON object");
  if (has_args) {
    const JsonObjectReader args = event.object("args");
    op.op_id = int_field(args, "op_id", -1, strict);
    if (auto kind = string_field(args, "kind", strict)) op.kind = *kind;
    stream = string_field(args, "stream", strict);
    op.unit = int_field(args, "unit", -1, strict);
    op.layer = int_field(args, "layer", -1, strict);
    op.micro_batch = int_field(args, "micro_batch", 0, strict);
    op.bytes = bytes_field(args, "bytes", strict);
    op.flops = number_field(args, "flops", strict);
  }
  if (!stream) {
    const std::string tid = tid_key(event);
    const auto named = context.thread_names.find({op.rank, tid});
    if (named != context.thread_names.end()) {
      stream = named->second;
    } else {
      const json& raw_tid = event.has("tid") ? event.raw().at("tid") : json(0);
      stream = raw_tid.is_string() ? raw_tid.get<std::string>() : "tid " + tid;
    }
  }
  op.stream = *stream;
  return op;
}

// A "memory" counter event; nullopt when a foreign trace's counter has none of our categories.
std::optional<MemorySample> read_memory_event(const JsonObjectReader& event, const ReadContext& context) {
  const bool strict = context.strict;
  MemorySample sample;
  sample.time_s = required_time(event, "ts", false) / kMicrosecondsPerSecond;
  sample.rank = static_cast<int>(pid_of(event, strict));
  if (!event.has("args") || !event.raw().at("args").is_object()) {
    if (strict) event.fail("args", "a JSON object of bytes by memory category");
    return std::nullopt;
  }
  const JsonObjectReader args = event.object("args");
  bool any = false;
  for (const auto& item : args.raw().items()) {
    std::size_t index = 0;
    while (index < kMemoryCategoryCount && kMemoryCategoryNames[index] != item.key()) ++index;
    if (index == kMemoryCategoryCount) {
      if (strict) args.fail(item.key(), "a memory category name (sharded_params, ..., overhead)");
      continue;
    }
    sample.bytes[index] = bytes_field(args, item.key(), strict);
    any = true;
  }
  if (!any && !strict) return std::nullopt;
  return sample;
}

}  // namespace

json to_chrome_trace(const Timeline& timeline) { return to_chrome_trace(timeline, ChromeTraceExtras{}); }

json to_chrome_trace(const Timeline& timeline, const ChromeTraceExtras& extras) {
  // Thread ids are the stream's index in first-seen order, the same on every rank, so a stream is one row per process.
  const std::vector<std::string> streams = timeline.streams();
  std::map<std::string, int> tid_of;
  for (std::size_t i = 0; i < streams.size(); ++i) tid_of.emplace(streams[i], static_cast<int>(i));

  json events = json::array();
  for (int rank : timeline.ranks()) {
    const auto named = extras.process_names.find(rank);
    const std::string name = named != extras.process_names.end() ? named->second : "rank " + std::to_string(rank);
    events.push_back(metadata_event(rank, 0, "process_name", json{{"name", name}}));
    events.push_back(metadata_event(rank, 0, "process_sort_index", json{{"sort_index", rank}}));
  }
  // Name only the threads that carry ops, so a rank without, say, h2d traffic shows no empty row.
  std::set<std::pair<int, int>> threads;
  for (const auto& event : timeline.events) threads.emplace(event.rank, tid_of.at(event.stream));
  for (const auto& [rank, tid] : threads) {
    events.push_back(metadata_event(rank, tid, "thread_name", json{{"name", streams[static_cast<std::size_t>(tid)]}}));
    events.push_back(metadata_event(rank, tid, "thread_sort_index", json{{"sort_index", tid}}));
  }
  for (const auto& event : timeline.events) {
    const double ts = event.start_s * kMicrosecondsPerSecond;
    // dur from the scaled end rather than the scaled difference, so ts + dur reads back as end_s to the last ulp or so.
    const double dur = event.end_s * kMicrosecondsPerSecond - ts;
    events.push_back(json{{"ph", "X"},
                          {"name", event.name},
                          {"cat", event.kind},
                          {"ts", ts},
                          {"dur", dur},
                          {"pid", event.rank},
                          {"tid", tid_of.at(event.stream)},
                          {"args",
                           {{"op_id", event.op_id},
                            {"kind", event.kind},
                            {"stream", event.stream},
                            {"unit", event.unit},
                            {"layer", event.layer},
                            {"micro_batch", event.micro_batch},
                            {"bytes", event.bytes},
                            {"flops", event.flops}}}});
  }
  for (const auto& sample : timeline.memory) {
    json bytes = json::object();
    for (std::size_t i = 0; i < kMemoryCategoryCount; ++i) bytes[std::string(kMemoryCategoryNames[i])] = sample.bytes[i];
    events.push_back(json{{"ph", "C"},
                          {"name", "memory"},
                          {"ts", sample.time_s * kMicrosecondsPerSecond},
                          {"pid", sample.rank},
                          {"tid", 0},
                          {"args", std::move(bytes)}});
  }
  if (!extras.flows.empty()) {
    std::map<std::pair<int, int>, const TimelineEvent*> by_op;  // (rank, op_id) → its event
    for (const auto& event : timeline.events) by_op.emplace(std::make_pair(event.rank, event.op_id), &event);
    const auto event_of = [&](int rank, int op_id) {
      const auto found = by_op.find({rank, op_id});
      SHARDPLAN_CHECK(found != by_op.end(), "a trace flow names an op the timeline lacks");
      return found->second;
    };
    for (std::size_t id = 0; id < extras.flows.size(); ++id) {
      const TraceFlow& flow = extras.flows[id];
      const TimelineEvent* from = event_of(flow.from_rank, flow.from_op_id);
      const TimelineEvent* to = event_of(flow.to_rank, flow.to_op_id);
      const std::string name = from->kind + " to " + to->kind;
      const json args = {{"from_op_id", flow.from_op_id}, {"to_op_id", flow.to_op_id}};
      events.push_back(json{{"ph", "s"}, {"name", name}, {"cat", "flow"}, {"id", id},
                            {"ts", from->start_s * kMicrosecondsPerSecond}, {"pid", from->rank},
                            {"tid", tid_of.at(from->stream)}, {"args", args}});
      events.push_back(json{{"ph", "f"}, {"bp", "e"}, {"name", name}, {"cat", "flow"}, {"id", id},
                            {"ts", to->start_s * kMicrosecondsPerSecond}, {"pid", to->rank},
                            {"tid", tid_of.at(to->stream)}, {"args", args}});
    }
  }
  json shardplan = {{"schema", kTraceSchema}, {"source", timeline.source}, {"metadata", timeline.metadata}};
  return json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}, {"shardplan", std::move(shardplan)}};
}

Timeline from_chrome_trace(const json& document, const std::string& origin) {
  const JsonObjectReader top(document, origin);
  if (!top.has("traceEvents") || !document.at("traceEvents").is_array()) {
    top.fail("traceEvents", "an array of trace events");
  }
  Timeline timeline;
  ReadContext context;
  if (top.has("shardplan")) {
    const JsonObjectReader ours = top.object("shardplan");
    if (string_field(ours, "schema", true).value_or("") != kTraceSchema) {
      ours.fail("schema", std::string("\"") + kTraceSchema + "\"");
    }
    timeline.source = string_field(ours, "source", true).value_or("");
    if (ours.has("metadata")) timeline.metadata = ours.raw().at("metadata");
    context.strict = true;
  }

  // Two passes: thread names (M events) may come after the ops that use them in a foreign trace.
  const json& events = document.at("traceEvents");
  const auto reader_at = [&](std::size_t i) {
    return JsonObjectReader(events[i], origin, "traceEvents[" + std::to_string(i) + "]");
  };
  for (std::size_t i = 0; i < events.size(); ++i) {
    const JsonObjectReader event = reader_at(i);
    if (!event.has("ph") || !event.raw().at("ph").is_string()) event.fail("ph", "an event type string");
    if (event.raw().at("ph") == "M") read_metadata_event(event, context);
  }
  for (std::size_t i = 0; i < events.size(); ++i) {
    const JsonObjectReader event = reader_at(i);
    const std::string& ph = event.raw().at("ph").get_ref<const std::string&>();
    if (ph == "X") {
      timeline.events.push_back(read_op_event(event, context));
    } else if (ph == "C" && string_field(event, "name", false) == "memory") {
      if (auto sample = read_memory_event(event, context)) timeline.memory.push_back(*sample);
    }
    // Every other type (B/E pairs, instants, flows, samples) carries nothing a Timeline holds; skip it.
  }
  return timeline;
}

void write_chrome_trace(const Timeline& timeline, const std::string& path) {
  // Replace invalid UTF-8 in op names instead of throwing halfway: the trace is a report, not a round-trip of bytes.
  write_file_atomically(path, to_chrome_trace(timeline).dump(-1, ' ', false, json::error_handler_t::replace));
}

// Note [Input files] (costmodel/input_limits.h): a trace has a bound of its own, larger than other documents'.
Timeline read_chrome_trace(const std::string& path) {
  return from_chrome_trace(read_json_file(path, limits::kMaxTraceFileBytes), path);
}

}  // namespace shardplan
