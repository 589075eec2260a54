// GpuRunner: set-up (lowering, checks, streams, events, pool, groups, sharded init), teardown, gathering the model.
#include "gpu_runner.h"

#include <source_location>
#include <string>

#include "cuda_check.h"
#include "errors.h"
#include "flat_param.h"
#include "rank_program.h"
#include "runner_support.h"
#include "unit_layout.h"

namespace shardplan::gpu {

namespace {

DeviceDType gather_dtype_of(const Plan& plan) {
  return plan.training.precision.param_compute_bytes == 2 ? DeviceDType::bf16 : DeviceDType::f32;
}

}  // namespace

GpuRunner::GpuRunner(const ModelSpec& model, const Plan& plan, NcclCommunicator& world, comm::Communicator& control,
                     GpuRunnerOptions options)
    : model_(model), plan_(plan), options_(options), control_(&control),
      rank_(world.group().world_ranks.at(static_cast<std::size_t>(world.rank()))), world_size_(world.size()),
      device_(world.device()), tracker_(rank_, clock_) {
  if (control.size() != world.size()) {
    throw InternalError("GPU runner: the control communicator has " + std::to_string(control.size()) +
                        " ranks, the NCCL world " + std::to_string(world.size()));
  }
  const int gpus_per_node = options_.gpus_per_node > 0 ? options_.gpus_per_node : world_size_;
  const DeviceDType gather_dtype = gather_dtype_of(plan_);
  std::vector<UnitLayout> layouts;
  try {
    layouts = unit_layouts(plan_, model_, world_size_, gpus_per_node);
    runner::check_executable(plan_, layouts, rank_, runner::ExecutorSupport{"GPU", {"fp32", "bf16-mixed-fp32-reduce"}});
    for (const UnitLayout& layout : layouts) {
      if (gather_dtype == DeviceDType::bf16 && !layout.gathers) {
        throw InputError("plan: unit '" + layout.name + "' is replicated (no_shard) under precision '" +
                             plan_.training.precision.name + "'; the GPU executor runs replicated units in fp32 only",
                         std::source_location::current(), rank_);
      }
    }
    // Note [Rank program]: the program both executors take; for the plain FSDP plans check_executable lets through,
    // the plan lowered over the world.
    schedule_ =
        lower_rank_program(plan_, model_, parallel_dims(plan_, world_size_), gpus_per_node, world.rank()).schedule;
    layout_ = runtime::model_layout(model_);
    for (std::size_t index = 0; index < model_.layers.size(); ++index) {
      layers_.push_back(make_device_layer(model_, index));
    }
  } catch (const InputError& error) {
    if (error.rank() >= 0) throw;
    throw InputError(error.what(), error.where(), rank_);
  }
  assignment_ = assign_streams(schedule_);

  CUDA_CHECK(cudaSetDevice(device_));
  for (cudaStream_t& stream : streams_) CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  events_.resize(static_cast<std::size_t>(assignment_.event_count));
  for (cudaEvent_t& event : events_) CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&bridge_event_, cudaEventDisableTiming));
  backend_ = std::make_unique<CudaPoolBackend>(device_);
  pool_ = std::make_unique<DevicePool>(*backend_, tracker_);
  const cudaStream_t compute = streams_[static_cast<std::size_t>(GpuStream::compute)];
  gemm_ = std::make_unique<kernels::GemmRunner>(compute);
  timer_ = std::make_unique<OpTimer>(schedule_.ops.size());
  groups_ = std::make_unique<runner::RunnerGroups>(world, layouts);

  runtime::InitOptions init;
  init.seed = options_.seed;
  const std::vector<UnitInfo> units = plan_units(plan_, model_);
  for (std::size_t unit = 0; unit < layouts.size(); ++unit) {
    const int group = layouts[unit].param_group;
    // Shard groups are consecutive ranks (make_shard_group), so the index inside the group is its rank there.
    const int shard_index = group > 1 ? groups_->shard(group).rank() : 0;
    params_.push_back(std::make_unique<DeviceFlatParam>(layout_, runtime::unit_param_layout(layout_, units[unit].layers),
                                                        layouts[unit], shard_index, init, gather_dtype, *pool_,
                                                        compute));
  }
  CUDA_CHECK(cudaStreamSynchronize(compute));
}

GpuRunner::~GpuRunner() {
  // Everything enqueued must finish before its buffers go back to the pool and the streams go away; errors cannot
  // be reported from here, and a failed step has already thrown.
  cudaDeviceSynchronize();
  params_.clear();
  gemm_.reset();
  timer_.reset();
  pool_.reset();
  for (cudaStream_t stream : streams_) {
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
  for (cudaEvent_t event : events_) cudaEventDestroy(event);
  if (bridge_event_ != nullptr) cudaEventDestroy(bridge_event_);
}

std::vector<float> GpuRunner::gather_parameters() {
  // Outside any step and not accounted: plain cudaMalloc, synchronous copies.
  std::vector<float> model_flat(static_cast<std::size_t>(layout_.element_count), 0.0f);
  for (auto& param : params_) {
    const UnitLayout& sizes = param->sizes();
    std::vector<float> unit_flat(static_cast<std::size_t>(sizes.gathers ? sizes.padded_elements : sizes.shard_elements));
    if (sizes.gathers) {
      float* gathered = nullptr;
      CUDA_CHECK(cudaMalloc(&gathered, unit_flat.size() * sizeof(float)));
      groups_->shard(sizes.param_group)
          .all_gather(param->shard(), static_cast<std::size_t>(sizes.shard_elements), gathered)
          .wait();
      CUDA_CHECK(cudaMemcpy(unit_flat.data(), gathered, unit_flat.size() * sizeof(float), cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaFree(gathered));
    } else if (!unit_flat.empty()) {
      CUDA_CHECK(cudaMemcpy(unit_flat.data(), param->shard(), unit_flat.size() * sizeof(float), cudaMemcpyDeviceToHost));
    }
    runner::scatter_unit_into_model(layout_, param->unit_layout(), unit_flat, model_flat);
  }
  return model_flat;
}

}  // namespace shardplan::gpu
