// Tests of the fine-tuning recipe flags through the binary (Note [Exported recipes]): --loss and the 8-bit optimizers
// reach the plan JSON, the plan text and the fsdp2 script; the other exports, tensor parallelism, CPU offload and
// unknown names refuse in one line, exit 2. --activation-offload likewise (Note [Exported activation offloading]),
// and `run` refuses it. --optimizer-in-backward and --optimizer cpu-adamw (Note [Exported optimizer step]) too.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_binary.h"

namespace {

using shardplan_test::contains;
using shardplan_test::expect_input_error;
using shardplan_test::read_text_file;
using shardplan_test::RunResult;
using shardplan_test::run_shardplan;
using shardplan_test::scratch;

// `plan` of tiny-llama on 4 CPU ranks with `extra` flags appended.
std::vector<std::string> plan_command(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"plan", "-m", "tiny-llama", "-c", "4xcpu", "--seq-len", "64"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

struct Exported {
  std::string script, text;
  nlohmann::json plan;
};

// `plan --export fsdp2 --out P` with `recipe`: the script, stdout and the plan file.
Exported exported(const std::string& name, const std::vector<std::string>& recipe) {
  const auto dir = scratch("recipe-" + name);
  std::vector<std::string> extra = {"--export", "fsdp2", "--out-dir", dir.string(), "--out", (dir / "p.json").string()};
  extra.insert(extra.end(), recipe.begin(), recipe.end());
  const RunResult result = run_shardplan(plan_command(extra));
  INFO(result.err);
  REQUIRE(result.exit_status == 0);
  Exported out{read_text_file(dir / "fsdp2_plan.py"), result.out,
               nlohmann::json::parse(read_text_file(dir / "p.json"))};
  // The script parses as Python where python3 is at hand (the export checker's own test reads it with ast too).
  if (std::system("command -v python3 > /dev/null 2>&1") == 0) {
    const std::string command = "python3 -c \"import ast,sys; ast.parse(open(sys.argv[1]).read())\" '" +
                                (dir / "fsdp2_plan.py").string() + "'";
    CHECK(std::system(command.c_str()) == 0);
  }
  std::filesystem::remove_all(dir);
  return out;
}

// `simulate` of tiny-llama on 4 CPU ranks reading `plan` back from a file: the planned recipe must survive the trip.
RunResult simulate_plan(const nlohmann::json& plan, const std::string& name) {
  const auto dir = scratch(name);
  const std::string plan_file = (dir / "p.json").string();
  std::ofstream(plan_file) << plan.dump();
  const RunResult simulated = run_shardplan({"simulate", "-m", "tiny-llama", "-c", "4xcpu", "--plan", plan_file});
  std::filesystem::remove_all(dir);
  return simulated;
}

}  // namespace

TEST_CASE("recipes: --loss chunked-ce reaches the plan JSON, the text and the fsdp2 script (torchtune's loss)") {
  const Exported out = exported("chunked", {"--loss", "chunked-ce"});
  CHECK(out.plan.at("training").at("loss") == "chunked-ce");
  CHECK(contains(out.text, "recipe: loss chunked-ce (torchtune CEWithChunkedOutputLoss, 8 chunks"));
  CHECK(contains(out.script, "LOSS = \"chunked-ce\""));
  CHECK(contains(out.script, "from torchtune.modules.loss import CEWithChunkedOutputLoss"));
  CHECK(contains(out.script, "loss_fn = CEWithChunkedOutputLoss(num_output_chunks=8)"));
  CHECK(contains(out.script, "logits.tensor_split(loss_fn.num_output_chunks, dim=1)"));
  CHECK_FALSE(contains(out.script, "_apply_fused_linear_cross_entropy"));

  const Exported plain = exported("plain", {});
  CHECK_FALSE(plain.plan.at("training").contains("loss"));  // plain plans write as before
  CHECK_FALSE(contains(plain.script, "LOSS ="));
  CHECK_FALSE(contains(plain.text, "recipe:"));
}

TEST_CASE("recipes: --loss linear-ce patches Liger's fused linear cross-entropy in before fully_shard") {
  const Exported out = exported("linear", {"--loss", "linear-ce"});
  CHECK(out.plan.at("training").at("loss") == "linear-ce");
  CHECK(contains(out.text, "recipe: loss linear-ce (Liger fused linear cross-entropy"));
  CHECK(contains(out.script, "from liger_kernel.transformers import _apply_liger_kernel_to_instance"));
  CHECK(contains(out.script, "cross_entropy=False, fused_linear_cross_entropy=True)"));
  const auto patch = out.script.find("    _apply_fused_linear_cross_entropy(model)\n");
  REQUIRE(patch != std::string::npos);
  CHECK(patch < out.script.find("    fully_shard("));
  CHECK(contains(out.script, "return model(input_ids=input_ids, labels=labels).loss"));
}

TEST_CASE("recipes: --optimizer adamw8bit and paged-adamw8bit reach the plan and build bitsandbytes' optimizers") {
  const Exported eight = exported("adamw8bit", {"--optimizer", "adamw8bit"});
  CHECK(eight.plan.at("training").at("optimizer") == "adamw8bit");
  CHECK(contains(eight.text, "recipe: optimizer adamw8bit (bitsandbytes"));
  CHECK(contains(eight.script, "OPTIMIZER = \"adamw8bit\""));
  CHECK(contains(eight.script, "return bnb.optim.AdamW8bit(params, lr=lr)"));
  const Exported paged = exported("paged", {"--optimizer", "paged-adamw8bit", "--loss", "chunked-ce"});
  CHECK(paged.plan.at("training").at("optimizer") == "paged-adamw8bit");
  CHECK(contains(paged.script, "return bnb.optim.PagedAdamW8bit(params, lr=lr)"));
  CHECK(contains(paged.script, "CEWithChunkedOutputLoss(num_output_chunks=8)"));
  // The planned plan, read back by simulate, keeps the recipe.
  const RunResult simulated = simulate_plan(paged.plan, "recipe-simulate");
  INFO(simulated.err);
  CHECK(simulated.exit_status == 0);
  CHECK(contains(simulated.out, "recipe: loss chunked-ce"));
  CHECK(contains(simulated.out, "optimizer paged-adamw8bit"));
}

TEST_CASE("recipes: exports that cannot carry them, TP, CPU offload and unknown names refuse in one line") {
  const auto dir = scratch("recipe-refused");
  for (const std::string format : {"deepspeed", "fsdp1", "torchtitan"}) {
    // torchtitan's own precision given, so stderr holds only the refusal (no note on the recipe it would choose).
    const std::vector<std::string> export_flags = {"--export", format, "--out-dir", dir.string(), "--precision",
                                                   format == "torchtitan" ? "bf16-mixed-fp32-reduce" : "bf16-mixed"};
    std::vector<std::string> loss = {"--loss", "chunked-ce"}, optimizer = {"--optimizer", "adamw8bit"};
    loss.insert(loss.end(), export_flags.begin(), export_flags.end());
    optimizer.insert(optimizer.end(), export_flags.begin(), export_flags.end());
    expect_input_error(plan_command(loss), {"--export " + format, "--loss chunked-ce", "expected --export fsdp2"});
    expect_input_error(plan_command(optimizer),
                       {"--export " + format, "--optimizer adamw8bit", "expected --export fsdp2"});
  }
  CHECK(std::filesystem::is_empty(dir));
  std::filesystem::remove_all(dir);
  expect_input_error(plan_command({"--loss", "linear-ce", "--tensor-parallel", "2"}),
                     {"--loss linear-ce", "--tensor-parallel 2", "expected --tensor-parallel 1"});
  expect_input_error(plan_command({"--optimizer", "adamw8bit", "--cpu-offload"}),
                     {"--cpu-offload", "--optimizer adamw8bit", "expected --optimizer adamw"});
  expect_input_error(plan_command({"--loss", "chunked"}), {"--loss 'chunked'", "expected cross-entropy"});
  expect_input_error(plan_command({"--optimizer", "adamw-8bit"}), {"--optimizer 'adamw-8bit'", "'adamw8bit'"});
}

TEST_CASE("recipes: --activation-offload reaches the plan JSON, the text, simulate and the fsdp2 script") {
  const Exported out = exported("offload", {"--activation-offload"});
  CHECK(out.plan.at("training").at("activation_offload") == true);
  CHECK(contains(out.text, "recipe: activation offload (torchtune OffloadActivations"));
  CHECK(contains(out.script, "ACTIVATION_OFFLOAD = True"));
  CHECK(contains(out.script, "from torchtune.training import NoOpManager, OffloadActivations"));
  CHECK(contains(out.script, "# The planned activation offloading: run the forward under"));
  const Exported plain = exported("offload-plain", {});
  CHECK_FALSE(plain.plan.at("training").contains("activation_offload"));
  CHECK_FALSE(contains(plain.script, "ACTIVATION_OFFLOAD"));
  const RunResult simulated = simulate_plan(out.plan, "offload-simulate");
  INFO(simulated.err);
  CHECK(simulated.exit_status == 0);
  CHECK(contains(simulated.out, "recipe: activation offload"));
  CHECK(contains(simulated.out, "host memory (offloaded states and activations)"));
  if (shardplan_test::mpi_build()) {  // fp32: the CPU executor's precision, so the refusal is the offload's
    const auto dir = scratch("offload-run");
    const std::string fp32_file = (dir / "fp32.json").string();
    std::ofstream(fp32_file) << exported("offload-fp32", {"--activation-offload", "--precision", "fp32"}).plan.dump();
    expect_input_error({"run", "-m", "tiny-llama", "--plan", fp32_file, "--device", "cpu", "--steps", "1"},
                       {"activation_offload is set"});
    std::filesystem::remove_all(dir);
  }
}

TEST_CASE("recipes: --activation-offload refuses the other exports and tensor parallelism in one line") {
  const auto dir = scratch("offload-refused");
  for (const std::string format : {"deepspeed", "fsdp1", "torchtitan"}) {
    expect_input_error(plan_command({"--activation-offload", "--export", format, "--out-dir", dir.string(),
                                     "--precision", format == "torchtitan" ? "bf16-mixed-fp32-reduce" : "bf16-mixed"}),
                       {"--export " + format + ": --activation-offload is carried by fsdp2 exports only",
                        "expected --export fsdp2, or no --activation-offload"});
  }
  CHECK(std::filesystem::is_empty(dir));
  std::filesystem::remove_all(dir);
  expect_input_error(plan_command({"--activation-offload", "--tensor-parallel", "2"}),
                     {"--activation-offload with --tensor-parallel 2", "expected --tensor-parallel 1"});
}

TEST_CASE("recipes: --optimizer-in-backward reaches the plan JSON, the text, simulate and the fsdp2 script") {
  const Exported out = exported("in-backward", {"--optimizer-in-backward"});
  CHECK(out.plan.at("training").at("optimizer_in_backward") == true);
  CHECK(out.plan.at("training").at("grad_accumulation_steps") == 1);
  CHECK(contains(out.text, "recipe: optimizer in backward (torchtune optimizer_in_bwd"));
  CHECK(contains(out.script, "OPTIMIZER_IN_BACKWARD = True"));
  CHECK(contains(out.script, "def apply_optimizer_in_backward(model, make_optimizer):"));
  CHECK_FALSE(exported("in-backward-plain", {}).plan.at("training").contains("optimizer_in_backward"));
  const RunResult simulated = simulate_plan(out.plan, "in-backward-simulate");
  INFO(simulated.err);
  CHECK(simulated.exit_status == 0);
  CHECK(contains(simulated.out, "recipe: optimizer in backward"));
  if (shardplan_test::mpi_build()) {  // fp32: the CPU executor's precision, so the refusal is the flag's
    const auto dir = scratch("in-backward-run");
    const std::string fp32_file = (dir / "fp32.json").string();
    std::ofstream(fp32_file) << exported("in-backward-fp32", {"--optimizer-in-backward", "--precision", "fp32"})
                                    .plan.dump();
    expect_input_error({"run", "-m", "tiny-llama", "--plan", fp32_file, "--device", "cpu", "--steps", "1"},
                       {"optimizer_in_backward is set"});
    std::filesystem::remove_all(dir);
  }
  // A fixed global batch: the search keeps all of a rank's sequences in one micro-batch (no accumulation).
  const Exported batched = exported("in-backward-batch", {"--optimizer-in-backward", "--global-batch", "8"});
  CHECK(batched.plan.at("training").at("micro_batch") == 2);
  CHECK(batched.plan.at("training").at("grad_accumulation_steps") == 1);
}

TEST_CASE("recipes: --optimizer-in-backward refuses accumulation, CPU offload, TP and other exports in one line") {
  expect_input_error(plan_command({"--optimizer-in-backward", "--global-batch", "8", "--micro-batch", "1"}),
                     {"--optimizer-in-backward with 2 micro-batches per step",
                      "torchtune refuses gradient accumulation", "expected one micro-batch per step"});
  expect_input_error(plan_command({"--optimizer-in-backward", "--cpu-offload"}),
                     {"--optimizer-in-backward with --cpu-offload", "expected no CPU offload"});
  expect_input_error(plan_command({"--optimizer-in-backward", "--tensor-parallel", "2"}),
                     {"--optimizer-in-backward with --tensor-parallel 2", "expected --tensor-parallel 1"});
  expect_input_error({"simulate", "-m", "tiny-llama", "-c", "4xcpu", "--seq-len", "64", "--optimizer-in-backward",
                      "--cpu-offload"},
                     {"--optimizer-in-backward with --cpu-offload"});
  const auto dir = scratch("in-backward-refused");
  for (const std::string format : {"deepspeed", "fsdp1"}) {
    expect_input_error(plan_command({"--optimizer-in-backward", "--export", format, "--out-dir", dir.string()}),
                       {"--export " + format + ": --optimizer-in-backward is carried by fsdp2 and torchtitan exports "
                        "only", "expected --export fsdp2 or torchtitan"});
  }
  CHECK(std::filesystem::is_empty(dir));
  std::filesystem::remove_all(dir);
}

TEST_CASE("recipes: --optimizer cpu-adamw plans CPU offload and exports DeepSpeed's CPU-Adam config") {
  const auto dir = scratch("cpu-adam");
  const RunResult result = run_shardplan(plan_command({"--optimizer", "cpu-adamw", "--export", "deepspeed",
                                                       "--out-dir", dir.string(), "--out",
                                                       (dir / "p.json").string()}));
  INFO(result.err);
  REQUIRE(result.exit_status == 0);
  CHECK(contains(result.out, "recipe: optimizer cpu-adamw (DeepSpeed CPU-Adam"));
  const auto plan = nlohmann::json::parse(read_text_file(dir / "p.json"));
  CHECK(plan.at("training").at("optimizer") == "cpu-adamw");
  CHECK(plan.at("offload").at("params") == true);
  const auto config = nlohmann::json::parse(read_text_file(dir / "ds_config.json"));
  CHECK(config.at("optimizer").at("type") == "AdamW");
  CHECK(config.at("optimizer").at("params").at("torch_adam") == false);
  CHECK(config.at("zero_optimization").at("offload_optimizer").at("device") == "cpu");
  std::filesystem::remove_all(dir);
  const auto refused = scratch("cpu-adam-refused");
  for (const std::string format : {"fsdp2", "fsdp1"}) {
    expect_input_error(plan_command({"--optimizer", "cpu-adamw", "--export", format, "--out-dir", refused.string()}),
                       {"--export " + format + ": --optimizer cpu-adamw (DeepSpeed's CPU-Adam) is carried by "
                        "deepspeed exports only", "expected --export deepspeed, or --optimizer adamw"});
  }
  CHECK(std::filesystem::is_empty(refused));
  std::filesystem::remove_all(refused);
  expect_input_error(plan_command({"--optimizer", "cpu-adamw", "--cpu-offload=false"}),
                     {"--optimizer cpu-adamw without --cpu-offload", "expected --cpu-offload, or --optimizer adamw"});
  expect_input_error({"simulate", "-m", "tiny-llama", "-c", "4xcpu", "--seq-len", "64", "--optimizer", "cpu-adamw"},
                     {"--optimizer cpu-adamw without --cpu-offload"});
}

// Note [Export constrains the search]: DeepSpeed offloads parameters at ZeRO stage 3 only, so `--export deepspeed`
// searches CPU offload with stage-3 strategies alone (llama3-8b on 8 H100s once planned shard_grad_op with offload,
// then refused to write it: "strategy shard_grad_op is ZeRO stage 2").
TEST_CASE("recipes: --export deepspeed with CPU offload plans a ZeRO-3 strategy, and refuses a pinned stage 1 or 2") {
  const auto dir = scratch("cpu-adam-stage3");
  const RunResult result = run_shardplan({"plan", "-m", "llama3-8b", "-c", "8xH100-80GB", "--optimizer", "cpu-adamw",
                                          "--cpu-offload", "--export", "deepspeed", "--out-dir", dir.string()});
  INFO(result.err);
  REQUIRE(result.exit_status == 0);
  const auto config = nlohmann::json::parse(read_text_file(dir / "ds_config.json"));
  CHECK(config.at("zero_optimization").at("stage") == 3);
  CHECK(config.at("zero_optimization").at("offload_param").at("device") == "cpu");
  std::filesystem::remove_all(dir);
  expect_input_error({"plan", "-m", "llama3-8b", "-c", "8xH100-80GB", "--strategy", "zero1", "--cpu-offload",
                      "--export", "deepspeed"},
                     {"--cpu-offload with --strategy zero1 and --export deepspeed", "only at ZeRO stage 3"});
}
