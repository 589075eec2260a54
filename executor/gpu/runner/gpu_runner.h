// GpuRunner: executes a StepSchedule for training steps on one GPU per rank — NCCL collectives on their own
// streams, cuBLAS/CUDA layers on the compute stream, CUDA events for every dependency, one host sync per step.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "adamw.h"
#include "communicator.h"
#include "cuda_pool_backend.h"
#include "device_flat_param.h"
#include "device_layer.h"
#include "device_pool.h"
#include "gemm.h"
#include "nccl_communicator.h"
#include "op_timer.h"
#include "plan.h"
#include "runner.h"
#include "runner_groups.h"
#include "schedule.h"
#include "step_clock.h"
#include "stream_assignment.h"
#include "tracking_allocator.h"

namespace shardplan::gpu {

struct GpuRunnerOptions {
  std::uint64_t seed = 0;  // parameter init: the same numbers as the CPU runner with the same seed
  runtime::AdamWOptions adamw{};
  int gpus_per_node = 0;   // for lowering's group placement; 0 = the whole world on one node
};

// Note [GPU runner]: the same walk over schedule.ops as the CPU runner (Note [Runner streams] in runner.h), but
// nothing waits on the host: each op is enqueued on its CUDA stream (StreamAssignment: compute, all-gather,
// reduce-scatter, copy streams) after cudaStreamWaitEvent on the events of its cross-stream dependencies, timed by a
// pair of CUDA events (Note [Event timing]) and followed by its own event when another stream needs it. A collective
// runs on its NCCL communicator's stream; the runner bridges it into its logical stream with one event each way, so
// the schedule's stream order holds even when an HSDP unit's reduce-scatter and all-reduce use two communicators.
// Memory is accounted when an op's allocation or free is enqueued (the schedule's instants, as on the CPU); the
// device pool's own high-water mark is reported beside it. The host synchronises once, at the end of the step.
//
// What it runs (check_executable with the GPU's support): fp32 and bf16-mixed-fp32-reduce plans, AdamW, no CPU
// offload, no partial reshard; bf16 plans with replicated (NO_SHARD) units are refused, since those would need a
// persistent bf16 copy of the parameters that the schedule does not allocate.
class GpuRunner {
 public:
  // Collective over `world` (NCCL, for the data) and `control` (any backend over host buffers, for the step's
  // barrier and agreed loss/time): both must span the same ranks in the same order.
  GpuRunner(const ModelSpec& model, const Plan& plan, NcclCommunicator& world, comm::Communicator& control,
            GpuRunnerOptions options = {});
  ~GpuRunner();
  GpuRunner(const GpuRunner&) = delete;
  GpuRunner& operator=(const GpuRunner&) = delete;

  // One training step on this rank's schedule.micro_batches batches (host memory; uploaded at the step's start).
  runner::StepReport step(std::span<const runtime::Batch> micro_batches);
  // The full model's fp32 parameters in model_layout order (collective over the world).
  std::vector<float> gather_parameters();

  const StepSchedule& schedule() const { return schedule_; }
  const StreamAssignment& assignment() const { return assignment_; }
  const runtime::ModelLayout& model_layout() const { return layout_; }
  int rank() const { return rank_; }

 private:
  class StepWalker;
  friend class StepWalker;

  ModelSpec model_;
  Plan plan_;
  GpuRunnerOptions options_;
  comm::Communicator* control_;
  int rank_ = 0;
  int world_size_ = 1;
  int device_ = 0;
  StepSchedule schedule_;
  StreamAssignment assignment_;
  runtime::ModelLayout layout_;
  std::vector<std::unique_ptr<DeviceLayer>> layers_;
  std::array<cudaStream_t, kGpuStreamCount> streams_{};
  std::vector<cudaEvent_t> events_;       // StreamAssignment's dependency events (timing disabled)
  cudaEvent_t bridge_event_ = nullptr;    // reused for each hop into and out of a communicator's stream
  runner::StepClock clock_;
  runner::TrackingAllocator tracker_;
  std::unique_ptr<CudaPoolBackend> backend_;
  std::unique_ptr<DevicePool> pool_;
  std::unique_ptr<kernels::GemmRunner> gemm_;
  std::unique_ptr<OpTimer> timer_;
  std::unique_ptr<runner::RunnerGroups> groups_;
  std::vector<std::unique_ptr<DeviceFlatParam>> params_;
  std::int64_t optimizer_steps_ = 0;
};

}  // namespace shardplan::gpu
