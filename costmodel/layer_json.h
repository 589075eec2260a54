// A layer's exact description in a model document: its FLOPs, kept activations, kernels and routing, written and read.
#pragma once

#include <nlohmann/json.hpp>

#include "json_input.h"
#include "model_spec.h"

namespace shardplan {

// Note [Exact layers]: a model written by to_json(const ModelSpec&) must read back as the same model, or the estimate
// of the file differs from the estimate of the model it was written from (issue 35: sliding windows and Llama 4's
// attention chunks were lost, so a windowed model's attention was charged over every position). Beside the keys a
// hand-written layer uses (model_json.h), a written layer carries four objects, each optional when read:
//   "flops":       {"matmul_flops_per_token", "attention_flops_per_token_per_position", "frozen_weight_flops_per_token",
//                   "causal", "attention_window", "attention_chunked"} (LayerFlops; attention_window 0: every earlier
//                   position; attention_chunked: the window is a chunk each query attends within, which needs a window)
//   "activations": every ActivationFootprint field under its C++ name (elements_per_token, ..., fp32_tensor_count)
//   "kernels":     {"projections": [{"name", "in_features", "out_features", "saved_by_op_policy"}],
//                   "attention": {"heads", "head_dim", "causal", "window", "chunked"},
//                   "elementwise": [{"name", "forward": {"act_elements", "fp32_elements", "byte_elements",
//                   "kernels"}, "backward": {...}, "recomputed_by_op_policy"}], "embedding_lookup"} (LayerKernelSpec)
//   "moe":         {"num_experts", "experts_per_token", "capacity_factor", "hidden_size", "routed_expert_elements"}
// A NoPE layer (Llama 4's every fourth) is a layer whose window is 0 and whose kernels list no RoPE: both are here.
// What is not written: a fine-tuning's resolution of the layer and tensor parallelism's shard of its kernels, both
// derived from the base model after it is read (finetune_apply.h, tensor_parallel.h), so a written model is a base one.
nlohmann::json layer_detail_to_json(const LayerSpec& layer);

// Reads the objects above present in `entry` into `layer`, over what the hand-written keys gave; every bad value is an
// InputError naming its field.
void read_layer_detail(const JsonObjectReader& entry, LayerSpec& layer);

}  // namespace shardplan
