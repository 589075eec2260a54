// The CPU runner's tensor parallelism: polling TP collectives, sequence shares of a batch, replicated gradient sums
// and the expected TP collective counts of a step.
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

runtime::Batch sequence_parallel_share(const runtime::Batch& batch, int degree, int rank) {
  const std::int64_t whole = batch.token_count();
  if (whole % degree != 0) {
    throw InputError("step: a micro-batch of " + std::to_string(whole) + " tokens does not split over " +
                     std::to_string(degree) + " tensor-parallel ranks");
  }
  const std::int64_t share = whole / degree, first = share * rank;
  runtime::Batch part;
  part.micro_batch = 1;
  part.seq_len = static_cast<int>(share);
  part.tokens.assign(batch.tokens.begin() + first, batch.tokens.begin() + first + share);
  part.targets.assign(batch.targets.begin() + first, batch.targets.begin() + first + share);
  return part;
}

ReplicatedGradients::ReplicatedGradients(const runtime::LayerParams& grads, LayerKind kind) {
  for (const runtime::BoundTensor& tensor : grads.tensors) {
    if (runtime::tensor_parallel_split(kind, tensor.name) != runtime::TensorParallelSplit::replicated) continue;
    tensors_.push_back(tensor);
    kept_.insert(kept_.end(), tensor.data, tensor.data + tensor.element_count);
    std::fill_n(tensor.data, tensor.element_count, 0.0f);
  }
}

void ReplicatedGradients::sum_over(runtime::TensorParallelGroup& group) {
  if (tensors_.empty()) return;
  std::vector<float> deltas;
  deltas.reserve(kept_.size());
  for (const runtime::BoundTensor& tensor : tensors_) deltas.insert(deltas.end(), tensor.data, tensor.data + tensor.element_count);
  group.all_reduce(deltas);
  std::size_t at = 0;
  for (const runtime::BoundTensor& tensor : tensors_) {
    for (std::int64_t i = 0; i < tensor.element_count; ++i, ++at) tensor.data[i] = kept_[at] + deltas[at];
  }
}

comm::CommCounters tensor_parallel_collectives(const StepSchedule& schedule, const ModelSpec& model,
                                               std::int64_t whole_tokens) {
  comm::CommCounters expected;
  const auto activation_bytes = static_cast<std::uint64_t>(whole_tokens * model.hidden_size) * sizeof(float);
  for (const Op& op : schedule.ops) {
    if (op.kind != OpKind::forward && op.kind != OpKind::recompute && op.kind != OpKind::backward) continue;
    const LayerSpec& layer = model.layers.at(static_cast<std::size_t>(op.layer));
    if (layer.kind == LayerKind::transformer_block) {
      const runtime::TensorParallelPassCollectives pass = runtime::kTensorParallelBlockPass;
      expected[comm::Collective::all_gather].calls += static_cast<std::uint64_t>(pass.all_gathers);
      expected[comm::Collective::all_gather].bytes += static_cast<std::uint64_t>(pass.all_gathers) * activation_bytes;
      expected[comm::Collective::reduce_scatter].calls += static_cast<std::uint64_t>(pass.reduce_scatters);
      expected[comm::Collective::reduce_scatter].bytes +=
          static_cast<std::uint64_t>(pass.reduce_scatters) * activation_bytes;
    }
    if (op.kind != OpKind::backward) continue;
    const LayerSpec& owner = model.layers.at(layer.tied_to_layer.value_or(static_cast<std::size_t>(op.layer)));
    std::int64_t replicated = 0;
    for (const TensorSpec& tensor : owner.tensors) {
      if (runtime::tensor_parallel_split(owner.kind, tensor.name) == runtime::TensorParallelSplit::replicated) {
        replicated += tensor.element_count();
      }
    }
    if (replicated == 0) continue;
    expected[comm::Collective::all_reduce].calls += 1;
    expected[comm::Collective::all_reduce].bytes += static_cast<std::uint64_t>(replicated) * sizeof(float);
  }
  return expected;
}

}  // namespace shardplan::runner
