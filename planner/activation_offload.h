// Activation offloading (--activation-offload): which layers' kept activations a plan moves to host memory, and how
// many bytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "model_spec.h"
#include "plan.h"

namespace shardplan {

// Note [Activation offloading]: torchtune's enable_activation_offloading (torchtune/training/_activation_offloading.py,
// OffloadActivations, a saved_tensors_hooks context around the model's forward):
// - pack_tensor copies every saved tensor of at least min_offload_size (1024) bytes that is not a parameter or buffer
//   into pinned CPU memory (torch.empty_like(..., pin_memory=True), copy_(non_blocking=True)) on a side stream s1
//   after s1.wait_stream(s0), and keeps the device tensor in fwd_stash until max_fwd_stash_size (5) saved tensors
//   later, where the compute stream waits for the copy's event and the device tensor goes.
// - unpack_tensor_with_streams brings a tensor back on s1 (.to("cuda", non_blocking=True)) when the autograd engine
//   unpacks it for its node, and the compute stream waits for it (s0.wait_stream(s1)); it is freed after its node.
// - get_act_offloading_ctx_manager wraps the output head's forward in a NoOpManager: "All but the last output Linear
//   in every step will be offloaded".
// What the schedule charges, by layer (the lowering's grain; lowering_offload.cpp): every layer but the output head
// (LayerKind::lm_head) moves what its forward keeps for backward (kept_activation_bytes; under checkpointing the
// checkpoint's saved inputs) to the host. Its forward op allocates those bytes as without offload; a device_to_host
// op on the copy stream (StreamKind::device_to_host), issued after it, frees them when the copy ends; the next
// layer's forward does not wait for it, the one after does (the stash's 5 tensors are fewer than a transformer block
// saves, so the compute stream waits for a block's copies within the next block). In backward, a host_to_device op
// allocates the layer's bytes at its start and the layer's recompute or backward waits for it (s0.wait_stream(s1)); it
// is issued when the previous layer's backward is (the autograd engine's thread unpacks ahead of the GPU) and once the
// layer's copy out has ended (where torchtune would still find the tensor in its stash and copy nothing), so at most
// two layers' kept activations are on the device at once in each pass where one would be without the copies.
// Each copy takes bytes / the host link (host_copy_time_s, HardwareProfile::pcie_bytes_per_s). The host holds every
// offloaded layer's bytes of one micro-batch at once (backward frees them before the next micro-batch's forward), in
// pinned memory (host_memory.h). Tensors under 1024 bytes are not told apart: a layer's kept set is copied whole.
std::int64_t offloaded_activation_bytes(const Plan& plan, const ModelSpec& model, std::size_t layer);

// The host bytes one rank's offloaded activations need: Σ offloaded_activation_bytes over the layers.
std::int64_t host_activation_bytes(const Plan& plan, const ModelSpec& model);

}  // namespace shardplan
