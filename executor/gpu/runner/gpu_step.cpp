// GpuRunner::step: enqueues one StepSchedule on the CUDA streams (Note [GPU runner]), synchronises once, and reads
// back the loss, the per-op event times and the memory series into the measured Timeline.
#include <algorithm>
#include <source_location>
#include <span>
#include <string>
#include <utility>

#include "cuda_check.h"
#include "device_kernels.h"
#include "errors.h"
#include "gpu_runner.h"
#include "grad_reduction.h"
#include "runner_support.h"

namespace shardplan::gpu {

class GpuRunner::StepWalker {
 public:
  StepWalker(GpuRunner& runner, std::span<const runtime::Batch> batches)
      : r_(runner), ops_(runner.schedule_.ops), batches_(batches), saved_(runner.model_.layers.size()),
        world_reduced_(runner.params_.size(), false) {}

  // Enqueues the whole step and waits for it; returns this rank's mean loss over its micro-batches.
  double run() {
    const cudaStream_t compute = stream(GpuStream::compute);
    upload_batches(compute);
    r_.timer_->start_step(compute);
    // Every stream starts after the step's start (and after the batches are on the device).
    CUDA_CHECK(cudaEventRecord(r_.bridge_event_, compute));
    for (cudaStream_t other : r_.streams_) {
      if (other != compute) CUDA_CHECK(cudaStreamWaitEvent(other, r_.bridge_event_));
    }
    for (std::size_t index = 0; index < ops_.size(); ++index) {
      const Op& op = ops_[index];
      const GpuOpPlan& plan = r_.assignment_.ops[index];
      const cudaStream_t on = stream(plan.stream);
      for (int event : plan.wait_events) CUDA_CHECK(cudaStreamWaitEvent(on, r_.events_[static_cast<std::size_t>(event)]));
      r_.timer_->begin(index, on);
      run_op(op, on);
      r_.timer_->end(index, on);
      if (plan.record_event >= 0) CUDA_CHECK(cudaEventRecord(r_.events_[static_cast<std::size_t>(plan.record_event)], on));
      memory_marks_.push_back(r_.tracker_.current());
    }
    // The step's one host synchronisation (Note [GPU runner]).
    for (cudaStream_t each : r_.streams_) CUDA_CHECK(cudaStreamSynchronize(each));
    for (comm::CommHandle& handle : handles_) handle.wait();  // complete by now; surfaces NCCL async errors
    double loss_sum = 0;
    for (const DeviceBuffer& loss : losses_) {
      float value = 0;
      CUDA_CHECK(cudaMemcpy(&value, loss.data(), sizeof(float), cudaMemcpyDeviceToHost));
      loss_sum += value;
    }
    return loss_sum / static_cast<double>(batches_.size());
  }

  // After run(): one event per op on the device clock, and the memory after each op at that op's start.
  double fill_timeline(Timeline& timeline) {
    const std::vector<OpInterval> intervals = r_.timer_->read();
    double step_end_s = 0;
    timeline.events.resize(ops_.size());
    for (std::size_t index = 0; index < ops_.size(); ++index) {
      const Op& op = ops_[index];
      TimelineEvent& event = timeline.events[index];
      event = runner::measured_event(op, r_.schedule_, r_.rank_);
      event.start_s = intervals[index].start_s;
      event.end_s = intervals[index].end_s;
      step_end_s = std::max(step_end_s, event.end_s);
      timeline.memory.push_back({event.start_s, r_.rank_, memory_marks_[index]});
    }
    // Samples in time order per rank (the Timeline's contract); ops of different streams interleave.
    std::stable_sort(timeline.memory.begin(), timeline.memory.end(),
                     [](const MemorySample& a, const MemorySample& b) { return a.time_s < b.time_s; });
    return step_end_s;
  }

 private:
  cudaStream_t stream(GpuStream which) const { return r_.streams_[static_cast<std::size_t>(which)]; }

  [[noreturn]] void fail(const std::string& message, std::source_location where = std::source_location::current()) {
    throw InternalError(message, where, r_.rank_);
  }

  NcclCommunicator& nccl(comm::Communicator& group) {
    auto* device_group = dynamic_cast<NcclCommunicator*>(&group);
    if (device_group == nullptr) fail("GPU runner: a group communicator is not NCCL");
    return *device_group;
  }

