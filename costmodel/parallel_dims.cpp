// ParallelDims: validation of the degrees against the world, and a rank's coordinates, groups and slice.
#include "parallel_dims.h"

#include <array>
#include <cstdint>

#include "errors.h"

namespace shardplan {
namespace {

void require_degree(const std::string& where, const char* name, int degree) {
  if (degree < 1) {
    throw InputError(where + ": " + name + " " + std::to_string(degree) + ": expected a degree >= 1");
  }
}

// The mesh shape in torchtitan's dim order [pp, dp_replicate, dp_shard, cp, tp] (Note [ParallelDims]).
enum MeshDim { kPp = 0, kDpReplicate, kDpShard, kCp, kTp, kMeshDims };
using MeshIndex = std::array<int, kMeshDims>;

MeshIndex to_index(const MeshCoordinates& c) { return {c.pp, c.dp_replicate, c.dp_shard, c.cp, c.tp}; }
MeshCoordinates to_coordinates(const MeshIndex& i) {
  return {i[kPp], i[kDpReplicate], i[kDpShard], i[kCp], i[kTp]};
}

}  // namespace

ParallelDims::ParallelDims(const ParallelDegrees& degrees, int world_size, const std::string& where) {
  if (world_size < 1) {
    throw InputError(where + ": world size " + std::to_string(world_size) + ": expected at least one rank");
  }
  require_degree(where, "dp_replicate", degrees.dp_replicate);
  require_degree(where, "cp", degrees.cp);
  require_degree(where, "tp", degrees.tp);
  require_degree(where, "pp", degrees.pp);
  require_degree(where, "ep", degrees.ep);
  if (degrees.dp_shard != -1 && degrees.dp_shard < 1) {
    throw InputError(where + ": dp_shard " + std::to_string(degrees.dp_shard) +
                     ": expected -1 (the rest of the world) or a degree >= 1");
  }
  // 64-bit products: each degree may be up to the world size.
  const std::int64_t others = static_cast<std::int64_t>(degrees.dp_replicate) * degrees.cp * degrees.tp * degrees.pp;
  int dp_shard = degrees.dp_shard;
  if (dp_shard == -1) {  // torchtitan: dp_shard = world_size // (dp_replicate * cp * tp * pp)
    if (others > world_size || world_size % others != 0) {
      throw InputError(where + ": dp_replicate " + std::to_string(degrees.dp_replicate) + " x cp " +
                       std::to_string(degrees.cp) + " x tp " + std::to_string(degrees.tp) + " x pp " +
                       std::to_string(degrees.pp) + " = " + std::to_string(others) +
                       ": expected a divisor of the world size " + std::to_string(world_size) +
                       " (dp_shard takes the rest)");
    }
    dp_shard = static_cast<int>(world_size / others);
  }
  if (others * dp_shard != world_size) {  // torchtitan's "Invalid parallel dims ... != WORLD_SIZE"
    throw InputError(where + ": dp_replicate " + std::to_string(degrees.dp_replicate) + " x dp_shard " +
                     std::to_string(dp_shard) + " x cp " + std::to_string(degrees.cp) + " x tp " +
                     std::to_string(degrees.tp) + " x pp " + std::to_string(degrees.pp) + " = " +
                     std::to_string(others * dp_shard) + ": expected the world size " + std::to_string(world_size));
  }
  // torchtitan with ETP = TP: "EP would borrow all cp and some dp_shard degree".
  const std::int64_t shard_cp = static_cast<std::int64_t>(dp_shard) * degrees.cp;
  if (degrees.ep > 1 && (degrees.ep % degrees.cp != 0 || shard_cp % degrees.ep != 0)) {
    throw InputError(where + ": ep " + std::to_string(degrees.ep) + ": expected a multiple of cp " +
                     std::to_string(degrees.cp) + " that divides dp_shard x cp = " + std::to_string(shard_cp) +
                     " (expert parallelism borrows the data-parallel ranks)");
  }
  world_size_ = world_size;
  dp_replicate_ = degrees.dp_replicate;
  dp_shard_ = dp_shard;
  cp_ = degrees.cp;
  tp_ = degrees.tp;
  pp_ = degrees.pp;
  ep_ = degrees.ep;
}

int ParallelDims::rank_at(const MeshCoordinates& coordinates) const {
  const MeshIndex index = to_index(coordinates);
  const MeshIndex shape{pp_, dp_replicate_, dp_shard_, cp_, tp_};
  int rank = 0;
  for (int dim = 0; dim < kMeshDims; ++dim) {  // row-major, tp fastest (init_device_mesh's layout)
    SHARDPLAN_CHECK(index[dim] >= 0 && index[dim] < shape[dim], "mesh coordinate out of range");
    rank = rank * shape[dim] + index[dim];
  }
  return rank;
}

RankPlacement ParallelDims::placement(int rank) const {
  if (rank < 0 || rank >= world_size_) {
    throw InputError("rank " + std::to_string(rank) + ": expected a rank in [0, " + std::to_string(world_size_) +
                     ") of " + to_string(*this));
  }
  const MeshIndex shape{pp_, dp_replicate_, dp_shard_, cp_, tp_};
  MeshIndex index{};
  int rest = rank;
  for (int dim = kMeshDims - 1; dim >= 0; --dim) {
    index[dim] = rest % shape[dim];
    rest /= shape[dim];
  }
  RankPlacement placement;
  placement.rank = rank;
  placement.coordinates = to_coordinates(index);
  placement.slice = {index[kTp], index[kPp]};

  // The ranks that share every coordinate but those of `varying` (each over [begin, end)), in ascending order.
  const auto group = [&](std::array<std::pair<int, int>, kMeshDims> range) {
    std::vector<int> ranks;
    MeshIndex at{};
    const auto walk = [&](const auto& self, int dim) -> void {
      if (dim == kMeshDims) {
        ranks.push_back(rank_at(to_coordinates(at)));
        return;
      }
      for (int i = range[dim].first; i < range[dim].second; ++i) {
        at[dim] = i;
        self(self, dim + 1);
      }
    };
    walk(walk, 0);
    return ranks;
  };
  const auto fixed_except = [&](std::initializer_list<int> varying) {
    std::array<std::pair<int, int>, kMeshDims> range;
    for (int dim = 0; dim < kMeshDims; ++dim) range[dim] = {index[dim], index[dim] + 1};
    for (int dim : varying) range[dim] = {0, shape[dim]};
    return range;
  };
  placement.groups.fsdp_shard = group(fixed_except({kDpShard, kCp}));
  placement.groups.dp_replicate = group(fixed_except({kDpReplicate}));
  placement.groups.tp = group(fixed_except({kTp}));
  placement.groups.cp = group(fixed_except({kCp}));
  placement.groups.pp = group(fixed_except({kPp}));
  placement.groups.data_parallel = group(fixed_except({kDpReplicate, kDpShard, kCp}));
  placement.data_parallel_rank = (index[kDpReplicate] * dp_shard_ + index[kDpShard]) * cp_ + index[kCp];
  // EP: dp_shard = dp_shard_mod_ep × dp_shard_in_ep (the outer factor first, _build_mesh_with_ep), ep = in × cp.
  // Without EP (ep 1) the experts are not split: the group is the rank alone.
  if (ep_ == 1) {
    placement.groups.ep = {rank};
  } else {
    const int in_ep = ep_ / cp_;
    auto ep_range = fixed_except({kCp});
    const int first_shard = index[kDpShard] / in_ep * in_ep;
    ep_range[kDpShard] = {first_shard, first_shard + in_ep};
    placement.groups.ep = group(ep_range);
  }
  return placement;
}

std::string to_string(const ParallelDims& dims) {
  return "dp_replicate " + std::to_string(dims.dp_replicate()) + " x dp_shard " + std::to_string(dims.dp_shard()) +
         " x cp " + std::to_string(dims.cp()) + " x tp " + std::to_string(dims.tp()) + " x pp " +
         std::to_string(dims.pp()) + " = " + std::to_string(dims.world_size()) + ", ep " + std::to_string(dims.ep());
}

}  // namespace shardplan
