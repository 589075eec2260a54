// The data-parallel view of a 2-D plan (Note [2-D plans]).
#include "tensor_parallel_view.h"

namespace shardplan {

DataParallelView data_parallel_view(const Plan& plan, const ModelSpec& model, int world_size, int gpus_per_node) {
  const int degree = plan.tensor_parallel_degree;
  DataParallelView view;
  view.model = tensor_parallel_shard(model, pytorch_tensor_parallel(degree));
  view.plan = plan;
  view.plan.tensor_parallel_degree = 1;
  view.world_size = world_size / degree;
  view.gpus_per_node = gpus_per_node / degree;
  return view;
}

}  // namespace shardplan