  void upload_batches(cudaStream_t compute) {
    for (const runtime::Batch& batch : batches_) {
      const auto bytes = static_cast<std::int64_t>(batch.tokens.size() * sizeof(std::int32_t));
      DeviceBuffer tokens = r_.pool_->allocate(MemoryCategory::activations, bytes, stream_ref(compute));
      DeviceBuffer targets = r_.pool_->allocate(MemoryCategory::activations, bytes, stream_ref(compute));
      if (bytes > 0) {
        CUDA_CHECK(cudaMemcpyAsync(tokens.data(), batch.tokens.data(), static_cast<std::size_t>(bytes),
                                   cudaMemcpyHostToDevice, compute));
        CUDA_CHECK(cudaMemcpyAsync(targets.data(), batch.targets.data(), static_cast<std::size_t>(bytes),
                                   cudaMemcpyHostToDevice, compute));
      }
      device_batches_.push_back({batch.micro_batch, batch.seq_len, tokens.as<std::int32_t>(),
                                 targets.as<std::int32_t>()});
      batch_buffers_.push_back(std::move(tokens));
      batch_buffers_.push_back(std::move(targets));
    }
  }

  // A collective on `group`'s own stream, bridged into the logical stream `on` one event each way (Note [GPU runner]).
  template <typename Issue>
  void collective(cudaStream_t on, NcclCommunicator& group, comm::Collective kind, Issue issue) {
    const cudaStream_t comm_stream = group.stream(kind);
    CUDA_CHECK(cudaEventRecord(r_.bridge_event_, on));
    CUDA_CHECK(cudaStreamWaitEvent(comm_stream, r_.bridge_event_));
    handles_.push_back(issue());
    CUDA_CHECK(cudaEventRecord(r_.bridge_event_, comm_stream));
    CUDA_CHECK(cudaStreamWaitEvent(on, r_.bridge_event_));
  }

  void run_op(const Op& op, cudaStream_t on) {
    switch (op.kind) {
      case OpKind::all_gather: all_gather(op, on); break;
      case OpKind::wait: break;  // its event wait was enqueued above
      case OpKind::forward: forward(op, on); break;
      case OpKind::recompute: recompute(op, on); break;
      case OpKind::backward: backward(op, on); break;
      case OpKind::free_unsharded: param(op).free_unsharded(stream_ref(on)); break;
      case OpKind::reduce_scatter: reduce_scatter(op, on); break;
      case OpKind::all_reduce: all_reduce(op, on); break;
      case OpKind::optimizer_step: optimizer_step(on); break;
      default: fail(std::string("op kind '") + to_string(op.kind) + "' is not supported by the GPU runner");
    }
  }

  DeviceFlatParam& param(const Op& op) { return *r_.params_.at(static_cast<std::size_t>(op.unit)); }

  void all_gather(const Op& op, cudaStream_t on) {
    DeviceFlatParam& unit = param(op);
    const UnitLayout& sizes = unit.sizes();
    NcclCommunicator& group = nccl(r_.groups_->shard(sizes.param_group));
    void* gathered = unit.allocate_unsharded(stream_ref(on));
    const auto count = static_cast<std::size_t>(sizes.shard_elements);
    // The op says which dtype it gathers in; the flat parameter was built with the plan's (they must agree).
    const DeviceDType dtype = op.element_bytes == 2 ? DeviceDType::bf16 : DeviceDType::f32;
    if (dtype != unit.gather_dtype()) fail("all_gather of unit '" + sizes.name + "' in another dtype than its buffer");
    if (dtype == DeviceDType::bf16) {
      // Cast this rank's fp32 shard into its own slot of the gathered buffer, then gather in place (NCCL allows
      // sendbuff == recvbuff + rank·count: NCCL docs, "In-place Operations").
      auto* slot = static_cast<__nv_bfloat16*>(gathered) + static_cast<std::int64_t>(group.rank()) * sizes.shard_elements;
      kernels::cast_fp32_to_bf16(on, unit.shard(), slot, sizes.shard_elements);
      collective(on, group, comm::Collective::all_gather,
                 [&] { return group.all_gather(slot, count, gathered, DeviceDataType::bf16); });
    } else {
      collective(on, group, comm::Collective::all_gather,
                 [&] { return group.all_gather(unit.shard(), count, static_cast<float*>(gathered)); });
    }
  }

  DeviceContext context(cudaStream_t on) const { return {on, r_.pool_.get(), r_.gemm_.get()}; }

