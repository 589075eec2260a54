// StreamAssignment: how the GPU executor maps a StepSchedule onto CUDA streams and events (which op runs where, which
// event each op records and which events it waits on). Plain data computed on the host; no CUDA here.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "schedule.h"

namespace shardplan::gpu {

// The CUDA streams of one GPU rank. Note [GPU streams]: one per stream of the schedule (Note [Runner streams] in the
// CPU runner keeps the same set). Compute runs on one stream; all-gathers get their own stream so the next unit's
// parameters arrive while the current unit computes (FSDP's prefetch); reduce-scatters get a second communication
// stream, so a gradient reduction never waits behind a prefetch and the next all-gather never waits behind a
// reduction; all-reduces (HSDP's across replicas, DDP's over the world) a third, so one unit's all-reduce across
// replicas runs beside the next unit's reduce-scatter — PyTorch FSDP2 keeps the same three (FSDPCommContext's
// all_gather_stream, reduce_scatter_stream and all_reduce_stream in torch/distributed/fsdp/_fully_shard/
// _fsdp_param_group.py), and the simulator times the schedule with them. Offload copies get one stream per
// direction, as the copy engines do.
enum class GpuStream { compute, all_gather, reduce_scatter, all_reduce, host_to_device, device_to_host };
inline constexpr int kGpuStreamCount = 6;
const char* to_string(GpuStream stream);
GpuStream gpu_stream_for(StreamKind stream);

// What the executor does for one op. Events are numbered 0..event_count-1 and reused in no step: each is recorded
// once per step. An op runs after (a) the earlier ops of its stream — CUDA stream order — and (b) the events it
// waits on, which the runner enqueues with cudaStreamWaitEvent before the op's work: no host synchronisation.
struct GpuOpPlan {
  GpuStream stream = GpuStream::compute;
  bool launches_work = true;        // false for wait / free_unsharded: stream bookkeeping only
  std::vector<int> wait_events;     // events recorded by other streams' ops that must complete first
  int record_event = -1;            // the event recorded after this op's work, or -1 if no other stream needs it
};

struct StreamAssignment {
  std::vector<GpuOpPlan> ops;  // parallel to schedule.ops
  int event_count = 0;
  std::array<int, kGpuStreamCount> ops_per_stream{};
  int cross_stream_dependencies = 0;  // schedule deps between ops on different GPU streams
  int waits = 0;                      // cudaStreamWaitEvent calls a step makes (≤ cross_stream_dependencies)
};

// Maps every op to its stream and turns each dependency that crosses streams into one event wait. Redundant waits
// are dropped: a dependency on op d of stream S is already met when this stream waited for a later op of S (stream
// order), so only the latest needed op per source stream is waited on, and not at all when an earlier op of this
// stream already waited for it or something later on S. InternalError when the schedule's order is not a valid
// issue order (a dependency on a later op).
StreamAssignment assign_streams(const StepSchedule& schedule);

// Independent check of an assignment: true when every schedule dependency is implied by CUDA stream order plus the
// planned event waits (the transitive happens-before relation); otherwise false with the first uncovered dependency
// in `problem`. Used by tests and by the GPU runner's debug checks.
bool assignment_covers_dependencies(const StepSchedule& schedule, const StreamAssignment& assignment,
                                    std::string* problem = nullptr);

}  // namespace shardplan::gpu
