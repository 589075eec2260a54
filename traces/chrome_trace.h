// Chrome trace JSON (the format Perfetto and chrome://tracing load): writing and reading a Timeline.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "output_files.h"
#include "timeline.h"

namespace shardplan {

// One process per rank ("rank 0"), one named thread per stream, `ph:"X"` complete events for ops (args: op_id, kind,
// unit, layer, micro_batch, bytes, flops), `ph:"C"` counter events "memory" with one series per category (bytes), and
// `ph:"M"` metadata events naming processes and threads. Times in microseconds as the format requires. The timeline's
// `source` and `metadata` go under the top-level "shardplan" key, so the reader gets back exactly what was written.
nlohmann::json to_chrome_trace(const Timeline& timeline);

// An arrow from one op's slice to another's, ops named by (rank, op_id): a pipeline send to its recv.
struct TraceFlow {
  int from_rank = 0;
  int from_op_id = 0;
  int to_rank = 0;
  int to_op_id = 0;
};
struct ChromeTraceExtras {
  std::map<int, std::string> process_names;  // by rank, in place of "rank N"
  // Each a flow pair: `ph:"s"` at the start of the from op's slice and `ph:"f"` (`bp:"e"`, bound to the enclosing
  // slice) at the start of the to op's, with one id per pair and args {from_op_id, to_op_id}. A flow naming an op
  // the timeline lacks is an InternalError. The reader skips flows (they hold nothing a Timeline does).
  std::vector<TraceFlow> flows;
};
nlohmann::json to_chrome_trace(const Timeline& timeline, const ChromeTraceExtras& extras);
Timeline from_chrome_trace(const nlohmann::json& document, const std::string& origin);

// Writes to `path` by Note [Output files] (a temporary name, then rename): a failure never leaves a half-written trace.
void write_chrome_trace(const Timeline& timeline, const std::string& path);
Timeline read_chrome_trace(const std::string& path);  // InputError naming the file and field on bad input

}  // namespace shardplan
