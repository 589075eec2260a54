// finetuned_model: a ModelSpec resolved for a FinetuneConfig — every layer's parameters split into trainable, frozen
// and 4-bit (LayerFinetune), its projections marked frozen, quantised or LoRA targets, the adapters' FLOPs and kept
// activations added — so the lowering, the closed-form bound and the plan search read fine-tuning from the layers
// they already read (one description of the step: no second model of what fine-tuning does).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "finetune.h"
#include "model_spec.h"

namespace shardplan {

// Resolves `config` on `base` (a model resolved for full training). InputError, one line naming the setting by
// `names`: a freeze pattern that matches no parameter, a LoRA target module the model does not have, LoRA on a model
// given without its linear modules (an explicit layer list), a config under which nothing trains.
ModelSpec finetuned_model(const ModelSpec& base, const FinetuneConfig& config, const FinetuneFieldNames& names);

// The name PyTorch's named_parameters() gives a tensor: layer name + "." + tensor name
// ("model.layers.0.self_attn.q_proj.weight"). --freeze patterns are matched against it.
std::string tensor_full_name(const LayerSpec& layer, const TensorSpec& tensor);

// A projection's module path: its weight tensor's full name less ".weight" ("model.layers.0.self_attn.q_proj"); for
// a layer without its own tensors (a tied head), the layer's name.
std::string projection_module_path(const LayerSpec& layer, const ProjectionSpec& projection);

// PEFT's matching of a list entry: the module path is the target or ends with "." + target
// (peft/tuners/tuners_utils.py, check_target_module_exists).
bool lora_target_matches(const std::string& module_path, const std::string& target);

// The targets in force: the config's, else PEFT's default for the model's family (LoraSettings).
std::vector<std::string> lora_target_modules(const ModelSpec& model, const FinetuneConfig& config);

// The module paths LoRA wraps and the adapter parameters it adds, in model order, as PEFT names them
// ("model.layers.0.self_attn.q_proj.lora_A.default.weight"; under the PeftModel they sit below base_model.model).
std::vector<std::string> lora_module_paths(const ModelSpec& model);
std::vector<std::string> lora_parameter_names(const ModelSpec& model);

// Whether base tensor `tensor` of `layer` trains under the model's own fine-tuning (ModelSpec::finetune): every one
// under full training, none under LoRA or QLoRA (PEFT freezes every base parameter), under --finetune frozen those
// no freeze pattern matches — the rule finetuned_model counts LayerFinetune's elements by. The executor's flat layout
// reads it per tensor (executor/runtime/param_layout.h, Note [Fine-tuning layout]).
bool base_tensor_trains(const ModelSpec& model, const LayerSpec& layer, const TensorSpec& tensor);

// The elements that train: every parameter under full training, else the layers' trainable elements (adapters
// included).
std::int64_t trainable_param_count(const ModelSpec& model);

// Note [Quantisation constants]: bitsandbytes' quantize_4bit (bitsandbytes/functional.py; blocksize 64 for 4-bit)
// packs two 4-bit codes a byte and keeps, per tensor, one fp32 absmax per block of 64 elements and the 16-entry fp32
// code book (NF4's levels). With double quantisation (compress_statistics, bnb_4bit_use_double_quant) the absmax
// values, less their mean (an fp32 offset), are quantised blockwise to 8 bits in blocks of 256, which keeps one byte
// per block of 64, one fp32 absmax per 256 blocks and the 256-entry fp32 dynamic code book: 8/64 + 32/(64·256) =
// 0.127 bits per parameter instead of 32/64 = 0.5 (Dettmers et al. 2023, QLoRA §2 "Double Quantization"). FSDP
// shards only parameters; the constants are the weight's quant_state, which bitsandbytes keeps on the Linear4bit
// module beside it (fix_4bit_weight_quant_state_from_module restores it after FSDP's unshard), so every rank holds
// all of them on its device, whatever the sharding or CPU offload of the parameters.
std::int64_t packed_4bit_bytes(std::int64_t elements);
std::int64_t quantization_constant_bytes(std::int64_t elements, bool double_quant);

}  // namespace shardplan
