// The Lowerer's all-gathers (Note [Lowering] in lowering.h): requesting and issuing them under the rate limiter, the
// host-to-device copy of an offloaded shard, the compute stream's wait, and the free that reshards.
#include <algorithm>

#include "lowerer.h"

namespace shardplan::lowering_internal {  // Note [Lowering] in lowering.h

bool Lowerer::counts_toward_limit(int unit, bool backward) const {
  // Units that stay gathered for the rest of the pass never issue a free the limiter could wait on.
  return backward || plan_.units[static_cast<std::size_t>(unit)].reshard_after_forward.enabled;
}

// The limiter's condition for the next counted gather: the gather `limit` places earlier has been freed.
bool Lowerer::limiter_allows() const {
  const int limit = plan_.max_inflight_all_gathers;
  const std::size_t next = limiter_sequence_.size();
  return limit == 0 || next < static_cast<std::size_t>(limit) ||
         limiter_sequence_[next - static_cast<std::size_t>(limit)].free_op >= 0;
}

int Lowerer::limiter_dependency() const {
  const int limit = plan_.max_inflight_all_gathers;
  const std::size_t next = limiter_sequence_.size();
  if (limit == 0 || next < static_cast<std::size_t>(limit)) return -1;
  return limiter_sequence_[next - static_cast<std::size_t>(limit)].free_op;
}

void Lowerer::request_gather(int unit, int micro, bool backward) {
  const auto& layout = layouts_[static_cast<std::size_t>(unit)];
  if (!layout.gathers || gathered_[unit] || std::find(pending_.begin(), pending_.end(), unit) != pending_.end()) {
    return;
  }
  if (counts_toward_limit(unit, backward) && (!pending_.empty() || !limiter_allows())) {
    pending_.push_back(unit);
    return;
  }
  emit_gather(unit, micro, backward, counts_toward_limit(unit, backward) ? limiter_dependency() : -1);
}

void Lowerer::emit_gather(int unit, int micro, bool backward, int limiter_dep) {
  const auto& layout = layouts_[static_cast<std::size_t>(unit)];
  const auto& precision = plan_.training.precision;
  Op gather = make_op(OpKind::all_gather, StreamKind::all_gather, unit, micro);
  gather.bytes = layout.gathered_bytes;  // QLoRA: the packed 4-bit codes, as stored (Note [Frozen parameters in FSDP])
  gather.element_bytes = precision.param_compute_bytes;
  const bool from_partial = partial_copy_[unit];
  gather.group = from_partial ? GroupKind::partial_reshard : GroupKind::shard;
  gather.group_size = from_partial ? layout.partial_group : layout.param_group;
  gather.group_spans_nodes = gather.group_size > options_.gpus_per_node;
  gather.group_ranks_per_node = std::min(gather.group_size, options_.gpus_per_node);
  if (limiter_dep >= 0) gather.deps.push_back(limiter_dep);
  // Issue point: the all-gather stream waits for the compute stream where the gather was issued (FSDP2's copy-in
  // waits on the current stream), so a prefetch overlaps the compute issued after it, not earlier work.
  if (last_compute_ >= 0) gather.deps.push_back(last_compute_);
  gather.allocates.push_back({layout.gathered_category, gather.bytes});
  if (plan_.offload.params) {
    // The shard comes in from host memory when the unshard is issued, before the all-gather (FSDP1's CPUOffload
    // copies it to the device in _unshard; FSDP2's offload policy in its all-gather copy-in): the copy waits for
    // what the gather waits for, so the shard is on the device from the gather's issue point to its end.
    Op copy = make_op(OpKind::host_to_device, StreamKind::host_to_device, unit, micro);
    copy.bytes = layout.shard_bytes;
    copy.element_bytes = precision.param_storage_bytes;
    copy.deps = gather.deps;
    copy.allocates.push_back({MemoryCategory::comm_buffers, copy.bytes});
    gather.deps.push_back(emit(std::move(copy)));
    gather.frees.push_back({MemoryCategory::comm_buffers, layout.shard_bytes});
  }
  if (layout.cast_shard_bytes > 0) {
    // The low-precision copy of the shard that feeds the all-gather (FSDP1 MixedPrecision `_mp_shard`).
    const std::int64_t cast_bytes = layout.cast_shard_bytes;
    gather.allocates.push_back({MemoryCategory::comm_buffers, cast_bytes});
    gather.frees.push_back({MemoryCategory::comm_buffers, cast_bytes});
  }
  if (from_partial) {
    gather.frees.push_back({MemoryCategory::unsharded_params, layout.partial_copy_bytes});
    partial_copy_[unit] = false;
  }
  gather_op_[unit] = emit(std::move(gather));
  gathered_[unit] = true;
  waited_[unit] = false;
  if (counts_toward_limit(unit, backward)) limiter_sequence_.push_back({unit, -1});
}

// The unit must be gathered now: a pending request is issued even if the limiter is full (FSDP would block the
// CPU until an earlier free completes; the latest free is the closest event we have).
void Lowerer::ensure_gathered(int unit, int micro, bool backward) {
  const auto& layout = layouts_[static_cast<std::size_t>(unit)];
  if (!layout.gathers) return;
  const auto position = std::find(pending_.begin(), pending_.end(), unit);
  if (position != pending_.end()) {
    pending_.erase(position);
    emit_gather(unit, micro, backward, limiter_allows() ? limiter_dependency() : last_free_);
  } else if (!gathered_[unit]) {
    request_gather(unit, micro, backward);
    if (!gathered_[unit]) ensure_gathered(unit, micro, backward);
  }
}

void Lowerer::emit_wait(int unit, int micro) {
  if (gather_op_[unit] < 0 || waited_[unit]) return;
  Op wait = make_op(OpKind::wait, StreamKind::compute, unit, micro);
  wait.deps.push_back(gather_op_[unit]);
  emit(std::move(wait));
  waited_[unit] = true;
}

void Lowerer::emit_free(int unit, int micro, bool backward) {
  const auto& layout = layouts_[static_cast<std::size_t>(unit)];
  Op free_op = make_op(OpKind::free_unsharded, StreamKind::compute, unit, micro);
  free_op.frees.push_back({layout.gathered_category, layout.gathered_bytes});
  const bool partial = !backward && plan_.units[static_cast<std::size_t>(unit)].reshard_after_forward.keeps_partial_copy();
  if (partial) free_op.allocates.push_back({MemoryCategory::unsharded_params, layout.partial_copy_bytes});
  last_free_ = emit(std::move(free_op));
  gathered_[unit] = false;
  gather_op_[unit] = -1;
  partial_copy_[unit] = partial;
  for (auto entry = limiter_sequence_.rbegin(); entry != limiter_sequence_.rend(); ++entry) {
    if (entry->unit == unit && entry->free_op < 0) {
      entry->free_op = last_free_;
      break;
    }
  }
  while (!pending_.empty() && limiter_allows()) {
    const int next = pending_.front();
    pending_.pop_front();
    emit_gather(next, micro, backward, limiter_dependency());
  }
}

void Lowerer::start_pass() {
  const std::size_t count = layouts_.size();
  gathered_.assign(count, false);
  waited_.assign(count, false);
  gather_op_.assign(count, -1);
  if (partial_copy_.size() != count) partial_copy_.assign(count, false);
  pending_.clear();
}

}  // namespace shardplan::lowering_internal
