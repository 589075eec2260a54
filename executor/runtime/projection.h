// A decoder block's linear projection by module name, with its LoRA adapter where the layer has one: forward, backward.
#pragma once

#include "layer_kernel.h"
#include "linear.h"

namespace shardplan::runtime {

// Note [LoRA projection]: PEFT's lora.Linear (peft/tuners/lora/layer.py, Linear.forward) computes
// y = base(x) + lora_B(lora_A(dropout(x))) · scaling, scaling = lora_alpha / r, with dropout the identity here
// (decoder_dims refuses lora_dropout > 0). With u = x·Aᵀ [tokens × r] and z = u·Bᵀ: forward keeps u (lora_B's input,
// what autograd saves; LoRA's r kept elements per token in costmodel/finetune_apply.cpp) as "<module>.lora_A.out";
// backward, with dz = scaling·dy: dB += dzᵀ·u, du = dz·B, dA += duᵀ·x and dx += du·A. The frozen base weight's
// gradient is not computed (its grad view is null, param_layout.h bind_unit_grads); the input gradient is.

// y[tokens × out] = x·Wᵀ (+ b) (+ LoRA) for module `module` ("self_attn.q_proj") of `params`: tensors
// "<module>.weight", optionally "<module>.bias", "<module>.lora_A.weight" and "<module>.lora_B.weight".
void projection_forward(const DecoderDims& dims, const LayerParams& params, const std::string& module,
                        const LinearShape& shape, const float* x, SavedActivations& saved, float* y);

// Given dy: adds the gradients of the module's tensors that have a gradient view into `grads` and writes dx (added to
// dx when accumulate_dx), as linear_backward.
void projection_backward(const DecoderDims& dims, const LayerParams& params, const std::string& module,
                         const LinearShape& shape, const float* x, const SavedActivations& saved, const float* dy,
                         float* dx, bool accumulate_dx, const LayerParams& grads);

}  // namespace shardplan::runtime