  void forward(const Op& op, cudaStream_t on) {
    const auto layer = static_cast<std::size_t>(op.layer);
    if (layer == 0) hidden_ = DeviceActivations{};
    DeviceLayerForward result =
        r_.layers_[layer]->forward(context(on), param(op).layer_params(r_.layout_, layer),
                                   device_batches_.at(static_cast<std::size_t>(op.micro_batch)), std::move(hidden_),
                                   op.checkpointing);
    saved_[layer] = std::move(result.saved);
    if (layer + 1 == r_.layers_.size()) {
      losses_.push_back(std::move(result.output.buffer));  // the mean loss, read back after the step
      hidden_ = DeviceActivations{};
    } else {
      hidden_ = std::move(result.output);
    }
  }

  void recompute(const Op& op, cudaStream_t on) {
    const auto layer = static_cast<std::size_t>(op.layer);
    saved_[layer] = r_.layers_[layer]->recompute(context(on), param(op).layer_params(r_.layout_, layer), saved_[layer]);
  }

  void backward(const Op& op, cudaStream_t on) {
    const auto layer = static_cast<std::size_t>(op.layer);
    DeviceFlatParam& unit = param(op);
    // Note [Gradient hazard] (runner_step.cpp): the schedule orders a unit's first backward of micro-batch m + 1
    // after its reduction of m, and StreamAssignment turned that into an event wait; a fresh gradient is allocated
    // (and zeroed) here because finish_reduction released the last one.
    if (unit.sizes().grad_copies) unit.ensure_unsharded_grad(on);
    const bool loss_layer = layer + 1 == r_.layers_.size();
    if (loss_layer) grad_ = DeviceActivations{};
    const float loss_scale = 1.0f / static_cast<float>(batches_.size());  // Note [Gradient mean]
    DeviceActivations input_grad =
        r_.layers_[layer]->backward(context(on), unit.layer_params(r_.layout_, layer), saved_[layer], grad_,
                                    unit.layer_grads(r_.layout_, layer), loss_scale);
    grad_ = std::move(input_grad);
    saved_[layer] = DeviceSaved{};
  }

  // Note [Reduction buffers] (schedule.h): a reduction's gradient input and comm buffer are freed where the schedule
  // frees them — at its end, or at the start of the next reduction on its stream, enqueued after it there, so the
  // stream order keeps them alive until it completed (`owner_unit` names whose).
  void release(std::span<const MemoryChange> changes, const Op& op, cudaStream_t on) {
    for (const MemoryChange& change : changes) {
      const int owner = change.owner_unit >= 0 ? change.owner_unit : op.unit;
      DeviceFlatParam& unit = *r_.params_.at(static_cast<std::size_t>(owner));
      if (change.category == MemoryCategory::unsharded_grads) {
        if (!unit.unsharded_grad_allocated()) fail("unit '" + unit.sizes().name + "' freed its gradient twice");
        unit.free_unsharded_grad(stream_ref(on));
      }
      if (change.category == MemoryCategory::comm_buffers) {
        if (!unit.reduce_output_allocated()) fail("unit '" + unit.sizes().name + "' freed its reduced shard twice");
        unit.free_reduce_output(stream_ref(on));
      }
    }
  }

  void reduce_scatter(const Op& op, cudaStream_t on) {
    DeviceFlatParam& unit = param(op);
    const UnitLayout& sizes = unit.sizes();
    if (!unit.unsharded_grad_allocated()) fail("unit '" + sizes.name + "' reduced without a gradient");
    release(op.frees_at_start, op, on);
    NcclCommunicator& group = nccl(r_.groups_->shard(sizes.grad_group));
    float* out = unit.allocate_reduce_output(stream_ref(on));
    collective(on, group, comm::Collective::reduce_scatter, [&] {
      return group.reduce_scatter(unit.unsharded_grad(), out, static_cast<std::size_t>(sizes.grad_shard_elements));
    });
    if (op.finishes_reduction) finish_reduction(op, on);
    release(op.frees, op, on);
  }

  void all_reduce(const Op& op, cudaStream_t on) {
    DeviceFlatParam& unit = param(op);
    const UnitLayout& sizes = unit.sizes();
    release(op.frees_at_start, op, on);
    if (op.group == GroupKind::replica) {
      if (!unit.reduce_output_allocated()) fail("unit '" + sizes.name + "' all-reduced before its reduce-scatter");
      NcclCommunicator& group = nccl(r_.groups_->replica(sizes.grad_group));
      collective(on, group, comm::Collective::all_reduce, [&] {
        return group.all_reduce(unit.reduce_output(), static_cast<std::size_t>(sizes.grad_shard_elements));
      });
    } else if (op.group == GroupKind::world) {
      world_reduced_[static_cast<std::size_t>(op.unit)] = true;
      NcclCommunicator& group = nccl(r_.groups_->world());
      float* grads = sizes.grad_copies ? unit.unsharded_grad() : unit.shard_grad();
      const std::int64_t count = sizes.grad_copies ? sizes.grad_padded_elements : sizes.grad_shard_elements;
      collective(on, group, comm::Collective::all_reduce,
                 [&] { return group.all_reduce(grads, static_cast<std::size_t>(count)); });
    } else {
      fail("all_reduce over group '" + std::string(to_string(op.group)) + "' is not supported");
    }
    if (op.finishes_reduction) finish_reduction(op, on);
    release(op.frees, op, on);
  }

