// Names of the StepSchedule's enums and op counting.
#include "schedule.h"

#include <algorithm>

namespace shardplan {

const char* to_string(StreamKind stream) {
  switch (stream) {
    case StreamKind::compute: return "compute";
    case StreamKind::all_gather: return "all_gather";
    case StreamKind::reduce_scatter: return "reduce_scatter";
    case StreamKind::all_reduce: return "all_reduce";
    case StreamKind::host_to_device: return "h2d";
    case StreamKind::device_to_host: return "d2h";
    case StreamKind::all_to_all: return "all_to_all";
    case StreamKind::p2p: return "p2p";
  }
  return "compute";
}

const char* to_string(OpKind kind) {
  switch (kind) {
    case OpKind::all_gather: return "all_gather";
    case OpKind::wait: return "wait";
    case OpKind::forward: return "forward";
    case OpKind::recompute: return "recompute";
    case OpKind::backward: return "backward";
    case OpKind::backward_input: return "backward_input";
    case OpKind::backward_weight: return "backward_weight";
    case OpKind::free_unsharded: return "free_unsharded";
    case OpKind::reduce_scatter: return "reduce_scatter";
    case OpKind::all_reduce: return "all_reduce";
    case OpKind::host_to_device: return "host_to_device";
    case OpKind::device_to_host: return "device_to_host";
    case OpKind::optimizer_step: return "optimizer_step";
    case OpKind::all_to_all: return "all_to_all";
    case OpKind::send: return "send";
    case OpKind::recv: return "recv";
  }
  return "forward";
}

const char* to_string(GroupKind group) {
  switch (group) {
    case GroupKind::none: return "none";
    case GroupKind::shard: return "shard";
    case GroupKind::replica: return "replica";
    case GroupKind::world: return "world";
    case GroupKind::partial_reshard: return "partial_reshard";
    case GroupKind::expert: return "expert";
  }
  return "none";
}

std::size_t StepSchedule::count(OpKind kind) const {
  return static_cast<std::size_t>(std::count_if(ops.begin(), ops.end(), [kind](const Op& op) { return op.kind == kind; }));
}

}  // namespace shardplan
