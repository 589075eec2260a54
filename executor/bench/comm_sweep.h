// The collective sweep of `calibrate --bench`: all-gather, reduce-scatter and all-reduce over message sizes and over
// the group sizes hybrid plans use, timed through the executor's Communicator and reported as nccl-tests reports them.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "bench_timer.h"
#include "collective_cost.h"
#include "communicator.h"

namespace shardplan::bench {

struct CommSweepOptions {
  std::int64_t min_bytes = 1 << 10;   // S of the first size (nccl-tests -b)
  std::int64_t max_bytes = 16 << 20;  // S of the last size (nccl-tests -e)
  int step_factor = 2;                // each size is the previous one × this (nccl-tests -f)
  TimingOptions timing;
  std::vector<CollectiveKind> collectives = {CollectiveKind::all_gather, CollectiveKind::reduce_scatter,
                                             CollectiveKind::all_reduce};
  std::vector<int> node_of_rank;  // world rank → node index (machine_probe.h); empty: every rank on one node
};

// InputError naming the flag (--min-bytes, --max-bytes, --step-factor, --iters, --warmup-iters) when out of range.
void check_comm_sweep_options(const CommSweepOptions& options);

// The message sizes S before rounding: min_bytes, min_bytes·f, … up to max_bytes.
std::vector<std::int64_t> sweep_message_bytes(const CommSweepOptions& options);

// A set of equal groups covering the world: `ranks` consecutive ranks each (HSDP shard groups, hybrid_groups.h), or
// every (world/ranks)-th rank (HSDP replica groups). spans_nodes: some group has ranks on two nodes.
struct GroupLayout {
  int ranks = 1;
  bool strided = false;
  bool spans_nodes = false;
};
// The world, then every proper divisor ≥ 2 of the world size (the shard-group sizes a hybrid plan can use) in
// increasing order; strided groups of a size are added only when their tier differs from the consecutive ones (on
// one node they are the same links). Empty for a world of one rank.
std::vector<GroupLayout> sweep_group_layouts(int world_size, const std::vector<int>& node_of_rank);

// One line of the table, nccl-tests' columns.
struct CommRow {
  CollectiveKind collective = CollectiveKind::all_gather;
  GroupLayout group;
  std::int64_t bytes = 0;  // S, nccl-tests' convention (collective_cost.h), after rounding to whole elements per rank
  std::int64_t count = 0;  // S in elements (fp32), as nccl-tests prints "count"
  double time_s = 0;       // per iteration, slowest rank
  double algbw_bytes_per_s = 0;
  double busbw_bytes_per_s = 0;
};

// S rounded down to whole fp32 elements, and for all-gather / reduce-scatter to a multiple of the group size (each
// rank's chunk is S / n); at least one element per rank.
std::int64_t rounded_message_bytes(CollectiveKind kind, std::int64_t bytes, int ranks);

// Runs the sweep (collective over `world`; every rank gets every row). All groups of a layout run at once, as the
// shard groups of an HSDP step do. `on_row` sees each row as it is measured (to print progress).
std::vector<CommRow> run_comm_sweep(comm::Communicator& world, const CommSweepOptions& options,
                                    const std::function<void(const CommRow&)>& on_row = {});

}  // namespace shardplan::bench
