// The plan's trainable set in the exported scripts: freeze patterns, PEFT's LoraConfig and bitsandbytes'
// BitsAndBytesConfig as planned, applied before sharding, with the parameter dtypes the plan's memory assumed.
#include <sstream>

#include "errors.h"
#include "finetune_apply.h"
#include "plan_export.h"

namespace shardplan {
namespace export_detail {
namespace {

const char* torch_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::uint8: return "uint8";
    case DType::bf16: return "bfloat16";
    case DType::fp16: return "float16";
    case DType::fp32: return "float32";
  }
  return "float32";
}

std::string python_strings(const std::vector<std::string>& items, std::size_t prefix) {
  std::vector<std::string> quoted;
  for (const auto& item : items) quoted.push_back(python_string(item));
  return python_list(quoted, 0, prefix);
}

std::string python_number(double value) {
  std::ostringstream out;
  out.precision(17);
  out << value;
  const std::string text = out.str();
  return text.find_first_of(".e") == std::string::npos ? text + ".0" : text;
}

// Python source of the functions the scripts call (Note [Exported trainable set]).
constexpr const char* kFinetuneFunctions = R"PY(def quantization_config():
    """QLoRA: the BitsAndBytesConfig the plan assumed. Load the model with it before apply_plan:
    AutoModelForCausalLM.from_pretrained(name, quantization_config=quantization_config(),
                                         torch_dtype=getattr(torch, FROZEN_DTYPE)).
    None where the plan is not QLoRA: the model loads unquantized."""
    if BNB_4BIT_CONFIG is None:
        return None
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(**BNB_4BIT_CONFIG)


def _apply_finetune(model):
    """Applies the planned trainable set before sharding; returns the model to train (a PeftModel under LoRA)."""
    import fnmatch

    if FINETUNE_MODE == "frozen":
        frozen = 0
        for name, param in model.named_parameters():
            if any(fnmatch.fnmatchcase(name, pattern) for pattern in FREEZE_PATTERNS):
                param.requires_grad_(False)
                frozen += 1
        if frozen == 0:
            raise ValueError(f"shardplan: no parameter matches {FREEZE_PATTERNS}")
        return model
    from peft import LoraConfig, get_peft_model

    if FINETUNE_MODE == "qlora":
        # The plan all-gathers the packed 4-bit weights in their quant storage dtype; weights held in any other
        # dtype would be sharded and gathered at that size (axolotl PR#2992: FSDP2 gathering them as bf16 saved
        # nothing), so check what the model holds before sharding it.
        storage = "torch." + BNB_4BIT_CONFIG["bnb_4bit_quant_storage"]
        packed = [param for param in model.parameters() if type(param).__name__ == "Params4bit"]
        if not getattr(model, "is_loaded_in_4bit", False) or not packed:
            raise ValueError("shardplan: the plan is QLoRA; load the model with quantization_config=quantization_config()")
        if any(str(param.dtype) != storage for param in packed):
            raise ValueError(f"shardplan: the 4-bit weights are not stored as {storage}, FSDP's param dtype")
    # PEFT injects the adapters into `model` in place (its module paths stay those of PLANNED_GROUPS) and freezes
    # every base parameter. prepare_model_for_kbit_training is not called: it would upcast the frozen
    # non-quantised parameters to fp32, which the plan did not assume.
    peft_model = get_peft_model(model, LoraConfig(**LORA_CONFIG))
    wrapped = sorted(name for name, module in model.named_modules() if hasattr(module, "lora_A"))
    if wrapped != sorted(LORA_MODULES):
        raise ValueError(f"shardplan: LoRA wrapped {len(wrapped)} modules, the plan has {len(LORA_MODULES)}")
    return peft_model


def _place_parameters(model):
    """Keeps every parameter in the dtype the plan's memory assumed: frozen ones in FROZEN_DTYPE, trainable ones
    in TRAINABLE_DTYPE. The 4-bit weights stay as bitsandbytes packed them (in BNB_4BIT_CONFIG's quant storage)."""
    import torch

    for param in model.parameters():
        if type(param).__name__ == "Params4bit" or not param.is_floating_point():
            continue
        dtype = getattr(torch, TRAINABLE_DTYPE if param.requires_grad else FROZEN_DTYPE)
        if param.dtype != dtype:
            param.data = param.data.to(dtype)
)PY";

}  // namespace

