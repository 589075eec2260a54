// PassKernels of a layer pass: GEMM shapes from the projections, the attention core (flash or eager), memory traffic.
#include "pass_kernels.h"

#include <cmath>

#include "block_kernels.h"
#include "errors.h"

namespace shardplan {

double GemmCall::flops() const {
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) * batch;
}

double PassKernels::gemm_flops() const {
  double total = 0;
  for (const GemmCall& gemm : gemms) total += gemm.flops();
  return total;
}

double PassKernels::attention_flops() const {
  double total = 0;
  for (const AttentionCall& call : attention) total += call.flops;
  return total;
}

double PassKernels::flops() const { return gemm_flops() + attention_flops(); }

double PassKernels::kernel_count() const {
  return memory_kernels + static_cast<double>(attention.size()) + static_cast<double>(gemms.size()) +
         static_cast<double>(collectives.size());
}

namespace {

// Note [Derived kernels]: a layer from an explicit model file has FLOPs and activation sizes but no kernel list. Its
// matmul FLOPs become hidden × hidden GEMMs (a what-if layer's parameters are square projections of the model
// width), its attention FLOPs an attention core of the model's heads, and its memory-bound traffic the elements it
// keeps for backward, written once in forward and read back with their gradients in backward (Korthikanti et al.
// 2022's accounting of a GPT block's non-GEMM tensors), in eight kernels a block (a GPT-2 block's count).
LayerKernelSpec derived_kernel_spec(const ModelSpec& model, const LayerSpec& layer) {
  LayerKernelSpec spec;
  const std::int64_t hidden = std::max<std::int64_t>(1, model.hidden_size);
  const double square_params = static_cast<double>(hidden) * static_cast<double>(hidden);
  double projections = layer.flops.matmul_flops_per_token / (2.0 * square_params);
  // A layer's FLOPs over a tiny model width would be millions of tiny GEMMs (a fuzzed file's hidden_size 1 made 2·10^8
  // specs, 11 GB): past kMaxDerivedProjections they are fused k at a time into GEMMs k times wider, same FLOPs.
  constexpr double kMaxDerivedProjections = 4096;
  const double fused = projections > kMaxDerivedProjections ? std::ceil(projections / kMaxDerivedProjections) : 1.0;
  // Whole projections, and the remainder as one of a narrower output.
  while (projections >= fused) {
    spec.projections.push_back(
        {"derived", hidden, hidden * static_cast<std::int64_t>(fused), spec.projections.size() % 2 == 0});
    projections -= fused;
  }
  if (projections > 0) {
    const auto out = static_cast<std::int64_t>(std::max(1.0, projections * static_cast<double>(hidden)));
    spec.projections.push_back({"derived", hidden, out, spec.projections.size() % 2 == 0});
  }
  if (layer.flops.attention_flops_per_token_per_position > 0 && model.num_heads > 0) {
    // 4·h FLOPs per token per position for h = heads × head_dim (LayerFlops).
    const auto width = static_cast<std::int64_t>(layer.flops.attention_flops_per_token_per_position / 4.0);
    const std::int64_t heads = model.num_heads;
    spec.attention =
        AttentionSpec{heads, std::max<std::int64_t>(1, width / heads), layer.flops.causal_attention,
                      layer.flops.attention_window, layer.flops.attention_chunked};
  }
  const double kept = layer.activations.elements_per_token;
  if (kept > 0) {
    ElementwiseSpec traffic;
    traffic.name = "derived";
    const int kernels = layer.kind == LayerKind::transformer_block ? 8 : 1;
    traffic.forward = {kept, 0.0, layer.activations.mask_bytes_per_token, kernels};
    traffic.backward = {2.0 * kept, 0.0, layer.activations.mask_bytes_per_token, 2 * kernels};
    spec.elementwise.push_back(traffic);
  }
  if (layer.kind == LayerKind::embedding) spec.embedding_lookup = true;
  return spec;
}

bool projection_fp8(const ProjectionSpec& projection) {
  return projection.in_features % 16 == 0 && projection.out_features % 16 == 0 && !projection.frozen_weight &&
         !projection.quantized && projection.lora_rank == 0;
}

double element_bytes(const ElementwiseTraffic& traffic, int activation_bytes) {
  return traffic.act_elements * activation_bytes + traffic.fp32_elements * 4.0 + traffic.byte_elements;
}

struct PassShape {
  bool fp8_all_gather = false;       // the recipe's float8 (Note [Float8 training])
  bool fp8_layer = false;             // a transformer block: its eligible projections run in float8
  std::int64_t tokens = 0;
  std::int64_t sequences = 0;
  std::int64_t seq_len = 0;
  int activation_bytes = 2;
  bool flash = true;
  bool triton = false;
  int dequantized_bytes = 2;  // QLoRA: bnb_4bit_compute_dtype, what a 4-bit weight is dequantised to
  bool double_quant = false;
};

// Note [Dequantisation kernels]: bitsandbytes' matmul_4bit dequantises a 4-bit weight to the compute dtype before
// every GEMM that reads it — forward, and backward's input gradient (MatMul4Bit.backward: grad_output @
// dequantize_4bit(B).t()) — and frees the copy after it (planner/unit_layout.h, Note [Workspaces]). dequantize_4bit
// (bitsandbytes/functional.py) reads the packed codes (half a byte each) and the fp32 absmax per block of 64, writes
// the dequantised weight: one memory-bound kernel. With double quantisation it first dequantises the absmax values
// (dequantize_blockwise: one byte in, fp32 out per block) and adds their offset (fp32 read and write): two more
// kernels and 16 more bytes per block.
void add_dequantize(const ProjectionSpec& projection, const PassShape& shape, PassKernels& kernels) {
  const double elements = static_cast<double>(projection.in_features * projection.out_features);
  const double blocks = elements / 64.0;
  kernels.memory_bytes +=
      elements * (0.5 + shape.dequantized_bytes) + 4.0 * blocks + (shape.double_quant ? 16.0 * blocks : 0.0);
  kernels.memory_kernels += shape.double_quant ? 3 : 1;
}

// Note [LoRA kernels]: PEFT's lora.Linear.forward (peft/tuners/lora/layer.py) runs, beside the base layer,
// result = result + lora_B(lora_A(dropout(x))) * scaling: the dropout (when lora_dropout > 0: read and write the
// input, write a 1-byte mask), two GEMMs of rank r, the scaling multiply and the add (read out, write out; read 2·out,
// write out). Backward: the multiply's gradient (read and write out), each adapter's input and weight gradients (four
// rank-r GEMMs), the dropout's gradient, and the sum of the adapter's input gradient into the base layer's (read
// 2·in, write in).
// Which part of a backward pass is built (Note [Split backward] in pass_kernels.h).
enum class BackwardPart { whole, input, weight };

void add_lora(const ProjectionSpec& projection, const PassShape& shape, bool backward, PassKernels& kernels,
              BackwardPart part = BackwardPart::whole) {
  const std::int64_t t = shape.tokens, r = projection.lora_rank, in = projection.in_features,
                     out = projection.out_features;
  const double tokens = static_cast<double>(t), in_d = static_cast<double>(in), out_d = static_cast<double>(out);
  const auto traffic = [&](double act, double bytes, int count) {
    kernels.memory_bytes += tokens * (act * shape.activation_bytes + bytes);
    kernels.memory_kernels += count;
  };
  if (projection.lora_dropout) traffic(2.0 * in_d, in_d, 1);
  if (!backward) {
    kernels.gemms.push_back({t, r, in, 1.0});   // lora_A
    kernels.gemms.push_back({t, out, r, 1.0});  // lora_B
    traffic(5.0 * out_d, 0.0, 2);
    return;
  }
  // Note [Split backward]: the adapters' weight gradients are the weight part, the rest the input part.
  const bool input = part != BackwardPart::weight, weight = part != BackwardPart::input;
  if (input) traffic(2.0 * out_d, 0.0, 1);
  if (input) kernels.gemms.push_back({t, r, out, 1.0});   // lora_B: input gradient
  if (weight) kernels.gemms.push_back({out, r, t, 1.0});  // lora_B: weight gradient
  if (input) kernels.gemms.push_back({t, in, r, 1.0});    // lora_A: input gradient
  if (weight) kernels.gemms.push_back({r, in, t, 1.0});   // lora_A: weight gradient
  if (input) traffic(3.0 * in_d, 0.0, 1);
}

// softmax(QKᵀ)·V of one micro-batch. Flash: one kernel each way (FLOPs as in AttentionCall). Eager (the math path
// that materialises the scores, e.g. HF's eager attention and the CPU runtime): QKᵀ and P·V as batched GEMMs over
// sequences × heads, and the score tensor's traffic — scale, mask, softmax in fp32 and the cast back (HF
// eager_attention_forward): 6 activation-dtype and 2 fp32 elements per score in 4 kernels; backward four GEMMs (dP,
// dV, dQ, dK) and twice the score traffic.
void add_attention(const AttentionSpec& attention, const PassShape& shape, bool backward, PassKernels& kernels) {
  const double s = static_cast<double>(shape.seq_len);
  const double batch_heads = static_cast<double>(shape.sequences * attention.heads);
  if (shape.flash) {
    // FlashAttention-2 §3.1: masked blocks skipped (Notes [Sliding-window attention], [Chunked attention]).
    const double causal_share =
        masked_attention_share(shape.seq_len, attention.window, attention.causal, attention.chunked);
    const double forward = 4.0 * s * s * static_cast<double>(attention.head_dim) * batch_heads * causal_share;
    kernels.attention.push_back(
        {backward ? 2.5 * forward : forward, shape.seq_len, attention.head_dim, backward, shape.triton});
    return;
  }
  const std::int64_t d = attention.head_dim, sl = shape.seq_len;
  const double scores = s * s * batch_heads;
  if (!backward) {
    kernels.gemms.push_back({sl, sl, d, batch_heads});  // Q·Kᵀ
    kernels.gemms.push_back({sl, d, sl, batch_heads});  // P·V
    kernels.memory_bytes += scores * (6.0 * shape.activation_bytes + 8.0);
    kernels.memory_kernels += 4;
  } else {
    kernels.gemms.push_back({sl, sl, d, batch_heads});  // dP = dO·Vᵀ
    kernels.gemms.push_back({sl, d, sl, batch_heads});  // dV = Pᵀ·dO
    kernels.gemms.push_back({sl, d, sl, batch_heads});  // dQ = dS·K
    kernels.gemms.push_back({sl, d, sl, batch_heads});  // dK = dSᵀ·Q
    kernels.memory_bytes += scores * (12.0 * shape.activation_bytes + 16.0);
    kernels.memory_kernels += 8;
  }
}

void add_elementwise(const ElementwiseTraffic& traffic, const PassShape& shape, PassKernels& kernels) {
  kernels.memory_bytes += element_bytes(traffic, shape.activation_bytes) * static_cast<double>(shape.tokens);
  kernels.memory_kernels += traffic.kernels;
}

void add_collectives(const LayerKernelSpec& spec, const std::vector<ActivationCollectiveSpec>& collectives,
                     const PassShape& shape, bool only_recomputed_by_op_policy, PassKernels& kernels) {
  for (const ActivationCollectiveSpec& collective : collectives) {
    if (only_recomputed_by_op_policy && !collective.recomputed_by_op_policy) continue;
    const double element_bytes = collective.fp32 ? 4.0 : shape.activation_bytes;
    const double bytes =
        (collective.elements_per_token * static_cast<double>(shape.tokens) + collective.elements) * element_bytes;
    kernels.collectives.push_back({collective.kind, static_cast<std::int64_t>(bytes), spec.tensor_parallel_degree});
  }
}

// Note [Float8 casts]: torchao's Float8Linear casts each GEMM operand to float8 before torch._scaled_mm: an amax
// reduction (read the bf16 tensor) and a scaled cast (read it again, write 1 byte per element), 5 bytes per element in
// 2 kernels, for tensorwise and rowwise scaling alike (rowwise takes its amax along rows). Forward casts the input and
// the weight — not the weight when FSDP all-gathered it in float8 already (its cast ran on the shard, before the
// gather). Backward casts the output gradient and, as torchao saves the high-precision input and weight
// (matmul_with_hp_or_float8_args), the input again for dW and the weight again for dX (an fp8 weight is transposed
// instead: read and write 1 byte per element).
void add_fp8_casts(const ProjectionSpec& projection, const PassShape& shape, bool backward, PassKernels& kernels) {
  const double tokens = static_cast<double>(shape.tokens), in = static_cast<double>(projection.in_features),
               out = static_cast<double>(projection.out_features);
  constexpr double kCastBytesPerElement = 5.0;  // amax read 2 + cast read 2 + write 1
  const double weight_bytes = shape.fp8_all_gather ? (backward ? 2.0 * in * out : 0.0) : kCastBytesPerElement * in * out;
  const double casts = backward ? tokens * (out + in) : tokens * in;
  kernels.memory_bytes += kCastBytesPerElement * casts + weight_bytes;
  kernels.memory_kernels += (backward ? 4 : 2) + (weight_bytes > 0 ? 2 : 0);
}

// The forward kernels, all of them or (for a selective-op recompute) those the policy reruns.
void add_forward(const LayerKernelSpec& spec, const PassShape& shape, bool only_recomputed_by_op_policy,
                 PassKernels& kernels) {
  for (const ProjectionSpec& projection : spec.projections) {
    if (only_recomputed_by_op_policy && projection.saved_by_op_policy) continue;
    if (projection.quantized) add_dequantize(projection, shape, kernels);
    const bool fp8 = shape.fp8_layer && projection_fp8(projection);
    if (fp8) add_fp8_casts(projection, shape, false, kernels);
    kernels.gemms.push_back({shape.tokens, projection.out_features, projection.in_features, 1.0, fp8});
    if (projection.lora_rank > 0) add_lora(projection, shape, false, kernels);
  }
  if (spec.attention && !only_recomputed_by_op_policy) add_attention(*spec.attention, shape, false, kernels);
  for (const ElementwiseSpec& elementwise : spec.elementwise) {
    if (only_recomputed_by_op_policy && !elementwise.recomputed_by_op_policy) continue;
    add_elementwise(elementwise.forward, shape, kernels);
  }
  add_collectives(spec, spec.tp_forward, shape, only_recomputed_by_op_policy, kernels);
}

// The backward kernels, or one part of them (Note [Split backward] in pass_kernels.h).
void add_backward(const LayerKernelSpec& spec, const PassShape& shape, BackwardPart part, PassKernels& kernels) {
  const bool input = part != BackwardPart::weight, weight = part != BackwardPart::input;
  for (const ProjectionSpec& projection : spec.projections) {
    if (projection.lora_rank > 0) add_lora(projection, shape, true, kernels, part);
    if (input && projection.quantized) add_dequantize(projection, shape, kernels);
    // dX = dY·W (tokens × in × out) and dW = dYᵀ·X (out × in × tokens); a frozen weight needs no dW.
    const bool fp8 = shape.fp8_layer && projection_fp8(projection);
    if (input && fp8) add_fp8_casts(projection, shape, true, kernels);
    if (input) kernels.gemms.push_back({shape.tokens, projection.in_features, projection.out_features, 1.0, fp8});
    if (weight && !projection.frozen_weight) {
      kernels.gemms.push_back({projection.out_features, projection.in_features, shape.tokens, 1.0, fp8});
    }
  }
  if (!input) return;
  if (spec.attention) add_attention(*spec.attention, shape, true, kernels);
  for (const ElementwiseSpec& elementwise : spec.elementwise) add_elementwise(elementwise.backward, shape, kernels);
  add_collectives(spec, spec.tp_backward, shape, false, kernels);
}

}  // namespace

