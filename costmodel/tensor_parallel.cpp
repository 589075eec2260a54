// One TP rank's view of a model under Megatron-style tensor parallelism (Note [Tensor parallelism]).
#include "tensor_parallel.h"

#include "errors.h"

namespace shardplan {
namespace {

enum class Split { none, column, row };

std::int64_t share(std::int64_t count, int degree) { return (count + degree - 1) / degree; }  // the largest shard

bool name_has(const std::string& name, const char* part) { return name.find(part) != std::string::npos; }

// Which way a block's tensor or projection is split, by its module name (torchtitan's layer plan, HF names).
Split block_split(const std::string& name) {
  for (const char* column : {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "c_attn", "c_fc"}) {
    if (name_has(name, column)) return Split::column;
  }
  for (const char* row : {"o_proj", "down_proj", "c_proj"}) {
    if (name_has(name, row)) return Split::row;
  }
  return Split::none;
}

// HF nn.Linear weights are [out, in]; GPT-2's Conv1D weights are [in, out]. A column split divides the output
// features (and the bias); a row split the input features (its bias stays whole, added after the reduction).
void split_tensor(TensorSpec& tensor, Split split, bool conv1d, int degree) {
  if (split == Split::none || tensor.shape.empty()) return;
  const bool bias = tensor.shape.size() == 1;
  if (bias) {
    if (split == Split::column) tensor.shape[0] = share(tensor.shape[0], degree);
    return;
  }
  const std::size_t out_dim = conv1d ? 1 : 0, in_dim = conv1d ? 0 : 1;
  std::int64_t& dim = tensor.shape[split == Split::column ? out_dim : in_dim];
  dim = share(dim, degree);
}

void scale_traffic(ElementwiseTraffic& traffic, double factor) {
  traffic.act_elements *= factor;
  traffic.fp32_elements *= factor;
  traffic.byte_elements *= factor;
}

ActivationCollectiveSpec collective(ActivationCollective kind, double elements, bool recomputed = true) {
  ActivationCollectiveSpec spec;
  spec.kind = kind;
  spec.elements_per_token = elements;
  spec.recomputed_by_op_policy = recomputed;
  return spec;
}

// Note [Sequence-parallel parameter gradients]: a tensor left whole on a layer that runs on the sequence shard (norm
// scales and biases, a row-parallel projection's bias added after the reduce-scatter, GPT-2's position table) gets
// from each TP rank the gradient of its own tokens only. DTensor holds it as Replicate and the op's gradient comes out
// Partial, so autograd's redistribution to the parameter's placement all-reduces it over the TP group, one per
// tensor (as Megatron-LM sums the sequence-parallel layernorm gradients over the TP group,
// megatron/core/distributed/finalize_model_grads.py _allreduce_layernorm_grads). Listed after the pass's activation
// collectives, in tensor order; the executor runs them after the layer's backward (Note [Replicated gradients] in
// executor/runner/tensor_parallel_runner.h).
void add_gradient_all_reduces(const LayerSpec& layer, const std::vector<bool>& whole,
                              std::vector<ActivationCollectiveSpec>& backward) {
  for (std::size_t i = 0; i < layer.tensors.size(); ++i) {
    if (!whole[i]) continue;
    ActivationCollectiveSpec spec;
    spec.kind = ActivationCollective::all_reduce;
    spec.elements = static_cast<double>(layer.tensors[i].element_count());
    spec.gradient_of = layer.tensors[i].name;
    backward.push_back(spec);
  }
}

void shard_block(LayerSpec& layer, const DecoderArchitecture& arch, const TensorParallelStyle& style) {
  const double t = style.degree, h = static_cast<double>(arch.hidden_size);
  const bool conv1d = arch.family == DecoderArchitecture::Family::gpt2;
  std::vector<bool> whole;
  for (TensorSpec& tensor : layer.tensors) {
    const Split split = block_split(tensor.name);
    split_tensor(tensor, split, conv1d, style.degree);
    // A column-parallel bias is split with its weight; a row-parallel one stays whole (split_tensor).
    whole.push_back(split == Split::none || (split == Split::row && tensor.shape.size() == 1));
  }
  layer.flops.matmul_flops_per_token /= t;
  layer.flops.attention_flops_per_token_per_position /= t;
  layer.flops.frozen_weight_flops_per_token /= t;

  // Korthikanti et al. 2022 §4.2 / Table 2: of a block's kept tensors, the two norm inputs and the two
  // column-parallel inputs (4h per token in both families) sit outside the TP regions; everything else is split.
  ActivationFootprint& a = layer.activations;
  const double sequence_share = style.sequence_parallel ? 1.0 / t : 1.0;
  const double gathered_share = (!style.sequence_parallel || style.keeps_gathered_inputs) ? 1.0 : 1.0 / t;
  const double outside = 4.0 * h;
  a.elements_per_token = (a.elements_per_token - outside) / t + 2.0 * h * sequence_share + 2.0 * h * gathered_share;
  a.mask_bytes_per_token *= sequence_share;  // GPT-2's dropouts after attention and MLP: in the sequence region
  a.score_elements_per_token_per_position /= t;
  a.score_mask_bytes_per_token_per_position /= t;
  a.flash_stat_bytes_per_token /= t;
  // Note [Eager composite activations]: the RMSNorms run on the sequence region; repeat_kv's copies and the fp32
  // softmax output are per head, split.
  a.eager_norm_elements_per_token *= sequence_share;
  a.eager_norm_fp32_elements_per_token *= sequence_share;
  a.eager_upcast_elements_per_token *= sequence_share;
  a.eager_attention_elements_per_token /= t;
  a.eager_score_fp32_elements_per_token_per_position /= t;
  // Full recompute keeps the block input (on the sequence shard); selective-op keeps it beside saved matmul outputs
  // and attention's output, all inside the TP regions.
  a.selective_op_elements_per_token = (a.selective_op_elements_per_token - a.checkpoint_elements_per_token) / t +
                                      a.checkpoint_elements_per_token * sequence_share;
  a.checkpoint_elements_per_token *= sequence_share;

  LayerKernelSpec& kernels = *layer.kernels;
  for (ProjectionSpec& projection : kernels.projections) {
    const Split split = block_split(projection.name);
    if (split == Split::column) projection.out_features = share(projection.out_features, style.degree);
    if (split == Split::row) projection.in_features = share(projection.in_features, style.degree);
  }
  if (kernels.attention) kernels.attention->heads = share(kernels.attention->heads, style.degree);
  // Norms, residual adds and dropouts run on the sequence shard (with sequence parallelism) and the activation
  // functions on the split FFN width: every memory-bound kernel's traffic is divided, or without sequence parallelism
  // only those inside the TP regions.
  for (ElementwiseSpec& elementwise : kernels.elementwise) {
    const bool sequence_region = name_has(elementwise.name, "norm") || name_has(elementwise.name, "residual") ||
                                 name_has(elementwise.name, "dropout");
    const double factor = sequence_region ? sequence_share : 1.0 / t;
    scale_traffic(elementwise.forward, factor);
    scale_traffic(elementwise.backward, factor);
  }
  using AC = ActivationCollective;
  if (style.sequence_parallel) {
    // Forward: all-gather before attention, reduce-scatter after o_proj, likewise around the MLP. Backward: each
    // all-gather's gradient is a reduce-scatter and each reduce-scatter's an all-gather (Korthikanti §4.2.2).
    kernels.tp_forward = {collective(AC::all_gather, h), collective(AC::reduce_scatter, h, false),
                          collective(AC::all_gather, h), collective(AC::reduce_scatter, h, false)};
    kernels.tp_backward = {collective(AC::all_gather, h), collective(AC::reduce_scatter, h),
                           collective(AC::all_gather, h), collective(AC::reduce_scatter, h)};
    if (!style.keeps_gathered_inputs) {  // Megatron-LM gathers the column-parallel inputs again for dW
      kernels.tp_backward.push_back(collective(AC::all_gather, h));
      kernels.tp_backward.push_back(collective(AC::all_gather, h));
    }
    add_gradient_all_reduces(layer, whole, kernels.tp_backward);
  } else {
    // Megatron's f and g: an all-reduce after each row-parallel output in forward, before each column-parallel
    // input's gradient in backward.
    kernels.tp_forward = {collective(AC::all_reduce, h), collective(AC::all_reduce, h)};
    kernels.tp_backward = {collective(AC::all_reduce, h), collective(AC::all_reduce, h)};
  }
}

// Note [Loss-parallel workspaces]: torch/distributed/tensor/parallel/loss.py replaces the fused log_softmax and
// nll_loss kernels by decompositions with collectives inserted. _log_softmax (after torch._decomp's) allocates
// `shifted = x - x_max`, `torch.exp(shifted)` and `shifted - shifted_logsumexp`, each a new fp32 tensor of the
// rank's V/t logits per token: beside the float upcast x, shifted and exp(shifted) are alive before the kept output
// exists, and shifted beside it after — 2 workspaces of V/t fp32 per token (the fused kernel: the upcast only, 1).
// _nll_loss_and_log_softmax_backward computes `(grad_input + torch.exp(x)) * grad_output` with grad_input =
// zeros_like(x): zeros, exp(x) and their sum are alive together beside the kept log-softmax output — 3 (the fused
// backward: nll_loss's gradient and log_softmax's, 2; decoder_builder.cpp lm_head).
void shard_outer_layer(LayerSpec& layer, const DecoderArchitecture& arch, const TensorParallelStyle& style,
                       bool vocab_embedding) {
  const double t = style.degree, h = static_cast<double>(arch.hidden_size);
  const double sequence_share = style.sequence_parallel ? 1.0 / t : 1.0;
  LayerKernelSpec& kernels = *layer.kernels;
  ActivationFootprint& a = layer.activations;
  using AC = ActivationCollective;
  if (layer.kind == LayerKind::lm_head) {
    // ColwiseParallel over the vocabulary with loss parallel: weight, GEMM, logits and the fp32 loss split t ways;
    // its input gathered (and kept whole, as the linear saves it) under sequence parallelism.
    for (TensorSpec& tensor : layer.tensors) tensor.shape[0] = share(tensor.shape[0], style.degree);
    layer.flops.matmul_flops_per_token /= t;
    layer.flops.frozen_weight_flops_per_token /= t;
    a.elements_per_token = h + (a.elements_per_token - h) / t;
    a.fp32_bytes_per_token /= t;
    // Loss parallel's cross-entropy is not the fused kernels' (Note [Loss-parallel workspaces]).
    const double vocab_share = static_cast<double>(share(arch.vocab_size, style.degree));
    a.forward_workspace_fp32_per_token = 2.0 * vocab_share;
    a.backward_workspace_fp32_per_token = 3.0 * vocab_share;
    a.backward_workspace_elements_per_token /= t;
    for (ProjectionSpec& projection : kernels.projections) {
      projection.out_features = share(projection.out_features, style.degree);
    }
    for (ElementwiseSpec& elementwise : kernels.elementwise) {
      scale_traffic(elementwise.forward, 1.0 / t);
      scale_traffic(elementwise.backward, 1.0 / t);
    }
    if (style.sequence_parallel) {
      kernels.tp_forward = {collective(AC::all_gather, h)};
      kernels.tp_backward = {collective(AC::reduce_scatter, h)};
    } else {
      kernels.tp_backward = {collective(AC::all_reduce, h)};
    }
    // Loss parallel (torch/distributed/tensor/parallel/loss.py, the cross-entropy on vocabulary-sharded logits):
    // _log_softmax all-reduces each token's maximum (MAX) and its sum of exponentials (SUM), _nll_loss_forward the
    // target's log-probability (its _MaskPartial reduction), one fp32 value per token each (torchtitan's
    // cross_entropy_loss casts the logits to float); the fused backward (_nll_loss_and_log_softmax_backward) needs
    // no collective.
    for (int statistic = 0; statistic < 3; ++statistic) {
      ActivationCollectiveSpec spec = collective(AC::all_reduce, 1.0);
      spec.fp32 = true;
      kernels.tp_forward.push_back(spec);
    }
    return;
  }
  // The token embedding: RowwiseParallel over the vocabulary, its partial output reduced onto the sequence shards
  // (reduce-scatter; all-reduce without sequence parallelism). Other embeddings (GPT-2's positions) and the final
  // norm stay whole and work on the sequence shard.
  if (vocab_embedding) {
    for (TensorSpec& tensor : layer.tensors) tensor.shape[0] = share(tensor.shape[0], style.degree);
    kernels.tp_forward = {collective(style.sequence_parallel ? AC::reduce_scatter : AC::all_reduce, h)};
    if (style.sequence_parallel) kernels.tp_backward = {collective(AC::all_gather, h)};
  }
  if (style.sequence_parallel) {  // Note [Sequence-parallel parameter gradients]: the tensors left whole
    add_gradient_all_reduces(layer, std::vector<bool>(layer.tensors.size(), !vocab_embedding), kernels.tp_backward);
  }
  a.elements_per_token *= sequence_share;
  a.mask_bytes_per_token *= sequence_share;
  for (ElementwiseSpec& elementwise : kernels.elementwise) {
    scale_traffic(elementwise.forward, sequence_share);
    scale_traffic(elementwise.backward, sequence_share);
  }
}

}  // namespace

TensorParallelStyle pytorch_tensor_parallel(int degree) {
  TensorParallelStyle style;
  style.degree = degree;
  style.sequence_parallel = true;       // torchtitan's apply_tp: SequenceParallel on the norms, Shard(1) residuals
  style.keeps_gathered_inputs = true;   // DTensor: the linear saves its redistributed (gathered) input
  return style;
}

ModelSpec tensor_parallel_shard(const ModelSpec& model, const TensorParallelStyle& style) {
  if (style.degree == 1) return model;
  SHARDPLAN_CHECK(style.degree > 1 && model.architecture, "tensor_parallel_shard: a degree > 1 and an architecture");
  const DecoderArchitecture& arch = *model.architecture;
  ModelSpec shard = model;
  bool first_embedding = true;
  for (LayerSpec& layer : shard.layers) {
    SHARDPLAN_CHECK(layer.kernels.has_value(), "tensor_parallel_shard: layer '" + layer.name + "' has no kernel spec");
    SHARDPLAN_CHECK(!layer.finetune, "tensor_parallel_shard: fine-tuned layers are not supported");
    layer.kernels->tensor_parallel_degree = style.degree;
    if (layer.kind == LayerKind::transformer_block) {
      shard_block(layer, arch, style);
    } else {
      shard_outer_layer(layer, arch, style, layer.kind == LayerKind::embedding && first_embedding);
      if (layer.kind == LayerKind::embedding) first_embedding = false;
    }
  }
  return shard;
}

}  // namespace shardplan
