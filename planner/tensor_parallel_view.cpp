// The data-parallel view of a 2-D plan (Note [2-D plans]).
#include "tensor_parallel_view.h"

namespace shardplan {

ParallelDims data_parallel_dims(const ParallelDims& dims) {
  ParallelDegrees degrees = dims.degrees();
  degrees.tp = 1;
  degrees.pp = 1;
  return ParallelDims(degrees, dims.data_parallel_world_size());
}

ModelSpec data_parallel_model(const ModelSpec& model, const ParallelDims& dims) {
  if (dims.tp() == 1) return model;
  return tensor_parallel_shard(model, pytorch_tensor_parallel(dims.tp()));
}

DataParallelView data_parallel_view(const Plan& plan, const ModelSpec& model, const ParallelDims& dims,
                                    int gpus_per_node) {
  DataParallelView view;
  view.model = data_parallel_model(model, dims);
  view.plan = plan;
  view.plan.tensor_parallel_degree = 1;
  view.dims = data_parallel_dims(dims);
  view.gpus_per_node = dims.data_parallel_gpus_per_node(gpus_per_node);
  return view;
}

}  // namespace shardplan