bool runs_in_fp8(const LayerSpec& layer, const ProjectionSpec& projection) {
  return layer.kind == LayerKind::transformer_block && projection_fp8(projection);
}

std::int64_t fp8_weight_elements(const LayerSpec& layer) {
  if (layer.kind != LayerKind::transformer_block || !layer.kernels) return 0;
  std::int64_t elements = 0;
  for (const ProjectionSpec& projection : layer.kernels->projections) {
    if (runs_in_fp8(layer, projection)) elements += projection.in_features * projection.out_features;
  }
  return elements;
}

LayerKernelSpec effective_kernel_spec(const ModelSpec& model, const LayerSpec& layer) {
  if (layer.kernels) return *layer.kernels;
  return derived_kernel_spec(model, layer);
}

PassKernels pass_kernels(const ModelSpec& model, std::size_t layer_index, const TrainingConfig& training,
                         ComputePass pass, ActivationCheckpointing checkpointing) {
  SHARDPLAN_CHECK(layer_index < model.layers.size(), "pass_kernels: layer index out of range");
  const LayerSpec& layer = model.layers[layer_index];
  LayerKernelSpec derived;
  if (!layer.kernels) derived = derived_kernel_spec(model, layer);
  const LayerKernelSpec& spec = layer.kernels ? *layer.kernels : derived;
  PassShape shape;
  // Note [Tokens per sample] (model_spec.h): the layer's own tokens, over which its attention spans.
  shape.tokens = training.tokens_per_micro_batch(layer);
  shape.sequences = training.micro_batch;
  shape.seq_len = layer.tokens_per_sample(training.seq_len);
  shape.activation_bytes = training.precision.param_compute_bytes;
  shape.flash = training.flash_attention;
  shape.triton = training.attention_kernel == AttentionKernel::triton;
  shape.dequantized_bytes = dtype_bytes(training.finetune.quant_compute(training.precision));
  shape.double_quant = training.finetune.bnb.use_double_quant;
  shape.fp8_all_gather = training.precision.fp8_all_gather;
  shape.fp8_layer = training.precision.uses_fp8() && layer.kind == LayerKind::transformer_block;
  // A layer no trainable parameter precedes is never recorded by autograd: no backward, nothing to recompute.
  const bool backward_runs = !layer.finetune || layer.finetune->backward_needed;
  PassKernels kernels;
  switch (pass) {
    case ComputePass::forward:
      add_forward(spec, shape, false, kernels);
      return kernels;
    case ComputePass::recompute:
      // Only transformer blocks are checkpointed (LayerSpec::activation_bytes_per_token).
      if (layer.kind != LayerKind::transformer_block || !backward_runs) return kernels;
      switch (checkpointing) {
        case ActivationCheckpointing::none: return kernels;
        case ActivationCheckpointing::full: add_forward(spec, shape, false, kernels); return kernels;
        case ActivationCheckpointing::selective:
          // Korthikanti et al. 2022 §5: the attention core only; a flash kernel's backward recomputes it anyway.
          if (spec.attention && !shape.flash) add_attention(*spec.attention, shape, false, kernels);
          return kernels;
        case ActivationCheckpointing::selective_op: add_forward(spec, shape, true, kernels); return kernels;
      }
      return kernels;
    case ComputePass::backward:
    case ComputePass::backward_input:
    case ComputePass::backward_weight:
      if (!backward_runs) return kernels;
      add_backward(spec, shape,
                   pass == ComputePass::backward         ? BackwardPart::whole
                   : pass == ComputePass::backward_input ? BackwardPart::input
                                                         : BackwardPart::weight,
                   kernels);
      return kernels;
  }
  throw InternalError("unknown ComputePass " + std::to_string(static_cast<int>(pass)));
}

}  // namespace shardplan