// Note [Exported trainable set]: the scripts apply the plan's trainable set before any sharding, as FSDP needs
// (fully_shard and FullyShardedDataParallel read requires_grad and dtypes when they build their groups): freeze
// patterns with fnmatch over named_parameters() (the names --freeze matched), or PEFT's get_peft_model with the
// planned LoraConfig — for QLoRA over a model loaded with the planned BitsAndBytesConfig, whose
// bnb_4bit_quant_storage is the FSDP param dtype (Note [QLoRA storage dtype] in costmodel/finetune.h). Parameters are
// then kept in the dtypes the plan's memory assumed (Note [Frozen parameters in FSDP] in unit_layout.h): FSDP2
// frozen ones in the param dtype, trainable ones in the storage dtype; FSDP1 all in the storage dtype (one
// FlatParameter dtype).
PythonFinetune python_finetune(const Plan& plan, const ModelSpec& model, bool fsdp1) {
  const FinetuneConfig& config = plan.training.finetune;
  const PrecisionRecipe& precision = plan.training.precision;
  PythonFinetune result;
  if (config.trains_all()) return result;
  std::ostringstream tables;
  tables << "# The trainable set the plan was made for (shardplan --finetune " << to_string(config.mode)
         << "), applied by _apply_finetune before sharding.\n"
         << "FINETUNE_MODE = " << python_string(to_string(config.mode)) << "\n"
         << "FREEZE_PATTERNS = " << python_strings(config.freeze, 18) << "\n";
  if (config.uses_lora()) {
    const auto targets = lora_target_modules(model, config);
    tables << "# peft.LoraConfig as planned; PEFT names each adapter <module>.lora_A.default.weight and "
              "<module>.lora_B.default.weight.\n"
           << "LORA_TARGET_MODULES = " << python_strings(targets, 22) << "\n"
           << "LORA_CONFIG = {\"r\": " << config.lora.r << ", \"lora_alpha\": " << python_number(config.lora.alpha)
           << ", \"lora_dropout\": " << python_number(config.lora.dropout)
           << ",\n               \"target_modules\": " << python_strings(targets, 33)
           << ", \"bias\": \"none\", \"task_type\": \"CAUSAL_LM\"}\n"
           << "# The modules LoRA wraps, in model order (each inside the planned group of its block).\n"
           << "LORA_MODULES = " << python_strings(lora_module_paths(model), 15) << "\n";
  } else {
    tables << "LORA_CONFIG = None\nLORA_MODULES = []\n";
  }
  if (config.mode == FinetuneMode::qlora) {
    tables << "# transformers.BitsAndBytesConfig as planned: the 4-bit weights are stored (and all-gathered by FSDP) in\n"
           << "# bnb_4bit_quant_storage, which must be FSDP's param dtype (answer.ai fsdp_qlora).\n"
           << "BNB_4BIT_CONFIG = {\"load_in_4bit\": True, \"bnb_4bit_quant_type\": " << python_string(config.bnb.quant_type)
           << ", \"bnb_4bit_use_double_quant\": " << (config.bnb.use_double_quant ? "True" : "False")
           << ",\n                   \"bnb_4bit_quant_storage\": "
           << python_string(torch_dtype_name(config.quant_storage(precision)))
           << ", \"bnb_4bit_compute_dtype\": " << python_string(torch_dtype_name(config.quant_compute(precision)))
           << "}\n";
  } else {
    tables << "BNB_4BIT_CONFIG = None\n";
  }
  tables << "# The dtypes the plan's memory assumed for frozen and trainable parameters"
         << (fsdp1 ? " (FSDP1: one FlatParameter dtype).\n" : ".\n")
         << "FROZEN_DTYPE = " << python_string(torch_dtype_name(fsdp1 ? storage_dtype(precision) : param_dtype(precision)))
         << "\nTRAINABLE_DTYPE = " << python_string(torch_dtype_name(storage_dtype(precision))) << "\n";
  result.tables = tables.str();
  result.functions = kFinetuneFunctions;
  return result;
}

}  // namespace export_detail
}  // namespace shardplan
