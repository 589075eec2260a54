// The data-parallel view of a 2-D (TP × FSDP) plan: one TP rank's model, FSDP over world / TP ranks.
#pragma once

#include "model_spec.h"
#include "parallel_dims.h"
#include "plan.h"
#include "tensor_parallel.h"

namespace shardplan {

// Note [2-D plans]: a plan with tensor_parallel_degree t > 1 runs on a DeviceMesh of (world / t) × t ranks, the TP
// dimension inside a node (torchtitan's ParallelDims: "dp_shard", "tp"). Every TP rank of a group holds 1/t of each
// layer (tensor_parallel_shard) and sees the same tokens; FSDP shards that 1/t over the world / t ranks of its
// data-parallel group, gpus_per_node / t of them per node. So the plan lowers as the FSDP plan (degree 1) of one TP
// rank's model over the data-parallel ranks: the schedule's world is theirs (StepSchedule::tensor_parallel_degree
// says the rest), FSDP's collectives cross the nodes as t concurrent groups that share the node's NICs (a group gets
// gpus_per_node / t of the node's GPUs' share, collective_cost.h GroupPlacement), and the TP collectives are in each
// pass's kernels (Note [Tensor-parallel collectives] in kernel_spec.h).
// The pieces are built only here (Note [ParallelDims] in costmodel/parallel_dims.h): the lowering, the runner and the
// per-degree search (search_2d.cpp) all take their view from these functions.
struct DataParallelView {
  ModelSpec model;        // one TP rank's
  Plan plan;              // tensor_parallel_degree 1
  ParallelDims dims;      // the data-parallel ranks' own: data_parallel_dims(the world's)
  int gpus_per_node = 1;  // of them per node
  int world_size() const { return dims.world_size(); }
};

// The data-parallel ranks of one TP slice as a world of their own: the world's degrees with tp 1, over
// dims.data_parallel_world_size() ranks.
ParallelDims data_parallel_dims(const ParallelDims& dims);
// One TP rank's model: every layer split by the dims' tp (tensor_parallel_shard; the kernels' tensor_parallel_degree
// is set there, from this tp). The model itself when tp is 1.
ModelSpec data_parallel_model(const ModelSpec& model, const ParallelDims& dims);

// The view of a plan already validated against model and world (validate_plan); dims = parallel_dims(plan, world).
DataParallelView data_parallel_view(const Plan& plan, const ModelSpec& model, const ParallelDims& dims,
                                    int gpus_per_node);

}  // namespace shardplan
