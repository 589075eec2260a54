// FinetuneConfig: which parameters a run trains — all of them, all but frozen name patterns, LoRA adapters, or LoRA
// over 4-bit base weights (QLoRA) — with the settings named as PEFT's LoraConfig and bitsandbytes' BitsAndBytesConfig
// name them, and the FSDP front end whose rules decide how frozen and trainable parameters may share a unit.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "precision.h"

namespace shardplan {

// full: every parameter trains. frozen: every parameter but those matching a --freeze pattern. lora: PEFT's LoRA,
// every base parameter frozen, adapters on the target modules trained. qlora: LoRA over base linear weights stored
// 4-bit (Dettmers et al. 2023, "QLoRA: Efficient Finetuning of Quantized LLMs").
enum class FinetuneMode { full, frozen, lora, qlora };
const char* to_string(FinetuneMode mode);

// Tensor dtypes the fine-tuning settings name (bnb_4bit_quant_storage, bnb_4bit_compute_dtype).
enum class DType { uint8, bf16, fp16, fp32 };
const char* to_string(DType dtype);
int dtype_bytes(DType dtype);
// The dtype a precision recipe all-gathers and computes in (FSDP's MixedPrecision param_dtype; 4 bytes: fp32, 2
// bytes: fp16 for the fp16 recipes, else bf16) and the one it keeps its sharded parameters in.
DType param_dtype(const PrecisionRecipe& precision);
DType storage_dtype(const PrecisionRecipe& precision);

// peft.LoraConfig: r, lora_alpha, lora_dropout, target_modules (module names matched as PEFT matches a list: a
// module whose path is the name or ends with "." + name). Empty targets: PEFT's default for the model family
// (peft/utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING: llama ["q_proj", "v_proj"], gpt2
// ["c_attn"]). r and lora_alpha default to 8 as in LoraConfig; lora_dropout to 0.
struct LoraSettings {
  std::int64_t r = 8;
  double alpha = 8;
  double dropout = 0;
  std::vector<std::string> target_modules;
  bool operator==(const LoraSettings&) const = default;
};

// transformers.BitsAndBytesConfig(load_in_4bit=True, ...): bnb_4bit_quant_type (nf4 or fp4: both 4 bits),
// bnb_4bit_use_double_quant, bnb_4bit_quant_storage (the dtype the packed 4-bit weights are stored in, which is what
// FSDP shards and all-gathers) and bnb_4bit_compute_dtype (what each weight is dequantised to for its GEMMs). Unset
// storage and compute dtypes take the precision's param dtype: what FSDP needs (Note [QLoRA storage dtype]) and what
// the QLoRA paper computes in (bf16).
struct Bnb4bitSettings {
  std::string quant_type = "nf4";
  bool use_double_quant = false;
  std::optional<DType> quant_storage;
  std::optional<DType> compute_dtype;
  bool operator==(const Bnb4bitSettings&) const = default;
};

// Which FSDP runs the plan, where it matters to fine-tuning: FSDP2 (fully_shard) shards and reduces each parameter on
// its own, so a unit may mix frozen and trainable parameters; FSDP1 flattens a unit into one FlatParameter, which with
// use_orig_params=False requires uniform requires_grad (pytorch/pytorch#104690, #91167) and with use_orig_params=True
// mixes them but gives the whole FlatParameter a gradient (Note [Frozen parameters in FSDP] in planner/unit_layout.h).
struct FsdpFrontend {
  int version = 2;
  bool use_orig_params = true;  // FSDP1 only
  bool operator==(const FsdpFrontend&) const = default;
  bool uniform_requires_grad() const { return version == 1 && !use_orig_params; }
};

struct FinetuneConfig {
  FinetuneMode mode = FinetuneMode::full;
  std::vector<std::string> freeze;  // --finetune frozen: glob patterns over full tensor names
  LoraSettings lora;
  Bnb4bitSettings bnb;
  FsdpFrontend fsdp;
  bool operator==(const FinetuneConfig&) const = default;
  bool trains_all() const { return mode == FinetuneMode::full; }
  bool uses_lora() const { return mode == FinetuneMode::lora || mode == FinetuneMode::qlora; }
  // The storage and compute dtypes of QLoRA's base weights under `precision` (Bnb4bitSettings).
  DType quant_storage(const PrecisionRecipe& precision) const;
  DType quant_compute(const PrecisionRecipe& precision) const;
};

FinetuneMode finetune_mode_from_string(const std::string& text);  // InputError naming the known modes
DType dtype_from_string(const std::string& text, const std::vector<DType>& allowed);

// What a message calls each setting: the CLI flags, or the plan JSON's fields (`origin`: the file).
struct FinetuneFieldNames {
  std::string mode, freeze, r, alpha, dropout, target_modules, quant_type, double_quant, quant_storage, compute_dtype,
      fsdp_version, use_orig_params;
  static FinetuneFieldNames cli();
  static FinetuneFieldNames json(const std::string& origin);
};

// The checks that need no model: ranges (r >= 1, 0 <= dropout < 1, alpha > 0), patterns only with --finetune frozen
// (and at least one), the FSDP front end, and QLoRA's dtype rules under `precision` (Note [QLoRA storage dtype]).
// InputError, one line, naming the setting and what was expected.
void validate_finetune(const FinetuneConfig& config, const PrecisionRecipe& precision, const FinetuneFieldNames& names);

// Note [QLoRA storage dtype]: FSDP casts every parameter it all-gathers to its param dtype (FSDP1 MixedPrecision
// casts the FlatParameter before the all-gather; FSDP2's MixedPrecisionPolicy casts each sharded parameter), and a
// cast of packed 4-bit codes turns them into other numbers: "practitioners need to be careful to set the
// MixedPrecision.param_type to match the Linear4Bit.quant_storage dtype. Otherwise, FSDP's Mixed Precision could cast
// the quantized weights to a different precision, essentially turning them into random weights" (answer.ai
// fsdp_qlora README, "Limitations"; its train.py: "The Linear4Bit quant_storage dtype should always match the FSDP
// param_dtype"). So the storage dtype must be the precision's param dtype. FSDP1 also flattens a unit into one
// FlatParameter of one dtype, so there the precision must keep its sharded parameters in that dtype too (pure-bf16
// or fp32: fsdp_qlora's `--precision bf16` and `fp32`); bf16-mixed keeps them in fp32.

}  // namespace shardplan
