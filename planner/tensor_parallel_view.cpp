// The data-parallel view of a 2-D plan (Note [2-D plans]).
#include "tensor_parallel_view.h"

namespace shardplan {

TensorParallelStyle pytorch_tensor_parallel(int degree) {
  TensorParallelStyle style;
  style.degree = degree;
  style.sequence_parallel = true;       // torchtitan's apply_tp: SequenceParallel on the norms, Shard(1) residuals
  style.keeps_gathered_inputs = true;   // DTensor: the linear saves its redistributed (gathered) input
  return style;
}

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
