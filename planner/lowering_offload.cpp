// The Lowerer's activation offload copies (Note [Activation offloading] in activation_offload.h): each layer's kept
// activations out to the host after its forward, back before its backward.
#include "activation_offload.h"
#include "lowerer.h"

namespace shardplan::lowering_internal {  // Note [Lowering] in lowering.h

namespace {

// A copy of `layer`'s kept activations, `bytes` of them in the compute dtype, to (device_to_host) or from the host.
Op make_offload_copy(OpKind kind, std::size_t layer, int unit, int micro, std::int64_t bytes, int element_bytes) {
  Op copy = make_op(kind, kind == OpKind::device_to_host ? StreamKind::device_to_host : StreamKind::host_to_device,
                    unit, micro);
  copy.layer = static_cast<int>(layer);
  copy.bytes = bytes;
  copy.element_bytes = element_bytes;
  return copy;
}

}  // namespace

int Lowerer::emit_copy_out(std::size_t layer, int unit, int micro, int forward) {
  const std::int64_t bytes = offloaded_activation_bytes(plan_, model_, layer);
  if (bytes <= 0) return -1;
  Op copy = make_offload_copy(OpKind::device_to_host, layer, unit, micro, bytes,
                              plan_.training.precision.param_compute_bytes);
  copy.deps.push_back(forward);  // pack_tensor: s1.wait_stream(s0)
  copy.frees.push_back({MemoryCategory::activations, bytes});
  if (copied_out_.size() != model_.layers.size()) copied_out_.assign(model_.layers.size(), -1);
  return copied_out_[layer] = emit(std::move(copy));
}

int Lowerer::emit_copy_in(std::size_t layer, int unit, int micro) {
  if (copied_in_.size() != model_.layers.size()) copied_in_.assign(model_.layers.size(), -1);
  if (copied_in_[layer] >= 0) return copied_in_[layer];
  const std::int64_t bytes = offloaded_activation_bytes(plan_, model_, layer);
  if (bytes <= 0) return -1;
  Op copy = make_offload_copy(OpKind::host_to_device, layer, unit, micro, bytes,
                              plan_.training.precision.param_compute_bytes);
  if (last_compute_ >= 0) copy.deps.push_back(last_compute_);
  // Back only once out: the host copy is complete (the copy stream's event in torchtune).
  if (layer < copied_out_.size() && copied_out_[layer] >= 0) copy.deps.push_back(copied_out_[layer]);
  copy.allocates.push_back({MemoryCategory::activations, bytes});
  return copied_in_[layer] = emit(std::move(copy));
}

}  // namespace shardplan::lowering_internal