  // As ParamGroup::finish_reduction (Note [Gradient mean]), enqueued on the reduction's stream.
  void finish_reduction(const Op& op, cudaStream_t on) {
    DeviceFlatParam& unit = param(op);
    const UnitLayout& sizes = unit.sizes();
    const float scale = 1.0f / static_cast<float>(r_.world_size_);
    const auto flag = static_cast<std::size_t>(op.unit);
    if (unit.reduce_output_allocated()) {
      accumulate_scaled(on, unit.shard_grad(), unit.reduce_output(), sizes.grad_shard_elements, scale);
    } else if (world_reduced_[flag] && sizes.grad_copies) {
      accumulate_scaled(on, unit.shard_grad(), unit.unsharded_grad(), sizes.grad_shard_elements, scale);
    } else if (world_reduced_[flag]) {
      scale_in_place(on, unit.shard_grad(), sizes.grad_shard_elements, scale);
    }
    world_reduced_[flag] = false;
  }

  void optimizer_step(cudaStream_t on) {
    ++r_.optimizer_steps_;
    const runtime::AdamWOptions& adamw = r_.options_.adamw;
    const kernels::AdamWOptions options{adamw.learning_rate, adamw.beta1, adamw.beta2, adamw.eps, adamw.weight_decay};
    for (auto& unit : r_.params_) {
      const std::int64_t count = unit->sizes().optimizer_shard_elements;
      kernels::adamw_step(on, unit->shard(), unit->shard_grad(), unit->exp_avg(), unit->exp_avg_sq(), count,
                          r_.optimizer_steps_, options, nullptr);
      if (count > 0) {
        CUDA_CHECK(cudaMemsetAsync(unit->shard_grad(), 0, static_cast<std::size_t>(count) * sizeof(float), on));
      }
    }
  }

  GpuRunner& r_;
  const std::vector<Op>& ops_;
  std::span<const runtime::Batch> batches_;
  std::vector<DeviceBuffer> batch_buffers_;
  std::vector<DeviceBatch> device_batches_;
  std::vector<DeviceSaved> saved_;
  std::vector<bool> world_reduced_;
  DeviceActivations hidden_;
  DeviceActivations grad_;
  std::vector<DeviceBuffer> losses_;
  std::vector<comm::CommHandle> handles_;
  std::vector<MemoryByCategory> memory_marks_;
};

runner::StepReport GpuRunner::step(std::span<const runtime::Batch> micro_batches) {
  runner::check_step_batches(schedule_, micro_batches, rank_);
  runner::StepReport report;
  const comm::CommCounters before = groups_->data_counters();
  control_->barrier();
  clock_.restart();
  tracker_.start_window();
  backend_->reset_used_high();
  double step_end_s = 0;
  {
    StepWalker walker(*this, micro_batches);
    report.local_loss = walker.run();
    step_end_s = walker.fill_timeline(report.timeline);
  }  // the walker's buffers (batches, losses) go back to the pool here
  report.collectives = groups_->data_counters().since(before);
  report.peak_bytes = tracker_.peak_total();
  report.memory_at_peak = tracker_.at_peak();
  report.peak_by_category = tracker_.peak_by_category();
  report.allocator_peak_bytes = static_cast<long long>(backend_->used_high_bytes());
  report.tokens = schedule_.tokens_per_step;
  report.timeline.source = "measured";

  float agreed[2] = {static_cast<float>(report.local_loss), static_cast<float>(step_end_s)};
  control_->all_reduce(&agreed[0], 1, comm::ReduceOp::sum).wait();
  control_->all_reduce(&agreed[1], 1, comm::ReduceOp::max).wait();
  report.loss = agreed[0] / static_cast<double>(world_size_);
  report.step_time_s = agreed[1];
  return report;
}

}  // namespace shardplan::gpu
