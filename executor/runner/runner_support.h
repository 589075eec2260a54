// What the CPU runner can execute: the checks that turn an unsupported plan into one clear InputError up front.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "model_spec.h"
#include "plan.h"
#include "runtime_types.h"
#include "schedule.h"
#include "timeline.h"
#include "unit_layout.h"

namespace shardplan::runner {

// What an executor runs: its name for messages and the precision recipes it computes in.
struct ExecutorSupport {
  const char* name = "CPU";
  std::vector<std::string> precisions = {"fp32"};  // recipe names (precision.h); compared by their byte sizes
  bool tensor_parallel = false;  // runs plans with tensor_parallel_degree > 1 (the CPU runner: Note [2-D mesh])
  // Runs fine-tuning plans with frozen parameters and LoRA adapters over full-precision base weights (the CPU
  // runner: Note [Frozen shards] in flat_param.h); QLoRA's 4-bit storage is executed by neither runner.
  bool finetune = false;
  // Runs plans with context_parallel.degree > 1 (the CPU runner: Note [Context-parallel runner]), without tensor or
  // pipeline parallelism or fine-tuning.
  bool context_parallel = false;
};

// InputError (carrying `rank`) unless the plan is one this executor runs exactly as scheduled:
// - fine-tuning (costmodel/finetune.h) only where support.finetune, and then frozen parameters or LoRA over fp32
//   base weights (no QLoRA, no lora_dropout, no FSDP1 use_orig_params=True units: check_finetune_supported),
// - one of support.precisions (the CPU kernels compute in fp32 only, Note [Tracked bytes] in tracking_allocator.h;
//   the GPU executor also runs bf16-mixed-fp32-reduce),
// - AdamW (the only optimizer the runtime implements),
// - tensor_parallel_degree 1 unless support.tensor_parallel,
// - no CPU offload (no h2d/d2h ops) and no partial reshard-after-forward (reshard to a smaller group),
// - every unit's parameters, gradients and optimizer states sharded over the same group (FSDP/HSDP strategies and
//   NO_SHARD; ZeRO-1/2 would need a parameter all-gather after the step that the schedule does not contain).
void check_executable(const Plan& plan, const std::vector<UnitLayout>& layouts, int rank,
                      const ExecutorSupport& support = {});
// The first of those checks, which needs no layouts: `run` makes it as it reads the plan, before it resolves the
// model for the plan's fine-tuning.
void check_finetune_supported(const Plan& plan, int rank, const ExecutorSupport& support = {});
// Likewise needing no layouts: expert parallelism (Note [Expert parallelism] in planner/unit_layout.h) is planned and
// simulated; no runner has its all-to-alls yet.
void check_no_expert_parallel(const Plan& plan, int rank, const ExecutorSupport& support = {});
// Likewise: a torch.compile'd plan (training.torch_compile, Note [Compiled blocks]) predicts what compiled blocks keep;
// the runners execute eager kernels, so a run of it would be compared with a prediction it does not run.
void check_not_compiled(const Plan& plan, int rank, const ExecutorSupport& support = {});

// InputError (carrying `rank`) unless `micro_batches` is one step of the schedule: schedule.micro_batches batches,
// each of the schedule's sequences per micro-batch × seq_len — × context_parallel: a CP rank's schedule is on its
// share of each sequence, its step() takes whole ones (Note [Context-parallel runner]). Shared by the CPU and GPU
// runners' step().
void check_step_batches(const StepSchedule& schedule, std::span<const runtime::Batch> micro_batches, int rank,
                        int context_parallel = 1);

// The measured Timeline's event for `op` on `rank`: name, kind, stream and sizes as the simulator writes them; the
// caller sets the start and end it measured. Shared by the CPU and GPU runners, so both traces read alike.
TimelineEvent measured_event(const Op& op, const StepSchedule& schedule, int rank);

}  // namespace shardplan::runner
