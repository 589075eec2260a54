// Tests of the fine-tuning exports: the FSDP2 and FSDP1 scripts compile and name the planned groups, the LoRA
// targets and the modules they wrap, the BitsAndBytesConfig with FSDP's param dtype as quant storage; FSDP1's
// use_orig_params follows the plan's front end; ds_config says what it cannot express.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "errors.h"
#include "export_tables.h"
#include "finetune_apply.h"
#include "model_presets.h"
#include "plan_export.h"

using namespace shardplan;
using shardplan::testing::compile_and_read;

namespace {

struct Planned {
  ModelSpec model;
  Plan plan;
};

Planned planned(const FinetuneConfig& finetune, const std::string& precision = "bf16-mixed") {
  TrainingConfig training;
  training.seq_len = 2048;
  training.precision = precision_recipe(precision);
  training.finetune = finetune;
  Planned result{finetuned_model(preset_model("llama3-8b"), finetune, FinetuneFieldNames::cli()), {}};
  result.plan = default_plan(result.model, training, ShardingStrategy{}, wrap_blocks(result.model, 4), 8);
  return result;
}

FinetuneConfig lora_qkvo() {
  FinetuneConfig config;
  config.mode = FinetuneMode::lora;
  config.lora.r = 16;
  config.lora.alpha = 32;
  config.lora.dropout = 0.05;
  config.lora.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj"};
  return config;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("export: a LoRA plan's FSDP2 and FSDP1 scripts compile and name the planned groups and LoRA targets") {
  const Planned lora = planned(lora_qkvo());
  // The modules PEFT wraps, by hand: q, k, v and o of each of llama3-8b's 32 blocks.
  std::vector<std::string> wrapped;
  for (int block = 0; block < 32; ++block) {
    for (const char* name : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
      wrapped.push_back("model.layers." + std::to_string(block) + ".self_attn." + name);
    }
  }
  CHECK(lora_module_paths(lora.model) == wrapped);
  CHECK(lora_parameter_names(lora.model).front() == "model.layers.0.self_attn.q_proj.lora_A.default.weight");
  for (const bool fsdp1 : {false, true}) {
    CAPTURE(fsdp1);
    const ExportedFile file = fsdp1 ? export_fsdp1(lora.plan, lora.model, 8, 8) : export_fsdp2(lora.plan, lora.model, 8, 8);
    const nlohmann::json tables = compile_and_read(file);
    CHECK(tables.at("PLANNED_GROUPS").get<std::vector<std::vector<std::string>>>() ==
          export_detail::unit_module_paths(lora.plan, lora.model));
    CHECK(tables.at("PLANNED_GROUPS").at(1) ==
          nlohmann::json({"model.layers.0", "model.layers.1", "model.layers.2", "model.layers.3"}));
    CHECK(tables.at("FINETUNE_MODE") == "lora");
    CHECK(tables.at("LORA_TARGET_MODULES") == nlohmann::json({"q_proj", "k_proj", "v_proj", "o_proj"}));
    CHECK(tables.at("LORA_MODULES").get<std::vector<std::string>>() == wrapped);
    const nlohmann::json& config = tables.at("LORA_CONFIG");
    CHECK(config.at("r") == 16);
    CHECK(config.at("lora_alpha") == 32.0);
    CHECK(config.at("lora_dropout") == 0.05);
    CHECK(config.at("target_modules") == tables.at("LORA_TARGET_MODULES"));
    CHECK(tables.at("BNB_4BIT_CONFIG").is_null());
    // Note [Frozen parameters in FSDP]: FSDP2 keeps frozen weights in the param dtype, FSDP1 one FlatParameter dtype.
    CHECK(tables.at("FROZEN_DTYPE") == (fsdp1 ? "float32" : "bfloat16"));
    CHECK(tables.at("TRAINABLE_DTYPE") == "float32");
    // The trainable set is applied before any sharding, and the PeftModel is what the caller trains.
    const auto applied = file.contents.find("    trained = _apply_finetune(model)");
    REQUIRE(applied != std::string::npos);
    CHECK(applied < file.contents.find(fsdp1 ? "FullyShardedDataParallel(trained" : "    fully_shard("));
    if (fsdp1) {
      CHECK(contains(file.contents, "use_orig_params=True,  # units mix frozen and trainable parameters"));
      CHECK(contains(file.contents, "# Note: the plan was made for FSDP2"));
    } else {
      CHECK(contains(file.contents, "    return trained\n"));
      CHECK(contains(file.contents, "#   trainable: 1703936 elements (LoRA adapters included), frozen: 872448000"));
    }
  }
  const nlohmann::json ds = nlohmann::json::parse(export_deepspeed(lora.plan, lora.model, 8, 8).contents);
  CHECK(ds.at("shardplan").at("finetune").at("lora").at("r") == 16);
  CHECK(contains(ds.at("shardplan").at("notes").dump(), "LoRA (r=16, target_modules"));
}

TEST_CASE("export: QLoRA's BitsAndBytesConfig takes FSDP's param dtype as quant storage; FSDP1 needs it stored so") {
  FinetuneConfig qlora;
  qlora.mode = FinetuneMode::qlora;
  qlora.bnb.use_double_quant = true;
  const Planned mixed = planned(qlora);  // bf16-mixed: fp32 storage, bf16 all-gathers
  const nlohmann::json tables = compile_and_read(export_fsdp2(mixed.plan, mixed.model, 8, 8));
  CHECK(tables.at("BNB_4BIT_CONFIG") == nlohmann::json({{"load_in_4bit", true},
                                                         {"bnb_4bit_quant_type", "nf4"},
                                                         {"bnb_4bit_use_double_quant", true},
                                                         {"bnb_4bit_quant_storage", "bfloat16"},
                                                         {"bnb_4bit_compute_dtype", "bfloat16"}}));
  CHECK(tables.at("LORA_TARGET_MODULES") == nlohmann::json({"q_proj", "v_proj"}));  // PEFT's llama default
  CHECK_THROWS_WITH_AS(export_fsdp1(mixed.plan, mixed.model, 8, 8),
                       doctest::Contains("--export fsdp1: --fsdp-version 1 with QLoRA"), InputError);
  const Planned pure = planned(qlora, "pure-bf16");
  CHECK(compile_and_read(export_fsdp1(pure.plan, pure.model, 8, 8)).at("FROZEN_DTYPE") == "bfloat16");
  CHECK(contains(export_deepspeed(pure.plan, pure.model, 8, 8).contents, "QLoRA's 4-bit base weights cannot"));
}

TEST_CASE("export: frozen patterns, and FSDP1 without use_orig_params where the plan was made for it") {
  FinetuneConfig frozen;
  frozen.mode = FinetuneMode::frozen;
  frozen.freeze = {"model.layers.[0-3].*"};
  frozen.fsdp = {1, false};
  const Planned plan = planned(frozen);
  const ExportedFile fsdp1 = export_fsdp1(plan.plan, plan.model, 8, 8);
  const nlohmann::json tables = compile_and_read(fsdp1);
  CHECK(tables.at("FREEZE_PATTERNS") == nlohmann::json({"model.layers.[0-3].*"}));
  CHECK(tables.at("LORA_CONFIG").is_null());
  CHECK(contains(fsdp1.contents, "use_orig_params=False,  # planned for FSDP1 without them"));
  CHECK(contains(export_deepspeed(plan.plan, plan.model, 8, 8).contents, "the frozen parameters (patterns"));
}
