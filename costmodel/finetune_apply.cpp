// finetuned_model: per layer, which tensors train, which are frozen or stored 4-bit, where LoRA's adapters go, and the
// FLOPs and kept activations they change.
#include "finetune_apply.h"

#include <fnmatch.h>

#include <algorithm>
#include <set>

#include "errors.h"

namespace shardplan {

std::string tensor_full_name(const LayerSpec& layer, const TensorSpec& tensor) {
  return layer.name.empty() ? tensor.name : layer.name + "." + tensor.name;
}

namespace {

bool ends_with(const std::string& text, const std::string& tail) {
  return text.size() >= tail.size() && text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

// The tensor holding a projection's weight: the one whose full name is "<...>.<projection>.weight".
const TensorSpec* weight_tensor(const LayerSpec& layer, const ProjectionSpec& projection) {
  const std::string tail = projection.name + ".weight";
  for (const TensorSpec& tensor : layer.tensors) {
    const std::string full = tensor_full_name(layer, tensor);
    if (full == tail || ends_with(full, "." + tail)) return &tensor;
  }
  return nullptr;
}

// Python's fnmatch and PyTorch users' globs: '*' also crosses dots (fnmatch(3) without FNM_PATHNAME).
bool glob_matches(const std::string& pattern, const std::string& name) {
  return ::fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

std::string join(const std::vector<std::string>& items) {
  std::string text;
  for (const auto& item : items) text += (text.empty() ? "" : ", ") + item;
  return text;
}

// The last component of every projection's module path, once each, in model order: what a target may name.
std::vector<std::string> linear_module_names(const ModelSpec& model) {
  std::vector<std::string> names;
  for (const LayerSpec& layer : model.layers) {
    if (!layer.kernels) continue;
    for (const ProjectionSpec& projection : layer.kernels->projections) {
      const std::string path = projection_module_path(layer, projection);
      const std::string last = path.substr(path.rfind('.') == std::string::npos ? 0 : path.rfind('.') + 1);
      if (std::find(names.begin(), names.end(), last) == names.end()) names.push_back(last);
    }
  }
  return names;
}

// The activations the forward keeps in every mode but full recompute are ActivationFootprint's; a layer autograd never
// records keeps none of them (LayerFinetune::backward_needed).
void drop_kept_activations(ActivationFootprint& a) {
  a.elements_per_token = a.mask_bytes_per_token = a.score_elements_per_token_per_position = 0;
  a.score_mask_bytes_per_token_per_position = a.flash_stat_bytes_per_token = a.fp32_bytes_per_token = 0;
  a.checkpoint_elements_per_token = a.selective_op_elements_per_token = 0;
  a.eager_norm_elements_per_token = a.eager_norm_fp32_elements_per_token = a.eager_upcast_elements_per_token = 0;
  a.eager_attention_elements_per_token = a.eager_score_fp32_elements_per_token_per_position = 0;
  a.compiled_recomputed_elements_per_token = a.compiled_unread_selective_op_elements_per_token = 0;
}

}  // namespace

std::string projection_module_path(const LayerSpec& layer, const ProjectionSpec& projection) {
  if (const TensorSpec* tensor = weight_tensor(layer, projection)) {
    const std::string full = tensor_full_name(layer, *tensor);
    return full.substr(0, full.size() - std::string(".weight").size());
  }
  return layer.name == projection.name || ends_with(layer.name, "." + projection.name)
             ? layer.name
             : layer.name + "." + projection.name;
}

bool lora_target_matches(const std::string& module_path, const std::string& target) {
  return module_path == target || ends_with(module_path, "." + target);
}

std::vector<std::string> lora_target_modules(const ModelSpec& model, const FinetuneConfig& config) {
  if (!config.lora.target_modules.empty()) return config.lora.target_modules;
  // peft/utils/constants.py, TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING: "llama": ["q_proj", "v_proj"]
  // (also mistral, qwen2), "gpt2": ["c_attn"].
  if (model.architecture && model.architecture->family == DecoderArchitecture::Family::gpt2) return {"c_attn"};
  if (model.architecture && model.architecture->fused_projections) return {"qkv_proj"};  // PEFT's "phi3"
  // PEFT's "falcon": ["query_key_value"]; InternLM2 (no PEFT entry) likewise its fused wqkv.
  if (model.architecture && model.architecture->fused_qkv) {
    return {model.architecture->naming == DecoderArchitecture::Naming::falcon ? "query_key_value" : "wqkv"};
  }
  // PEFT's "gpt_neox": ["query_key_value"].
  if (model.architecture && model.architecture->family == DecoderArchitecture::Family::gpt_neox) {
    return {"query_key_value"};
  }
  return {"q_proj", "v_proj"};
}

std::vector<std::string> lora_module_paths(const ModelSpec& model) {
  std::vector<std::string> paths;
  for (const LayerSpec& layer : model.layers) {
    if (!layer.kernels) continue;
    for (const ProjectionSpec& projection : layer.kernels->projections) {
      if (projection.lora_rank > 0) paths.push_back(projection_module_path(layer, projection));
    }
  }
  return paths;
}

std::vector<std::string> lora_parameter_names(const ModelSpec& model) {
  std::vector<std::string> names;
  for (const std::string& path : lora_module_paths(model)) {
    names.push_back(path + ".lora_A.default.weight");
    names.push_back(path + ".lora_B.default.weight");
  }
  return names;
}

bool base_tensor_trains(const ModelSpec& model, const LayerSpec& layer, const TensorSpec& tensor) {
  const FinetuneConfig& config = model.finetune;
  if (config.trains_all()) return true;
  if (config.uses_lora()) return false;
  const std::string name = tensor_full_name(layer, tensor);
  return std::none_of(config.freeze.begin(), config.freeze.end(),
                      [&](const std::string& pattern) { return glob_matches(pattern, name); });
}

std::int64_t trainable_param_count(const ModelSpec& model) {
  std::int64_t count = 0;
  for (const LayerSpec& layer : model.layers) {
    count += layer.finetune ? layer.finetune->trainable_elements : layer.param_count();
  }
  return count;
}

std::int64_t packed_4bit_bytes(std::int64_t elements) { return (elements + 1) / 2; }

std::int64_t quantization_constant_bytes(std::int64_t elements, bool double_quant) {
  // Note [Quantisation constants]: blocksize 64 (quantize_4bit's default), NF4's 16 fp32 levels.
  constexpr std::int64_t kBlock = 64, kCodeBook4bit = 16 * 4;
  const std::int64_t blocks = (elements + kBlock - 1) / kBlock;
  if (!double_quant) return 4 * blocks + kCodeBook4bit;
  // 8-bit absmax per block, fp32 absmax per 256 blocks, the fp32 offset and the 256-entry dynamic map.
  constexpr std::int64_t kBlock2 = 256, kCodeBook8bit = 256 * 4;
  return blocks + 4 * ((blocks + kBlock2 - 1) / kBlock2) + 4 + kCodeBook8bit + kCodeBook4bit;
}

ModelSpec finetuned_model(const ModelSpec& base, const FinetuneConfig& config, const FinetuneFieldNames& names) {
  SHARDPLAN_CHECK(base.finetune.trains_all(), "finetuned_model takes a model resolved for full training");
  ModelSpec model = base;
  model.finetune = config;
  for (LayerSpec& layer : model.layers) layer.finetune.reset();
  if (config.trains_all()) return model;
  const bool lora = config.uses_lora(), qlora = config.mode == FinetuneMode::qlora;
  if (lora) {
    for (const LayerSpec& layer : model.layers) {
      if (layer.kind == LayerKind::transformer_block && !layer.kernels) {
        throw InputError(names.mode + " " + to_string(config.mode) + ": model '" + model.name +
                         "' lists its layers without their linear modules (an explicit layer list); LoRA needs a "
                         "preset or a Hugging Face config.json");
      }
    }
  }
  // PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING (peft/utils/constants.py) has no entry for DeepSeek's
  // multi-head latent attention (no v_proj there), so get_peft_model asks for target_modules: so do we, rather than
  // fall back to names the model lacks.
  if (lora && config.lora.target_modules.empty() && model.architecture && model.architecture->mla) {
    throw InputError(names.target_modules + ": expected for " + model.name + " (PEFT has no default target_modules "
                     "for multi-head latent attention, which has no v_proj; its linear modules: " +
                     join(linear_module_names(model)) + ")");
  }
  const std::vector<std::string> targets = lora ? lora_target_modules(model, config) : std::vector<std::string>{};
  std::set<std::string> patterns_used, targets_used;
  // Whether a tensor trains: not under LoRA (PEFT freezes every base parameter), not when a pattern matches it.
  const auto frozen = [&](const LayerSpec& layer, const TensorSpec& tensor) {
    if (lora) return true;
    bool matched = false;
    for (const std::string& pattern : config.freeze) {
      if (glob_matches(pattern, tensor_full_name(layer, tensor))) {
        patterns_used.insert(pattern);
        matched = true;
      }
    }
    return matched;
  };
  bool trains_so_far = false;
  std::int64_t trainable = 0;
  for (std::size_t index = 0; index < model.layers.size(); ++index) {
    LayerSpec& layer = model.layers[index];
    LayerFinetune f;
    std::set<const TensorSpec*> quantized;
    if (layer.kernels) {
      for (ProjectionSpec& projection : layer.kernels->projections) {
        const TensorSpec* weight = weight_tensor(layer, projection);
        // A tied head computes with its owner's weight: frozen when that weight is.
        const LayerSpec& owner = weight == nullptr && layer.tied_to_layer ? model.layers[*layer.tied_to_layer] : layer;
        const TensorSpec* owned = weight != nullptr ? weight : (owner.tensors.empty() ? nullptr : &owner.tensors[0]);
        projection.frozen_weight = owned != nullptr && frozen(owner, *owned);
        // bitsandbytes replaces the blocks' linear layers; the output head stays unquantised (transformers'
        // get_keys_to_not_convert keeps the output embedding in full precision).
        projection.quantized = qlora && weight != nullptr && layer.kind == LayerKind::transformer_block;
        const double weight_flops = 2.0 * static_cast<double>(projection.in_features * projection.out_features);
        if (projection.frozen_weight) layer.flops.frozen_weight_flops_per_token += weight_flops;
        if (projection.quantized) {
          quantized.insert(weight);
          f.largest_quantized_weight = std::max(f.largest_quantized_weight, weight->element_count());
        }
        const std::string path = projection_module_path(layer, projection);
        for (const std::string& target : targets) {
          if (!lora_target_matches(path, target)) continue;
          targets_used.insert(target);
          projection.lora_rank = static_cast<std::int32_t>(config.lora.r);  // at most 2^20 (validate_finetune)
          projection.lora_dropout = config.lora.dropout > 0;
        }
        if (projection.lora_rank == 0) continue;
        const std::int64_t r = projection.lora_rank, in = projection.in_features, out = projection.out_features;
        f.adapter_elements += r * in + out * r;  // lora_A: Linear(in, r), lora_B: Linear(r, out), no biases
        layer.flops.matmul_flops_per_token += 2.0 * static_cast<double>(r * (in + out));
        // Autograd keeps lora_B's input (the rank-r output of lora_A) for B's weight gradient, and lora_A's input:
        // the dropout's output and its 1-byte mask when lora_dropout > 0, else the projection's own input (the same
        // tensor, already counted among the block's kept activations). The scaling multiply keeps nothing.
        auto& kept = layer.activations;
        kept.elements_per_token += static_cast<double>(r) + (projection.lora_dropout ? static_cast<double>(in) : 0.0);
        kept.mask_bytes_per_token += projection.lora_dropout ? static_cast<double>(in) : 0.0;
        kept.selective_op_elements_per_token += static_cast<double>(r);
      }
    }
    for (const TensorSpec& tensor : layer.tensors) {
      const std::int64_t elements = tensor.element_count();
      if (quantized.count(&tensor) > 0) {
        f.quantized_elements += elements;
        f.packed_bytes += packed_4bit_bytes(elements);
        f.quant_constant_bytes += quantization_constant_bytes(elements, config.bnb.use_double_quant);
      } else if (frozen(layer, tensor)) {
        f.frozen_elements += elements;
      } else {
        f.trainable_elements += elements;
      }
    }
    f.trainable_elements += f.adapter_elements;
    trainable += f.trainable_elements;
    // A tied head's weight trains with its owner; autograd needs this layer's backward once anything before it trains.
    const bool tied_trains = layer.tied_to_layer && model.layers[*layer.tied_to_layer].finetune &&
                             model.layers[*layer.tied_to_layer].finetune->trainable_elements > 0;
    trains_so_far = trains_so_far || f.trainable_elements > 0 || tied_trains;
    f.backward_needed = trains_so_far;
    if (!f.backward_needed) drop_kept_activations(layer.activations);
    layer.finetune = f;
  }
  for (const std::string& pattern : config.freeze) {
    if (patterns_used.count(pattern) == 0) {
      std::string example;
      for (const LayerSpec& layer : model.layers) {
        if (example.empty() && !layer.tensors.empty()) example = tensor_full_name(layer, layer.tensors.front());
      }
      throw InputError(names.freeze + " '" + pattern + "': matches no parameter of " + model.name +
                       " (full names such as '" + example + "')");
    }
  }
  for (const std::string& target : targets) {
    if (targets_used.count(target) == 0) {
      throw InputError(names.target_modules + " '" + target + "': " + model.name + " has no such module (its linear " +
                       "modules: " + join(linear_module_names(model)) + ")");
    }
  }
  if (trainable == 0) throw InputError(names.freeze + ": every parameter of " + model.name + " is frozen; nothing trains");
  return model;
}

}  // namespace shardplan
