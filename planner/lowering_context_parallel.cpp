// The Lowerer's ring attention ops (Note [Context-parallel lowering] in context_parallel_lowering.h): each attention
// layer pass's K/V and dK/dV sends to the next CP rank.
#include <algorithm>

#include "lowerer.h"

namespace shardplan::lowering_internal {  // Note [Lowering] in lowering.h

const std::optional<ContextParallelAttention>& Lowerer::ring_attention(std::size_t layer) {
  if (ring_attention_.empty()) ring_attention_.resize(model_.layers.size());
  auto& slot = ring_attention_[layer];
  if (!slot) {
    TrainingConfig whole = plan_.training;  // the rank's plan holds seq_len / cp of each sequence
    whole.seq_len = ring_.seq_len;
    slot = layer_ring_attention(model_, layer, whole, ring_.degree);
  }
  return *slot;
}

void Lowerer::emit_ring_exchanges(std::size_t layer, int unit, int micro, ComputePass pass, int before, int id) {
  const auto& attention = ring_attention(layer);
  if (!attention || attention->degree <= 1) return;
  struct Exchange {
    std::int64_t bytes;
    int element_bytes;
  };
  // Note [Ring attention]: forward (and a full recompute) cp − 1 K/V steps; backward the K/V again and cp dK/dV
  // steps, the last after the pass's compute.
  std::vector<Exchange> exchanges(static_cast<std::size_t>(attention->forward_kv_ring_steps),
                                  {attention->kv_bytes_per_ring_step, plan_.training.precision.param_compute_bytes});
  std::int64_t buffer = attention->kv_bytes_per_ring_step;
  if (pass == ComputePass::backward) {
    for (int step = 0; step < attention->backward_grad_kv_ring_steps; ++step) {
      exchanges.push_back({attention->grad_kv_bytes_per_ring_step, 4});  // fp32 (convert_to_f32)
    }
    buffer += attention->grad_kv_bytes_per_ring_step;
  }
  const int cp = attention->degree;
  int previous = -1;
  for (std::size_t index = 0; index < exchanges.size(); ++index) {
    Op send = make_op(OpKind::send, StreamKind::p2p, unit, micro);
    send.layer = static_cast<int>(layer);
    send.bytes = exchanges[index].bytes;
    send.element_bytes = exchanges[index].element_bytes;
    send.group_size = cp;
    send.group_spans_nodes = cp > options_.gpus_per_node;
    send.group_ranks_per_node = std::min(cp, options_.gpus_per_node);
    const bool last = index + 1 == exchanges.size();
    const bool after_compute = last && pass == ComputePass::backward;  // the dK/dV that comes home
    if (after_compute) {
      send.deps.push_back(id);
    } else if (before >= 0) {
      send.deps.push_back(before);
    }
    if (index == 0) send.allocates.push_back({MemoryCategory::comm_buffers, buffer});
    if (last) send.frees.push_back({MemoryCategory::comm_buffers, buffer});
    previous = emit(std::move(send));
  }
  compute_waits_for_ = previous;
}

}  // namespace shardplan::lowering_internal
