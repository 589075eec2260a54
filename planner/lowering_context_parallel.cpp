// The Lowerer's ring attention ops (Note [Context-parallel lowering] in context_parallel_lowering.h): each attention
// layer pass's K/V and dK/dV sends to the next CP rank.
#include <algorithm>

#include "lowerer.h"

namespace shardplan::lowering_internal {  // Note [Lowering] in lowering.h

namespace {

// The pass's receive buffer: one ring step's K/V, and in backward its dK/dV too.
std::int64_t ring_buffer_bytes(const ContextParallelAttention& attention, ComputePass pass) {
  return attention.kv_bytes_per_ring_step +
         (pass == ComputePass::backward ? attention.grad_kv_bytes_per_ring_step : 0);
}

// torch's accumulation dtype for dK, dV (_ContextParallelOptions.convert_to_f32, Note [Ring attention]).
constexpr int kGradKvElementBytes = 4;

}  // namespace

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

Op Lowerer::ring_send(std::size_t layer, int unit, int micro, std::int64_t bytes, int element_bytes, int degree) {
  Op send = make_op(OpKind::send, StreamKind::p2p, unit, micro);
  send.layer = static_cast<int>(layer);
  send.bytes = bytes;
  send.element_bytes = element_bytes;
  send.group_size = degree;
  // CP ranks are consecutive data-parallel ranks (Note [ParallelDims]): the ring crosses nodes when it outgrows one.
  send.group_spans_nodes = degree > options_.gpus_per_node;
  send.group_ranks_per_node = std::min(degree, options_.gpus_per_node);
  return send;
}

int Lowerer::emit_ring_sends(std::size_t layer, int unit, int micro, ComputePass pass, int before) {
  const auto& attention = ring_attention(layer);
  if (!attention || attention->degree <= 1) return -1;
  // Note [Ring attention]: forward (and a full recompute) cp − 1 K/V steps; backward the K/V again and cp dK/dV
  // steps, all but the last issued here.
  const int kv_steps = attention->forward_kv_ring_steps;
  const int grad_steps = pass == ComputePass::backward ? attention->backward_grad_kv_ring_steps - 1 : 0;
  const std::int64_t buffer = ring_buffer_bytes(*attention, pass);
  int last = -1;
  for (int step = 0; step < kv_steps + grad_steps; ++step) {
    const bool kv = step < kv_steps;
    Op send = ring_send(layer, unit, micro,
                        kv ? attention->kv_bytes_per_ring_step : attention->grad_kv_bytes_per_ring_step,
                        kv ? plan_.training.precision.param_compute_bytes : kGradKvElementBytes, attention->degree);
    if (before >= 0) send.deps.push_back(before);
    if (step == 0) send.allocates.push_back({MemoryCategory::comm_buffers, buffer});
    if (step + 1 == kv_steps + grad_steps && pass != ComputePass::backward) {
      send.frees.push_back({MemoryCategory::comm_buffers, buffer});
    }
    last = emit(std::move(send));
  }
  return last;
}

void Lowerer::finish_ring(std::size_t layer, int unit, int micro, ComputePass pass, int pass_op, int last_send) {
  if (last_send < 0) return;
  if (pass == ComputePass::backward) {
    // The dK/dV sent after the last step brings each rank its own gradients; nothing is left to hide it.
    const auto& attention = *ring_attention(layer);
    Op send = ring_send(layer, unit, micro, attention.grad_kv_bytes_per_ring_step, kGradKvElementBytes,
                        attention.degree);
    send.deps.push_back(pass_op);
    send.frees.push_back({MemoryCategory::comm_buffers, ring_buffer_bytes(attention, pass)});
    last_send = emit(std::move(send));
  }
  compute_waits_for_ = last_send;
}

}  // namespace shardplan::lowering_internal
