// Reader for `shardplan.model/v1` model files: an architecture block built by the decoder builder, or explicit layers.
#include "model_json.h"

#include <algorithm>
#include <map>

#include "block_kernels.h"
#include "decoder_builder.h"
#include "errors.h"
#include "input_limits.h"
#include "json_input.h"
#include "layer_json.h"
#include "name_suggest.h"
#include "pass_kernels.h"

namespace shardplan {
namespace {

constexpr const char* kModelSchema = "shardplan.model/v1";
// Bounds far beyond any real model that keep element counts (and bytes of them) inside 64 bits.
constexpr std::int64_t kMaxDimension = std::int64_t{1} << 31;
constexpr std::int64_t kMaxLayerParams = std::int64_t{1} << 44;

void check_schema(const JsonObjectReader& reader) {
  if (!reader.has("schema")) return;  // optional in hand-written files; when given it must match
  if (reader.raw().at("schema") != kModelSchema) reader.fail("schema", std::string("\"") + kModelSchema + "\"");
}

DecoderArchitecture read_architecture(const JsonObjectReader& block) {
  block.reject_unknown_keys({"family", "vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                             "num_kv_heads", "max_position_embeddings", "tie_word_embeddings", "attention_bias",
                             "dropout"});
  DecoderArchitecture arch;
  const std::string family = block.optional_string("family").value_or("llama");
  if (family == "llama") {
    arch.family = DecoderArchitecture::Family::llama;
  } else if (family == "gpt2") {
    arch.family = DecoderArchitecture::Family::gpt2;
  } else {
    block.fail("family", "\"llama\" or \"gpt2\"");
  }
  const bool gpt2 = arch.family == DecoderArchitecture::Family::gpt2;
  // Note [Input limits]: each size in range as it is read, so the field named is the one in the file.
  arch.vocab_size = block.int_in_range("vocab_size", 1, limits::kMaxVocabSize);
  arch.hidden_size = block.int_in_range("hidden_size", 1, limits::kMaxHiddenSize);
  arch.intermediate_size = block.optional_int_in_range("intermediate_size", 1, limits::kMaxIntermediateSize)
                               .value_or(4 * arch.hidden_size);  // GPT's 4h default
  arch.num_layers = block.int_in_range("num_layers", 1, limits::kMaxLayers);
  arch.num_heads = block.int_in_range("num_heads", 1, limits::kMaxHeads);
  arch.num_kv_heads = block.optional_int_in_range("num_kv_heads", 1, limits::kMaxHeads).value_or(arch.num_heads);
  arch.max_position_embeddings =
      block.optional_int_in_range("max_position_embeddings", 1, limits::kMaxPositions).value_or(4096);
  arch.tie_word_embeddings = block.boolean("tie_word_embeddings", gpt2);
  arch.attention_bias = block.boolean("attention_bias", false);
  arch.dropout = block.non_negative_number("dropout", gpt2 ? 0.1 : 0.0);
  return arch;
}

// Defaults for a what-if layer given by size only: 2 FLOPs per parameter per token for a matmul-like layer, and for a
// transformer block the attention core and Korthikanti et al. 2022's per-layer activations sbh(34 + 5as/h) bytes
// (16h elements, 2h mask bytes, 2a score elements and a mask bytes per position).
LayerSpec layer_with_defaults(LayerKind kind, std::int64_t params, std::int64_t hidden, std::int64_t heads) {
  LayerSpec layer;
  layer.kind = kind;
  const double h = static_cast<double>(hidden), a = static_cast<double>(heads);
  if (kind == LayerKind::transformer_block) {
    layer.flops.matmul_flops_per_token = 2.0 * static_cast<double>(params);
    layer.flops.attention_flops_per_token_per_position = 4.0 * h;
    layer.activations.elements_per_token = 16.0 * h;
    layer.activations.mask_bytes_per_token = 2.0 * h;
    layer.activations.score_elements_per_token_per_position = 2.0 * a;
    layer.activations.score_mask_bytes_per_token_per_position = a;
    layer.activations.flash_stat_bytes_per_token = 4.0 * a;
    layer.activations.checkpoint_elements_per_token = h;
  } else if (kind == LayerKind::lm_head || kind == LayerKind::other) {
    layer.flops.matmul_flops_per_token = 2.0 * static_cast<double>(params);
    layer.activations.elements_per_token = h;
  } else if (kind == LayerKind::norm) {
    layer.activations.elements_per_token = h;
  }
  return layer;
}

void read_explicit_layers(const JsonObjectReader& root, ModelSpec& model) {
  const auto entries = root.array("layers");
  std::map<std::string, std::size_t> index_by_name;
  for (std::size_t entry_index = 0; entry_index < entries.size(); ++entry_index) {
    const JsonObjectReader entry = root.element("layers", entry_index, entries[entry_index]);
    // Note [Measured layers]: the torch bridge (python/shardplan_torch) writes, beside the keys a hand-written file
    // uses, what it measured: the mask bytes and the s² terms autograd saved, the block input full recompute keeps,
    // whether attention is causal, the module's class, and its raw samples ("measured", kept for the reader).
    entry.reject_unknown_keys({"name", "kind", "tensors", "params", "repeat", "tied_to", "matmul_flops_per_token",
                               "attention_flops_per_token_per_position", "activation_elements_per_token",
                               "activation_score_elements_per_token_per_position", "activation_mask_bytes_per_token",
                               "activation_score_mask_bytes_per_token_per_position", "checkpoint_elements_per_token",
                               "causal", "class", "attention_heads", "measured", "tokens_per_sample", "flops",
                               "activations", "kernels", "moe"});
    // "" names the root module, whose own parameters (ViT's class_token) a bridge-written file lists as a layer: the
    // exports' get_submodule("") is the model itself.
    const bool root_module = entry.has("name") && entry.raw().at("name") == "";
    const std::string name = root_module ? std::string() : entry.string("name");
    // Required: a block whose "kind" was left out was taken for "other", so the model had no block to wrap and its
    // plan search divided by zero (issue 37). The bridge writes it for every layer.
    constexpr const char* kKinds = "one of embedding, transformer_block, norm, lm_head, other";
    LayerKind kind = LayerKind::other;
    if (!entry.has("kind")) {
      throw InputError(entry.origin() + ": missing field '" + entry.field_path("kind") + "' (expected " + kKinds + ")");
    }
    try {
      kind = layer_kind_from_string(entry.string("kind"));
    } catch (const InputError&) {
      entry.fail("kind", kKinds);
    }
    std::vector<TensorSpec> tensors;
    if (entry.has("tensors") && entry.has("params")) entry.fail("params", "either 'tensors' or 'params', not both");
    if (entry.has("tensors")) {
      const auto tensor_values = entry.array("tensors");
      for (std::size_t t = 0; t < tensor_values.size(); ++t) {
        const JsonObjectReader tensor = entry.element("tensors", t, tensor_values[t]);
        TensorSpec spec{tensor.string("name"), {}};
        const auto dims = tensor.array("shape");
        for (const auto& dim : dims) {
          if (!dim.is_number_integer() || dim.get<std::int64_t>() < 1 || dim.get<std::int64_t>() > kMaxDimension) {
            tensor.fail("shape", "positive integers of at most 2^31");
          }
          spec.shape.push_back(dim.get<std::int64_t>());
        }
        tensors.push_back(std::move(spec));
      }
    } else if (entry.has("params")) {
      const std::int64_t params = entry.positive_int("params");
      if (params > kMaxLayerParams) entry.fail("params", "at most 2^44 parameters per layer");
      tensors.push_back({"flat", {params}});  // a what-if layer: one flat tensor
    }
    std::optional<std::size_t> tied_to;
    if (const auto target = entry.optional_string("tied_to")) {
      const auto found = index_by_name.find(*target);
      if (found == index_by_name.end()) entry.fail("tied_to", "the name of an earlier layer");
      tied_to = found->second;
    }
    if (!tied_to && tensors.empty()) entry.fail("tensors", "'tensors', 'params' or 'tied_to'");
    std::int64_t params = 0;
    for (const auto& tensor : tensors) {
      // Multiply dimension by dimension, stopping before a product could leave 64 bits.
      std::int64_t elements = 1;
      for (auto extent : tensor.shape) {
        if (elements > kMaxLayerParams / extent) entry.fail("tensors", "at most 2^44 parameters per layer");
        elements *= extent;
      }
      params += elements;
      if (params > kMaxLayerParams) entry.fail("tensors", "at most 2^44 parameters per layer");
    }
    if (tied_to) params = model.layers[*tied_to].param_count();  // a tied head still computes with the weight

    LayerSpec layer = layer_with_defaults(kind, params, model.hidden_size, model.num_heads);
    layer.tensors = tied_to ? std::vector<TensorSpec>{} : tensors;
    layer.tied_to_layer = tied_to;
    // Note [Input limits]: per-token work and activations in a range that keeps a step's totals finite.
    const auto per_token = [&](const char* key, double most, double fallback) {
      return entry.optional_number_in_range(key, 0, most).value_or(fallback);
    };
    layer.flops.matmul_flops_per_token =
        per_token("matmul_flops_per_token", limits::kMaxLayerFlopsPerToken, layer.flops.matmul_flops_per_token);
    layer.flops.attention_flops_per_token_per_position =
        per_token("attention_flops_per_token_per_position", limits::kMaxLayerFlopsPerToken,
                  layer.flops.attention_flops_per_token_per_position);
    layer.activations.elements_per_token = per_token(
        "activation_elements_per_token", limits::kMaxActivationElementsPerToken, layer.activations.elements_per_token);
    layer.activations.score_elements_per_token_per_position =
        per_token("activation_score_elements_per_token_per_position", limits::kMaxActivationElementsPerToken,
                  layer.activations.score_elements_per_token_per_position);
    layer.activations.mask_bytes_per_token = per_token("activation_mask_bytes_per_token",
                                                       limits::kMaxActivationElementsPerToken,
                                                       layer.activations.mask_bytes_per_token);
    layer.activations.score_mask_bytes_per_token_per_position =
        per_token("activation_score_mask_bytes_per_token_per_position", limits::kMaxActivationElementsPerToken,
                  layer.activations.score_mask_bytes_per_token_per_position);
    layer.activations.checkpoint_elements_per_token =
        per_token("checkpoint_elements_per_token", limits::kMaxActivationElementsPerToken,
                  layer.activations.checkpoint_elements_per_token);
    layer.flops.causal_attention = entry.boolean("causal", true);
    // Note [Tokens per sample] (model_spec.h): a layer that runs on a fixed count per sample (a vision tower's patches).
    layer.fixed_tokens_per_sample = entry.optional_int_in_range("tokens_per_sample", 1, limits::kMaxSeqLen);
    if (layer.flops.attention_flops_per_token_per_position == 0) {
      layer.activations.flash_stat_bytes_per_token = 0;  // no attention core, no log-sum-exp
    } else if (const auto heads = entry.optional_int_in_range("attention_heads", 1, limits::kMaxHeads)) {
      layer.activations.flash_stat_bytes_per_token = 4.0 * static_cast<double>(*heads);  // fp32 per head
    }
    if (entry.has("measured") && !entry.raw().at("measured").is_object()) entry.fail("measured", "an object");
    entry.optional_string("class");  // the module's class, for the reader; a string when given
    if (kind == LayerKind::transformer_block) {
      // Selective-op checkpointing keeps the input, every other derived projection's output and attention's output
      // (Note [Derived kernels] in pass_kernels.cpp), never more than the layer keeps without checkpointing.
      layer.activations.selective_op_elements_per_token =
          std::min(layer.activations.elements_per_token,
                   selective_op_kept_elements(effective_kernel_spec(model, layer), model.hidden_size));
    }
    read_layer_detail(entry, layer);  // Note [Exact layers] (layer_json.h): what a written model carries, over the above

    const std::int64_t repeat = entry.optional_int_in_range("repeat", 1, limits::kMaxLayers).value_or(1);
    if (model.layers.size() + static_cast<std::size_t>(repeat) > static_cast<std::size_t>(limits::kMaxLayers)) {
      entry.fail("repeat", "at most " + std::to_string(limits::kMaxLayers) + " layers in all");
    }
    for (std::int64_t copy = 0; copy < repeat; ++copy) {
      LayerSpec instance = layer;
      instance.name = repeat == 1 ? name : name + "." + std::to_string(copy);
      index_by_name[instance.name] = model.layers.size();
      model.layers.push_back(std::move(instance));
    }
    index_by_name[name] = model.layers.size() - 1;
  }
}

}  // namespace

ModelSpec model_from_json(const nlohmann::json& document, const std::string& origin) {
  const JsonObjectReader root(document, origin);
  check_schema(root);
  ModelSpec model;
  model.name = root.optional_string("name").value_or("custom-model");
  if (root.has("architecture") == root.has("layers")) {
    throw InputError(origin + ": expected exactly one of the fields 'architecture' or 'layers'");
  }
  if (root.has("architecture")) {
    root.reject_unknown_keys({"schema", "name", "architecture", "default_seq_len"});
    model = build_decoder(model.name, read_architecture(root.object("architecture")), origin);
    model.default_seq_len =
        root.optional_int_in_range("default_seq_len", 1, limits::kMaxSeqLen).value_or(model.default_seq_len);
    return model;
  }
  // "params", "source", "wrap_candidates" and "module_tree" are what the torch bridge records of the module it read;
  // "params", when given, must be the sum of the layers' tensors (the bridge's count, torch's own).
  root.reject_unknown_keys({"schema", "name", "layers", "hidden_size", "num_heads", "vocab_size", "default_seq_len",
                            "params", "source", "wrap_candidates", "module_tree", "max_positions"});
  // Note [Input limits]: the same ranges as an architecture block (2^63 - 1 printed a negative memory bound).
  model.hidden_size = root.int_in_range("hidden_size", 1, limits::kMaxHiddenSize);
  model.num_heads = root.int_in_range("num_heads", 1, limits::kMaxHeads);
  model.vocab_size = root.optional_int_in_range("vocab_size", 1, limits::kMaxVocabSize).value_or(0);
  model.default_seq_len = root.optional_int_in_range("default_seq_len", 1, limits::kMaxSeqLen).value_or(2048);
  model.max_positions = root.optional_int_in_range("max_positions", 1, limits::kMaxPositions).value_or(0);
  read_explicit_layers(root, model);
  validate_model(model, origin);
  if (root.has("params") && root.positive_int("params") != model.param_count()) {
    root.fail("params", "the sum of the layers' tensors, " + std::to_string(model.param_count()));
  }
  return model;
}

nlohmann::json to_json(const ModelSpec& model) {
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& layer : model.layers) {
    nlohmann::json entry = {{"name", layer.name}, {"kind", to_string(layer.kind)}};
    if (layer.tied_to_layer) {
      entry["tied_to"] = model.layers[*layer.tied_to_layer].name;
    } else {
      nlohmann::json tensors = nlohmann::json::array();
      for (const TensorSpec& tensor : layer.tensors) tensors.push_back({{"name", tensor.name}, {"shape", tensor.shape}});
      entry["tensors"] = std::move(tensors);
    }
    if (layer.fixed_tokens_per_sample) entry["tokens_per_sample"] = *layer.fixed_tokens_per_sample;
    entry.update(layer_detail_to_json(layer));  // Note [Exact layers]
    layers.push_back(std::move(entry));
  }
  nlohmann::json document = {{"schema", "shardplan.model/v1"},
                             {"name", model.name},
                             {"params", model.param_count()},
                             {"hidden_size", model.hidden_size},
                             {"num_heads", model.num_heads},
                             {"default_seq_len", model.default_seq_len},
                             {"layers", std::move(layers)}};
  if (model.vocab_size > 0) document["vocab_size"] = model.vocab_size;  // absent: the reader's 0
  // Note [Long context]: the --seq-len bound the architecture gave, which the written model no longer has.
  if (model.max_trainable_positions() > 0) document["max_positions"] = model.max_trainable_positions();
  return document;
}

}  // namespace shardplan
