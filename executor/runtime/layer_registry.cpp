// make_layer_kernel: picks the kernel for a LayerSpec's kind and checks the tensors it will read are in the spec.
#include <utility>

#include "errors.h"
#include "layer_kernel.h"
#include "ring_attention.h"
#include "tensor_parallel_group.h"
#include "tensor_parallel_model.h"

namespace shardplan::runtime {
namespace {

using Shape = std::vector<std::int64_t>;
using ExpectedTensors = std::vector<std::pair<std::string, Shape>>;

ExpectedTensors expected_tensors(LayerKind kind, const DecoderDims& dims) {
  const std::int64_t h = dims.hidden_size, q = dims.q_dim(), kv = dims.kv_dim(), f = dims.intermediate_size;
  const std::int64_t v = dims.vocab_size;
  switch (kind) {
    case LayerKind::embedding:
    case LayerKind::lm_head: return {{"weight", {v, h}}};
    case LayerKind::norm: return {{"weight", {h}}};
    case LayerKind::transformer_block: {
      ExpectedTensors expected = {{"input_layernorm.weight", {h}},        {"self_attn.q_proj.weight", {q, h}},
                                  {"self_attn.k_proj.weight", {kv, h}},   {"self_attn.v_proj.weight", {kv, h}},
                                  {"self_attn.o_proj.weight", {h, q}},    {"post_attention_layernorm.weight", {h}},
                                  {"mlp.gate_proj.weight", {f, h}},       {"mlp.up_proj.weight", {f, h}},
                                  {"mlp.down_proj.weight", {h, f}}};
      if (dims.attention_bias) {
        expected.push_back({"self_attn.q_proj.bias", {q}});
        expected.push_back({"self_attn.k_proj.bias", {kv}});
        expected.push_back({"self_attn.v_proj.bias", {kv}});
      }
      return expected;
    }
    case LayerKind::other: break;
  }
  return {};
}

std::string shape_text(const Shape& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// The spec's tensors must be exactly the ones the kernel reads: a missing or reshaped tensor would make the kernel
// read the wrong elements of the flat parameter, an extra one would be silently left untrained.
void check_tensors(const ModelSpec& model, const LayerSpec& layer, const LayerSpec& owner, const DecoderDims& dims) {
  const ExpectedTensors expected = expected_tensors(layer.kind, dims);
  const std::string where = "model '" + model.name + "', layer '" + layer.name + "'";
  for (const auto& [name, shape] : expected) {
    const TensorSpec* found = nullptr;
    for (const auto& tensor : owner.tensors) {
      if (tensor.name == name) found = &tensor;
    }
    if (found == nullptr) throw InputError(where + ": expected a tensor '" + name + "' " + shape_text(shape));
    if (found->shape != shape) {
      throw InputError(where + ": tensor '" + name + "': expected shape " + shape_text(shape) + ", got " +
                       shape_text(found->shape));
    }
  }
  if (owner.tensors.size() != expected.size()) {
    throw InputError(where + ": expected " + std::to_string(expected.size()) + " tensors, got " +
                     std::to_string(owner.tensors.size()));
  }
}

}  // namespace

std::unique_ptr<LayerKernel> make_layer_kernel(const ModelSpec& model, std::size_t index) {
  const DecoderDims dims = decoder_dims(model);
  if (index >= model.layers.size()) {
    throw InternalError("layer index " + std::to_string(index) + " out of range for model '" + model.name + "'");
  }
  const LayerSpec& layer = model.layers[index];
  const std::size_t owner_index = layer.tied_to_layer.value_or(index);
  if (owner_index > index) throw InputError("model '" + model.name + "': layer '" + layer.name + "' tied forward");
  check_tensors(model, layer, model.layers[owner_index], dims);
  switch (layer.kind) {
    case LayerKind::embedding: return make_embedding_layer(dims);
    case LayerKind::transformer_block: return make_decoder_block(dims);
    case LayerKind::norm: return make_rmsnorm_layer(dims);
    case LayerKind::lm_head: return make_lm_head_loss(dims);
    case LayerKind::other: break;
  }
  throw InputError("model '" + model.name + "', layer '" + layer.name +
                   "': kind 'other' has no CPU runtime kernel; expected embedding, transformer_block, norm or lm_head");
}

std::unique_ptr<LayerKernel> make_tensor_parallel_layer_kernel(const ModelSpec& rank_model, std::size_t index,
                                                               const AttentionShape& whole,
                                                               TensorParallelGroup& group,
                                                               ContextParallelGroup* ring) {
  if (index >= rank_model.layers.size() || rank_model.layers[index].kind == LayerKind::norm) {
    return make_layer_kernel(rank_model, index);  // whole scale, on the sequence shard (Note [Tensor-parallel split])
  }
  const DecoderDims rank_dims = tensor_parallel_dims(decoder_dims(rank_model), group.degree());
  const LayerSpec& layer = rank_model.layers[index];
  const std::size_t owner = layer.tied_to_layer.value_or(index);
  if (owner > index) throw InputError("model '" + rank_model.name + "': layer '" + layer.name + "' tied forward");
  check_tensors(rank_model, layer, rank_model.layers[owner], rank_dims);
  switch (layer.kind) {
    case LayerKind::embedding: return make_vocab_parallel_embedding(rank_dims, group);
    case LayerKind::transformer_block: return make_sequence_parallel_block(rank_dims, whole, group, ring);
    case LayerKind::lm_head: return make_loss_parallel_head(rank_dims, group);
    case LayerKind::norm:
    case LayerKind::other: break;
  }
  return make_layer_kernel(rank_model, index);  // InputError for a kind the runtime has no kernel for
}

std::unique_ptr<LayerKernel> make_context_parallel_layer_kernel(const ModelSpec& model, std::size_t index,
                                                                ContextParallelGroup& ring) {
  std::unique_ptr<LayerKernel> kernel = make_layer_kernel(model, index);  // its checks
  if (kernel->kind() != LayerKind::transformer_block) return kernel;
  return make_context_parallel_block(decoder_dims(model), ring);
}

}  // namespace shardplan::runtime
