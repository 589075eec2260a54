// ParallelDims: the degrees of every parallel dimension of a world (torchtitan's), validated once, and one rank's place.
#pragma once

#include <string>
#include <vector>

namespace shardplan {

// Note [ParallelDims]: one immutable value says how a world of ranks is split, with torchtitan's names and meaning
// (torchtitan/distributed/parallel_dims.py, class ParallelDims):
//   dp_replicate × dp_shard × cp × tp × pp = world_size
// dp_replicate: HSDP's replicas (all-reduce across them); dp_shard: FSDP's shard ranks; cp: context parallel;
// tp: tensor parallel; pp: pipeline stages. FSDP shards parameters over dp_shard × cp ("dp_shard_cp": context-
// parallel ranks hold the same parameters, so FSDP shards over them too). ep (expert parallel) is not a factor of
// the world: it is carved out of the dp_shard × cp ranks for the routed experts, as torchtitan does with ETP = TP
// ("EP would borrow all cp and some dp_shard degree": ep % cp == 0 and dp_shard × cp % ep == 0), so the expert
// tensors are split by TP like the dense ones.
//
// The ranks form torchtitan's mesh in its dim order [pp, dp_replicate, dp_shard, cp, tp] (_build_mesh_without_ep in
// torchtitan/distributed/parallel_dims.py; init_device_mesh lays ranks out row-major, so tp varies fastest and one
// TP group is tp consecutive ranks, inside a node). With ep > 1, dp_shard is split into [dp_shard_mod_ep,
// dp_shard_in_ep] (_build_mesh_with_ep) and an EP group is the dp_shard_in_ep × cp ranks of one dp_shard_mod_ep.
//
// Everything that needs a rank's view asks ParallelDims::placement(rank): its coordinates, the world ranks of each of
// its process groups, and its slice of the model (TP rank, pipeline stage). The user's choice of degrees is a
// ParallelDegrees (torchtitan's [parallelism] config, torchtitan/config/job_config.py class Parallelism, where
// data_parallel_shard_degree = -1 means "the rest of the world"); a ParallelDims exists only for a world, the way
// torchtitan builds ParallelDims(world_size=...) from the config at start-up. A plan is made without knowing which
// world will read it back (its JSON names no world), so plans carry degrees and parallel_dims(plan, world)
// (planner/plan.h) turns them into this value.
struct ParallelDegrees {
  int dp_replicate = 1;
  int dp_shard = -1;  // -1: world / (dp_replicate × cp × tp × pp), torchtitan's default
  int cp = 1;
  int tp = 1;
  int pp = 1;
  int ep = 1;
};

// A rank's index along each mesh dimension, in torchtitan's mesh order (Note [ParallelDims]).
struct MeshCoordinates {
  int pp = 0;
  int dp_replicate = 0;
  int dp_shard = 0;
  int cp = 0;
  int tp = 0;
  bool operator==(const MeshCoordinates&) const = default;
};

// The world ranks of each process group a rank belongs to, ascending; every list holds the rank itself. A rank's
// index inside a group is its position in the list (the order torch's DeviceMesh gives the group's ranks).
struct RankGroups {
  std::vector<int> fsdp_shard;    // dp_shard × cp: FSDP's all-gather / reduce-scatter ("dp_shard_cp")
  std::vector<int> dp_replicate;  // HSDP's all-reduce across replicas
  std::vector<int> tp;            // tensor parallel
  std::vector<int> cp;            // context parallel: the ring of one sequence's shares
  std::vector<int> ep;            // expert parallel: dp_shard_in_ep × cp (Note [ParallelDims])
  std::vector<int> pp;            // one rank of every pipeline stage
  // dp_replicate × dp_shard × cp: the ranks of one TP slice and stage (torchtitan's "dp_cp", the loss all-reduce),
  // the world of the data-parallel view (planner/tensor_parallel_view.h)
  std::vector<int> data_parallel;
  bool operator==(const RankGroups&) const = default;
};

// The part of the model a rank holds: its TP shard and its pipeline stage.
struct RankSlice {
  int tp_rank = 0;
  int pp_stage = 0;
  bool operator==(const RankSlice&) const = default;
};

struct RankPlacement {
  int rank = 0;
  MeshCoordinates coordinates;
  RankGroups groups;
  RankSlice slice;
  // Its index in groups.data_parallel: its rank in the data-parallel view, which micro-batches it takes.
  int data_parallel_rank = 0;
};

class ParallelDims {
 public:
  ParallelDims() = default;  // one rank, nothing parallel
  // InputError, prefixed by `where`, naming the degree and what was expected: a degree below 1 (dp_shard: -1 or
  // >= 1), a product that is not the world size, an ep that is not carved out of dp_shard × cp.
  ParallelDims(const ParallelDegrees& degrees, int world_size, const std::string& where = "parallel dims");

  int world_size() const { return world_size_; }
  int dp_replicate() const { return dp_replicate_; }
  int dp_shard() const { return dp_shard_; }
  int cp() const { return cp_; }
  int tp() const { return tp_; }
  int pp() const { return pp_; }
  int ep() const { return ep_; }
  // FSDP's shard group size (torchtitan's "dp_shard_cp").
  int fsdp_shard_size() const { return dp_shard_ * cp_; }
  // The ranks that run FSDP over one TP slice of one stage: dp_replicate × dp_shard × cp = world / (tp × pp).
  int data_parallel_world_size() const { return dp_replicate_ * dp_shard_ * cp_; }
  // Of one node's GPUs, how many are ranks of one data-parallel group: TP is the innermost mesh dim, so a node holds
  // whole TP groups (planner/plan.h Note [Tensor parallel degree] requires tp to divide the node) and one rank of
  // each per data-parallel index; the cp ranks, next out, are data-parallel ranks of their own (a CP group of
  // consecutive ones). pp is 1 wherever this is used (a pipeline plan's stages are placed by lower_pipeline).
  int data_parallel_gpus_per_node(int gpus_per_node) const { return gpus_per_node / tp_; }
  ParallelDegrees degrees() const { return {dp_replicate_, dp_shard_, cp_, tp_, pp_, ep_}; }

  // THE function giving a rank's view (Note [ParallelDims]). InputError when rank is outside [0, world_size).
  RankPlacement placement(int rank) const;
  // The rank at these coordinates (the inverse of placement(rank).coordinates).
  int rank_at(const MeshCoordinates& coordinates) const;

  bool operator==(const ParallelDims&) const = default;

 private:
  int world_size_ = 1;
  int dp_replicate_ = 1;
  int dp_shard_ = 1;
  int cp_ = 1;
  int tp_ = 1;
  int pp_ = 1;
  int ep_ = 1;
};

// "dp_replicate 1 x dp_shard 4 x cp 1 x tp 2 x pp 1 = 8, ep 2": for messages.
std::string to_string(const ParallelDims& dims);

}  // namespace shardplan
