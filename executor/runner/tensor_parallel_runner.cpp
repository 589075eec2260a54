// The CPU runner's tensor parallelism: polling TP collectives, sequence shares of a batch, replicated gradient sums
// and the collective counts of a step's passes, read from the schedule.
#include "tensor_parallel_runner.h"

#include <algorithm>
#include <string>

#include "errors.h"
#include "tensor_parallel_model.h"

namespace shardplan::runner {

void CommTensorParallelGroup::wait(comm::CommHandle handle) {
  while (!handle.test()) runtime::poll(progress_);
}

void CommTensorParallelGroup::all_gather(std::span<const float> local, std::span<float> whole) {
  SHARDPLAN_CHECK(whole.size() == local.size() * static_cast<std::size_t>(degree()), "TP all-gather sizes");
  wait(comm_->all_gather(local.data(), local.size(), whole.data()));
}

void CommTensorParallelGroup::reduce_scatter(std::span<const float> whole, std::span<float> local) {
  SHARDPLAN_CHECK(whole.size() == local.size() * static_cast<std::size_t>(degree()), "TP reduce-scatter sizes");
  wait(comm_->reduce_scatter(whole.data(), local.data(), local.size()));
}

void CommTensorParallelGroup::all_reduce(std::span<float> buffer) {
  wait(comm_->all_reduce(buffer.data(), buffer.size()));
}

void CommTensorParallelGroup::all_reduce_max(std::span<float> buffer) {
  wait(comm_->all_reduce(buffer.data(), buffer.size(), comm::ReduceOp::max));
}

runtime::Batch sequence_parallel_share(const runtime::Batch& batch, int degree) {
  const std::int64_t whole = batch.token_count();
  if (whole % degree != 0) {
    throw InputError("step: a micro-batch of " + std::to_string(whole) + " tokens does not split over " +
                     std::to_string(degree) + " tensor-parallel ranks");
  }
  runtime::Batch part = batch;  // the whole micro-batch's ids (Note [Sequence-parallel tokens])
  part.micro_batch = 1;
  part.seq_len = static_cast<int>(whole / degree);
  part.group_degree = degree;
  return part;
}

ReplicatedGradients::ReplicatedGradients(const runtime::LayerParams& grads, const LayerSpec& rank_layer) {
  if (!rank_layer.kernels) return;
  for (const ActivationCollectiveSpec& collective : rank_layer.kernels->tp_backward) {
    if (collective.gradient_of.empty()) continue;
    const auto found = std::find_if(grads.tensors.begin(), grads.tensors.end(), [&](const runtime::BoundTensor& t) {
      return t.name == collective.gradient_of;
    });
    SHARDPLAN_CHECK(found != grads.tensors.end() && found->data != nullptr &&
                        static_cast<double>(found->element_count) == collective.elements,
                    "layer '" + rank_layer.name + "': no gradient of '" + collective.gradient_of + "' to sum over TP");
    tensors_.push_back(*found);
    kept_.emplace_back(found->data, found->data + found->element_count);
    std::fill_n(found->data, found->element_count, 0.0f);
  }
}

void ReplicatedGradients::sum_over(runtime::TensorParallelGroup& group) {
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    const runtime::BoundTensor& tensor = tensors_[i];
    std::span<float> delta(tensor.data, static_cast<std::size_t>(tensor.element_count));
    group.all_reduce(delta);
    for (std::size_t e = 0; e < delta.size(); ++e) delta[e] += kept_[i][e];
  }
}

comm::CommCounters expected_pass_collectives(const StepSchedule& schedule) {
  comm::CommCounters expected;
  for (const Op& op : schedule.ops) {
    if (!op.kernels) continue;
    for (const ActivationCollectiveCall& call : op.kernels->collectives) {
      const comm::Collective kind = call.kind == ActivationCollective::all_gather       ? comm::Collective::all_gather
                                    : call.kind == ActivationCollective::reduce_scatter ? comm::Collective::reduce_scatter
                                                                                        : comm::Collective::all_reduce;
      expected[kind].calls += 1;
      expected[kind].bytes += static_cast<std::uint64_t>(call.bytes);
    }
  }
  return expected;
}

}  // namespace shardplan::runner
