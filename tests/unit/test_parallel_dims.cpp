// Tests of ParallelDims: torchtitan's mesh coordinates and groups, validation errors, EP groups, and plans' degrees.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "errors.h"
#include "lowering.h"
#include "model_presets.h"
#include "parallel_dims.h"
#include "plan.h"
#include "plan_json.h"
#include "tensor_parallel_view.h"

using namespace shardplan;

namespace {

ParallelDegrees all_two(int ep = 1) {
  ParallelDegrees degrees;
  degrees.dp_replicate = 2;
  degrees.dp_shard = 2;
  degrees.cp = 2;
  degrees.tp = 2;
  degrees.pp = 2;
  degrees.ep = ep;
  return degrees;
}

std::string error_of(const ParallelDegrees& degrees, int world) {
  try {
    (void)ParallelDims(degrees, world);
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

}  // namespace

TEST_CASE("parallel dims: a 2x2x2x2x2 world is torchtitan's mesh [pp, dp_replicate, dp_shard, cp, tp], tp fastest") {
  // init_device_mesh(device_type, [2, 2, 2, 2, 2], mesh_dim_names=["pp", "dp_replicate", "dp_shard", "cp", "tp"])
  // (torchtitan/distributed/parallel_dims.py, _build_mesh_without_ep) lays the 32 ranks out row-major: rank =
  // 16 pp + 8 dp_replicate + 4 dp_shard + 2 cp + tp. Enumerated by hand for every rank, the bits of the rank.
  const ParallelDims dims(all_two(), 32);
  CHECK(dims.dp_shard() == 2);
  CHECK(dims.fsdp_shard_size() == 4);
  CHECK(dims.data_parallel_world_size() == 8);
  for (int rank = 0; rank < 32; ++rank) {
    const MeshCoordinates expected{(rank >> 4) & 1, (rank >> 3) & 1, (rank >> 2) & 1, (rank >> 1) & 1, rank & 1};
    const RankPlacement placement = dims.placement(rank);
    CHECK(placement.coordinates == expected);
    CHECK(dims.rank_at(expected) == rank);
    CHECK(placement.slice == RankSlice{expected.tp, expected.pp});
  }
  // Rank 13 = 0b01101: pp 0, dp_replicate 1, dp_shard 1, cp 0, tp 1.
  const RankPlacement r13 = dims.placement(13);
  CHECK(r13.coordinates == MeshCoordinates{0, 1, 1, 0, 1});
  CHECK(r13.groups.fsdp_shard == std::vector<int>{9, 11, 13, 15});  // dp_shard x cp ("dp_shard_cp")
  CHECK(r13.groups.dp_replicate == std::vector<int>{5, 13});
  CHECK(r13.groups.tp == std::vector<int>{12, 13});
  CHECK(r13.groups.cp == std::vector<int>{13, 15});  // the CP ring: cp next out from tp
  CHECK(r13.groups.pp == std::vector<int>{13, 29});
  CHECK(r13.groups.data_parallel == std::vector<int>{1, 3, 5, 7, 9, 11, 13, 15});  // "dp_cp"
  CHECK(r13.groups.ep == std::vector<int>{13});  // no EP: the rank alone
  CHECK(r13.data_parallel_rank == 6);  // dp_replicate 1, dp_shard 1, cp 0 of 2 x 2 x 2
  // Rank 22 = 0b10110: pp 1, dp_replicate 0, dp_shard 1, cp 1, tp 0.
  const RankPlacement r22 = dims.placement(22);
  CHECK(r22.groups.fsdp_shard == std::vector<int>{16, 18, 20, 22});
  CHECK(r22.groups.dp_replicate == std::vector<int>{22, 30});
  CHECK(r22.groups.tp == std::vector<int>{22, 23});
  CHECK(r22.groups.cp == std::vector<int>{20, 22});
  CHECK(r22.groups.pp == std::vector<int>{6, 22});
  CHECK(r22.slice == RankSlice{0, 1});
  // Every group of every rank holds the rank, and all ranks of a group agree on it.
  for (int rank = 0; rank < 32; ++rank) {
    const RankGroups groups = dims.placement(rank).groups;
    for (const std::vector<int>* group : {&groups.fsdp_shard, &groups.dp_replicate, &groups.tp, &groups.cp,
                                          &groups.pp, &groups.data_parallel}) {
      for (int member : *group) {
        const RankGroups other = dims.placement(member).groups;
        CHECK((group == &groups.fsdp_shard ? other.fsdp_shard
               : group == &groups.dp_replicate ? other.dp_replicate
               : group == &groups.tp ? other.tp
               : group == &groups.cp ? other.cp
               : group == &groups.pp ? other.pp
                                     : other.data_parallel) == *group);
      }
    }
  }
}

TEST_CASE("parallel dims: ep groups are carved out of dp_shard x cp (torchtitan, ETP = TP)") {
  // ep 4 = dp_shard_in_ep 2 x cp 2: the whole FSDP shard group.
  const ParallelDims four(all_two(4), 32);
  CHECK(four.placement(13).groups.ep == std::vector<int>{9, 11, 13, 15});
  // ep 2 = dp_shard_in_ep 1 x cp 2: the cp ranks of one dp_shard index.
  const ParallelDims two(all_two(2), 32);
  CHECK(two.placement(13).groups.ep == std::vector<int>{13, 15});
  CHECK(two.placement(9).groups.ep == std::vector<int>{9, 11});
  // Without cp and tp, as shardplan's plans use it: groups of ep consecutive ranks (Note [Expert parallelism]).
  ParallelDegrees flat;
  flat.ep = 4;
  const ParallelDims consecutive(flat, 16);
  CHECK(consecutive.placement(6).groups.ep == std::vector<int>{4, 5, 6, 7});
  CHECK(consecutive.placement(6).groups.fsdp_shard.size() == 16);
  // dp_shard 4 split as dp_shard_mod_ep 2 (outer) x dp_shard_in_ep 2 with cp 1.
  ParallelDegrees shard_four;
  shard_four.dp_shard = 4;
  shard_four.tp = 2;
  shard_four.ep = 2;
  const ParallelDims with_tp(shard_four, 8);
  CHECK(with_tp.placement(5).groups.ep == std::vector<int>{5, 7});  // rank 5 = dp_shard 2, tp 1: dp_shard 2 and 3
  CHECK(with_tp.placement(1).groups.ep == std::vector<int>{1, 3});
}

TEST_CASE("parallel dims: validation names the degree and what was expected") {
  ParallelDegrees degrees;
  CHECK(error_of(degrees, 0) == "parallel dims: world size 0: expected at least one rank");
  degrees.tp = 0;
  CHECK(error_of(degrees, 8) == "parallel dims: tp 0: expected a degree >= 1");
  degrees = {};
  degrees.dp_shard = 0;
  CHECK(error_of(degrees, 8) == "parallel dims: dp_shard 0: expected -1 (the rest of the world) or a degree >= 1");
  degrees = {};
  degrees.tp = 3;
  CHECK(error_of(degrees, 8) == "parallel dims: dp_replicate 1 x cp 1 x tp 3 x pp 1 = 3: expected a divisor of the "
                                "world size 8 (dp_shard takes the rest)");
  degrees = all_two();
  CHECK(error_of(degrees, 64) == "parallel dims: dp_replicate 2 x dp_shard 2 x cp 2 x tp 2 x pp 2 = 32: expected "
                                 "the world size 64");
  degrees = all_two(3);
  CHECK(error_of(degrees, 32) == "parallel dims: ep 3: expected a multiple of cp 2 that divides dp_shard x cp = 4 "
                                 "(expert parallelism borrows the data-parallel ranks)");
  degrees = all_two(8);
  CHECK(error_of(degrees, 32).find("ep 8: expected a multiple of cp 2 that divides dp_shard x cp = 4") !=
        std::string::npos);
  CHECK_NOTHROW((void)ParallelDims(all_two(4), 32));
  CHECK_THROWS_WITH_AS((void)ParallelDims(all_two(), 32).placement(32), doctest::Contains("rank 32"), InputError);
  CHECK(ParallelDims() == ParallelDims(ParallelDegrees{}, 1));
}

TEST_CASE("parallel dims: a plan's degrees, its data-parallel view and the Plan JSON round trip") {
  const ModelSpec model = preset_model("llama3-8b");
  TrainingConfig training;
  training.seq_len = 1024;
  Plan plan = default_plan(model, training, {}, wrap_per_block(model), 16);
  plan.tensor_parallel_degree = 4;
  const ParallelDims dims = parallel_dims(plan, 16);
  CHECK(dims.tp() == 4);
  CHECK(dims.dp_shard() == 4);
  CHECK(dims.ep() == 1);
  // The JSON writes the fields it wrote before and reads them back into the same ParallelDims.
  const nlohmann::json document = to_json(plan, model);
  CHECK(document.at("tensor_parallel_degree") == 4);
  CHECK_FALSE(document.contains("parallel_dims"));
  CHECK(parallel_dims(plan_from_json(document, "p.json", model), 16) == dims);
  // The view: the data-parallel ranks of one TP slice as their own world.
  const DataParallelView view = data_parallel_view(plan, model, dims, 8);
  CHECK(view.dims == ParallelDims(ParallelDegrees{1, 4, 1, 1, 1, 1}, 4));
  CHECK(view.gpus_per_node == 2);
  CHECK(view.plan.tensor_parallel_degree == 1);
  // Rank 6 (node 0): TP rank 2 of data-parallel rank 1, whose TP group is ranks 4..7.
  const RankPlacement six = dims.placement(6);
  CHECK(six.slice.tp_rank == 2);
  CHECK(six.data_parallel_rank == 1);
  CHECK(six.groups.tp == std::vector<int>{4, 5, 6, 7});
  CHECK(six.groups.data_parallel == std::vector<int>{2, 6, 10, 14});
  // The schedule carries the world's dims.
  const StepSchedule schedule = lower_plan(plan, model, {16, 8, 0});
  CHECK(schedule.parallel == dims);
  CHECK(schedule.world_size == dims.data_parallel_world_size());
  // A degree that does not fit the world is the plan's InputError.
  plan.tensor_parallel_degree = 3;
  CHECK_THROWS_WITH_AS(parallel_dims(plan, 16), doctest::Contains("plan: dp_replicate 1 x cp 1 x tp 3"), InputError);
}
