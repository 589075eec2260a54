// The kernel specs of the decoder builder's layers (Llama-family and GPT-2/MPT blocks, embeddings, final norms, the
// LM head with its loss): which GEMMs, attention core and memory-bound kernels PyTorch eager runs for each.
#pragma once

#include <cstdint>
#include <string>

#include "kernel_spec.h"
#include "model_spec.h"

namespace shardplan {

// A memory-bound kernel (Note [Elementwise traffic] in block_kernels.cpp): forward reads and writes `act`
// activation-dtype and `fp32` fp32 elements per token in `kernels` launches; backward about twice that.
ElementwiseSpec elementwise_kernel(std::string name, double act, double fp32, int kernels);

LayerKernelSpec llama_block_kernels(const DecoderArchitecture& arch);
LayerKernelSpec gpt2_block_kernels(const DecoderArchitecture& arch);
// A token (or position) lookup; `adds_to_input` for GPT-2's position embedding, which adds onto the token embedding.
LayerKernelSpec embedding_kernels(std::int64_t hidden, bool adds_to_input, double dropout);
// RMSNorm (Llama, as HF's LlamaRMSNorm runs it) or LayerNorm (GPT-2, MPT: one fused kernel).
LayerKernelSpec final_norm_kernels(std::int64_t hidden, bool layer_norm);
// The output projection and the cross-entropy over the vocabulary in fp32.
LayerKernelSpec lm_head_kernels(std::int64_t hidden, std::int64_t vocab);

// What torchtitan's selective-op policy keeps of a block, per token, in activation-dtype elements (Note [Selective-op
// checkpointing] in pass_kernels.h): the block input, the saved matmuls' outputs and the attention output.
double selective_op_kept_elements(const LayerKernelSpec& spec, std::int64_t hidden);

}  // namespace shardplan
