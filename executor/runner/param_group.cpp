// ParamGroup: the collectives of one unit and the gradient bookkeeping around them.
#include "param_group.h"

#include <algorithm>

#include "errors.h"

namespace shardplan::runner {

// Note [Gradient mean]: every rank's backward produces the gradient of its own mean loss (scaled by 1/k for k
// accumulated micro-batches); the training loss is the mean over all data-parallel ranks, so the reduced gradient is
// the sum divided by the world's data-parallel ranks, as DDP/FSDP's default gradient averaging does. Dividing once
// after the sum (not before) keeps the sum exact in the common case and matches the reference's single mean. For
// replicated gradients reduced every micro-batch, the in-place all-reduce also sums the already-averaged earlier
// micro-batches, which are identical on every rank, so dividing by the world leaves them unchanged.

comm::CommHandle ParamGroup::unshard() {
  FlatParam& param = *param_;
  const std::span<float> gathered = param.allocate_unsharded();
  comm::Communicator& group = groups_->shard(param.sizes().param_group);
  group.label_next("all_gather of unit '" + param.sizes().name + "'");  // Note [Step watchdog]
  return group.all_gather(param.shard().data(), static_cast<std::size_t>(param.sizes().shard_elements),
                          gathered.data());
}

comm::CommHandle ParamGroup::reduce_scatter_grads() {
  FlatParam& param = *param_;
  SHARDPLAN_CHECK(param.unsharded_grad_allocated(), "unit '" + param.sizes().name + "' reduced without a gradient");
  SHARDPLAN_CHECK(!reduce_output_.allocated(), "unit '" + param.sizes().name + "' reduced twice at once");
  // The comm buffer is tracked by the same allocator as the gradient (the FlatParam's).
  reduce_output_ = param.make_buffer(MemoryCategory::comm_buffers, param.sizes().grad_shard_elements);
  comm::Communicator& group = groups_->shard(param.sizes().grad_group);
  group.label_next("reduce_scatter of unit '" + param.sizes().name + "'");
  return group.reduce_scatter(param.unsharded_grad().data(), reduce_output_.data(),
                              static_cast<std::size_t>(param.sizes().grad_shard_elements));
}

comm::CommHandle ParamGroup::all_reduce_replicas() {
  SHARDPLAN_CHECK(reduce_output_.allocated(), "unit '" + param_->sizes().name + "' all-reduced before its reduce-scatter");
  comm::Communicator& group = groups_->replica(param_->sizes().grad_group);
  group.label_next("all_reduce (replicas) of unit '" + param_->sizes().name + "'");
  return group.all_reduce(reduce_output_.data(), static_cast<std::size_t>(reduce_output_.size()));
}

comm::CommHandle ParamGroup::all_reduce_world() {
  FlatParam& param = *param_;
  world_reduced_ = true;
  // With a full-size gradient copy the copy is reduced (then accumulated); otherwise the replicated gradient itself.
  const std::span<float> grads = param.grad_copies() ? param.unsharded_grad() : param.shard_grad();
  groups_->world().label_next("all_reduce of unit '" + param.sizes().name + "'");
  return groups_->world().all_reduce(grads.data(), grads.size());
}

void ParamGroup::finish_reduction() {
  FlatParam& param = *param_;
  const float scale = 1.0f / static_cast<float>(data_parallel_ranks_);
  std::span<float> target = param.shard_grad();
  if (reduce_output_.allocated()) {
    const std::span<const float> reduced = reduce_output_.values();
    for (std::size_t i = 0; i < target.size(); ++i) target[i] += reduced[i] * scale;
  } else if (world_reduced_ && param.grad_copies()) {
    const std::span<const float> reduced = param.unsharded_grad();
    for (std::size_t i = 0; i < target.size(); ++i) target[i] += reduced[i] * scale;
  } else if (world_reduced_) {
    for (float& value : target) value *= scale;
  }
  world_reduced_ = false;
}

void ParamGroup::release_gradient_input() {
  SHARDPLAN_CHECK(param_->unsharded_grad_allocated(), "unit '" + param_->sizes().name + "' freed its gradient twice");
  param_->free_unsharded_grad();
}

void ParamGroup::release_reduce_output() {
  SHARDPLAN_CHECK(reduce_output_.allocated(), "unit '" + param_->sizes().name + "' freed its reduced shard twice");
  reduce_output_.release();
}

}  // namespace shardplan::runner
