// assign_streams: StepSchedule → CUDA streams and events with vector clocks; and the independent coverage check.
#include "stream_assignment.h"

#include <algorithm>
#include <vector>

#include "errors.h"

namespace shardplan::gpu {

const char* to_string(GpuStream stream) {
  switch (stream) {
    case GpuStream::compute: return "compute";
    case GpuStream::all_gather: return "all_gather";
    case GpuStream::reduce_scatter: return "reduce_scatter";
    case GpuStream::all_reduce: return "all_reduce";
    case GpuStream::host_to_device: return "host_to_device";
    case GpuStream::device_to_host: return "device_to_host";
  }
  return "unknown";
}

GpuStream gpu_stream_for(StreamKind stream) {
  switch (stream) {
    case StreamKind::compute: return GpuStream::compute;
    case StreamKind::all_gather: return GpuStream::all_gather;
    case StreamKind::reduce_scatter: return GpuStream::reduce_scatter;
    case StreamKind::all_reduce: return GpuStream::all_reduce;  // Note [GPU streams]
    case StreamKind::host_to_device: return GpuStream::host_to_device;
    case StreamKind::device_to_host: return GpuStream::device_to_host;
    case StreamKind::all_to_all: return GpuStream::compute;  // never run: check_executable refuses expert parallelism
    case StreamKind::p2p: return GpuStream::compute;  // never run: the runners take no pipeline programs yet
  }
  return GpuStream::compute;
}

namespace {

// A vector clock over streams (Lamport 1978; Mattern 1989): known[t] = how many ops of stream t are known complete.
using StreamClock = std::array<int, kGpuStreamCount>;

void merge(StreamClock& into, const StreamClock& from) {
  for (int t = 0; t < kGpuStreamCount; ++t) into[t] = std::max(into[t], from[t]);
}

}  // namespace

StreamAssignment assign_streams(const StepSchedule& schedule) {
  const std::size_t op_count = schedule.ops.size();
  StreamAssignment assignment;
  assignment.ops.resize(op_count);
  std::vector<int> position(op_count, 0);         // index of the op within its stream
  std::vector<StreamClock> known_after(op_count);  // what is known complete once the op itself completed
  std::array<StreamClock, kGpuStreamCount> stream_clock{};

  for (std::size_t index = 0; index < op_count; ++index) {
    const Op& op = schedule.ops[index];
    if (op.id != static_cast<int>(index)) {
      throw InternalError("schedule op " + std::to_string(index) + " has id " + std::to_string(op.id));
    }
    GpuOpPlan& plan = assignment.ops[index];
    plan.stream = gpu_stream_for(op.stream);
    plan.launches_work = op.kind != OpKind::wait && op.kind != OpKind::free_unsharded;
    const int s = static_cast<int>(plan.stream);
    StreamClock clock = stream_clock[s];

    // The latest dependency per other stream: waiting for it covers the earlier ones of that stream.
    std::array<int, kGpuStreamCount> latest_dep;
    latest_dep.fill(-1);
    for (int dep : op.deps) {
      if (dep < 0 || dep >= static_cast<int>(index)) {
        throw InternalError("op " + std::to_string(index) + " depends on op " + std::to_string(dep) +
                            ", which is not earlier in the schedule (Note [Schedule order])");
      }
      const int t = static_cast<int>(assignment.ops[dep].stream);
      if (t == s) continue;  // stream order already runs it first
      ++assignment.cross_stream_dependencies;
      if (latest_dep[t] < 0 || position[dep] > position[latest_dep[t]]) latest_dep[t] = dep;
    }
    for (int t = 0; t < kGpuStreamCount; ++t) {
      const int dep = latest_dep[t];
      if (dep < 0 || clock[t] > position[dep]) continue;  // already known complete through an earlier wait
      GpuOpPlan& source = assignment.ops[dep];
      if (source.record_event < 0) source.record_event = assignment.event_count++;
      plan.wait_events.push_back(source.record_event);
      ++assignment.waits;
      merge(clock, known_after[dep]);
    }
    position[index] = assignment.ops_per_stream[s]++;
    clock[s] = position[index] + 1;
    known_after[index] = clock;
    stream_clock[s] = clock;
  }
  return assignment;
}

bool assignment_covers_dependencies(const StepSchedule& schedule, const StreamAssignment& assignment,
                                    std::string* problem) {
  // Happens-before as explicit reachability: edges from each op to the next op of its stream and from each event's
  // recording op to every op that waits on it. Quadratic bitsets; meant for tests and debug runs.
  const std::size_t op_count = schedule.ops.size();
  std::vector<int> recorder(static_cast<std::size_t>(assignment.event_count), -1);
  for (std::size_t index = 0; index < op_count; ++index) {
    const int event = assignment.ops[index].record_event;
    if (event >= 0) recorder[static_cast<std::size_t>(event)] = static_cast<int>(index);
  }
  std::vector<std::vector<bool>> before(op_count, std::vector<bool>(op_count, false));
  std::array<int, kGpuStreamCount> last_on_stream;
  last_on_stream.fill(-1);
  auto inherit = [&](std::size_t index, int from) {
    before[index][static_cast<std::size_t>(from)] = true;
    for (std::size_t k = 0; k < op_count; ++k) {
      if (before[static_cast<std::size_t>(from)][k]) before[index][k] = true;
    }
  };
  for (std::size_t index = 0; index < op_count; ++index) {
    const GpuOpPlan& plan = assignment.ops[index];
    const int s = static_cast<int>(plan.stream);
    if (last_on_stream[s] >= 0) inherit(index, last_on_stream[s]);
    for (int event : plan.wait_events) {
      const int from = event >= 0 && event < assignment.event_count ? recorder[static_cast<std::size_t>(event)] : -1;
      if (from < 0 || from >= static_cast<int>(index)) {
        if (problem) *problem = "op " + std::to_string(index) + " waits on event " + std::to_string(event) +
                                " that no earlier op records";
        return false;
      }
      inherit(index, from);
    }
    last_on_stream[s] = static_cast<int>(index);
    for (int dep : schedule.ops[index].deps) {
      if (!before[index][static_cast<std::size_t>(dep)]) {
        if (problem) *problem = "op " + std::to_string(index) + " (" + to_string(schedule.ops[index].kind) +
                                ") may start before its dependency op " + std::to_string(dep);
        return false;
      }
    }
  }
  return true;
}

}  // namespace shardplan::gpu
