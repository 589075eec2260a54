// The collective sweep: message sizes × group layouts × collectives, each timed like nccl-tests times it.
#include "comm_sweep.h"

#include <algorithm>
#include <memory>
#include <set>
#include <string>

#include "errors.h"
#include "hybrid_groups.h"

namespace shardplan::bench {
namespace {

constexpr std::int64_t kElementBytes = sizeof(float);

// Does some group of `layout` hold ranks of two nodes?
bool layout_spans_nodes(int world_size, int ranks, bool strided, const std::vector<int>& node_of_rank) {
  if (node_of_rank.empty()) return false;
  const int groups = world_size / ranks;
  for (int group = 0; group < groups; ++group) {
    // Consecutive: ranks [g·n, (g+1)·n); strided: {g, g + groups, g + 2·groups, …} (make_replica_group's layout).
    const auto member = [&](int i) { return strided ? group + i * groups : group * ranks + i; };
    for (int i = 1; i < ranks; ++i) {
      if (node_of_rank.at(static_cast<std::size_t>(member(i))) != node_of_rank.at(static_cast<std::size_t>(member(0)))) {
        return true;
      }
    }
  }
  return false;
}

// Times one collective of S = `bytes` on `group`; the barrier and the max are over `world`, so all groups start
// together and the slowest group's time is the row's.
double time_collective_s(comm::Communicator& world, comm::Communicator& group, CollectiveKind kind,
                         std::int64_t bytes, const TimingOptions& timing, std::vector<float>& send,
                         std::vector<float>& recv) {
  const auto n = static_cast<std::size_t>(group.size());
  const auto elements = static_cast<std::size_t>(bytes / kElementBytes);
  std::function<void()> body;
  switch (kind) {
    case CollectiveKind::all_gather:  // S = the gathered output: n chunks of elements / n
      body = [&] { group.all_gather(send.data(), elements / n, recv.data()).wait(); };
      break;
    case CollectiveKind::reduce_scatter:  // S = the full input: each rank keeps elements / n
      body = [&] { group.reduce_scatter(send.data(), recv.data(), elements / n).wait(); };
      break;
    case CollectiveKind::all_reduce:  // S = the buffer
      body = [&] { group.all_reduce(recv.data(), elements).wait(); };
      break;
    case CollectiveKind::all_to_all:  // no Communicator has it yet (Note [Expert parallelism], planner/unit_layout.h)
      throw InputError("the communication sweep cannot time all_to_all: the communicators do not implement it");
  }
  return time_iterations_s(world, timing, body);
}

}  // namespace

void check_comm_sweep_options(const CommSweepOptions& options) {
  if (options.min_bytes < kElementBytes) {
    throw InputError("--min-bytes: expected at least 4 (one fp32 element), got " + std::to_string(options.min_bytes));
  }
  if (options.max_bytes < options.min_bytes) {
    throw InputError("--max-bytes: expected at least --min-bytes (" + std::to_string(options.min_bytes) + "), got " +
                     std::to_string(options.max_bytes));
  }
  if (options.max_bytes > (std::int64_t{1} << 34)) {
    throw InputError("--max-bytes: expected at most 16 GiB (17179869184), got " + std::to_string(options.max_bytes));
  }
  if (options.step_factor < 2) {
    throw InputError("--step-factor: expected an integer >= 2, got " + std::to_string(options.step_factor));
  }
  if (options.timing.iters < 1) {
    throw InputError("--iters: expected at least 1, got " + std::to_string(options.timing.iters));
  }
  if (options.timing.warmup_iters < 0) {
    throw InputError("--warmup-iters: expected 0 or more, got " + std::to_string(options.timing.warmup_iters));
  }
}

std::vector<std::int64_t> sweep_message_bytes(const CommSweepOptions& options) {
  std::vector<std::int64_t> sizes;
  for (std::int64_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= options.step_factor) {
    sizes.push_back(bytes);
  }
  return sizes;
}

std::vector<GroupLayout> sweep_group_layouts(int world_size, const std::vector<int>& node_of_rank) {
  SHARDPLAN_CHECK(node_of_rank.empty() || node_of_rank.size() == static_cast<std::size_t>(world_size),
                  "node map of " + std::to_string(node_of_rank.size()) + " ranks for a world of " +
                      std::to_string(world_size));
  std::vector<GroupLayout> layouts;
  if (world_size < 2) return layouts;
  std::vector<int> sizes;
  for (int ranks = 2; ranks < world_size; ++ranks) {
    if (world_size % ranks == 0) sizes.push_back(ranks);
  }
  sizes.push_back(world_size);
  for (int ranks : sizes) {
    const bool consecutive_spans = layout_spans_nodes(world_size, ranks, false, node_of_rank);
    layouts.push_back({ranks, false, consecutive_spans});
    if (ranks == world_size) continue;  // one group: both layouts are the world
    const bool strided_spans = layout_spans_nodes(world_size, ranks, true, node_of_rank);
    if (strided_spans != consecutive_spans) layouts.push_back({ranks, true, strided_spans});
  }
  return layouts;
}

std::int64_t rounded_message_bytes(CollectiveKind kind, std::int64_t bytes, int ranks) {
  if (kind == CollectiveKind::all_reduce) return std::max<std::int64_t>(1, bytes / kElementBytes) * kElementBytes;
  const std::int64_t per_rank = std::max<std::int64_t>(1, bytes / (kElementBytes * ranks));
  return per_rank * ranks * kElementBytes;
}

std::vector<CommRow> run_comm_sweep(comm::Communicator& world, const CommSweepOptions& options,
                                    const std::function<void(const CommRow&)>& on_row) {
  check_comm_sweep_options(options);
  std::vector<CommRow> rows;
  const std::vector<std::int64_t> sizes = sweep_message_bytes(options);
  for (const GroupLayout& layout : sweep_group_layouts(world.size(), options.node_of_rank)) {
    // Collective over the world, identical on every rank: each rank joins its own group of the layout.
    std::unique_ptr<comm::Communicator> split;
    if (layout.ranks < world.size()) {
      split = layout.strided ? comm::make_replica_group(world, world.size() / layout.ranks)
                             : comm::make_shard_group(world, layout.ranks);
    }
    comm::Communicator& group = split ? *split : world;
    // One pair of buffers for the largest message; ones, so sums stay finite and far from denormals.
    const std::int64_t largest = rounded_message_bytes(CollectiveKind::all_reduce, options.max_bytes, layout.ranks) +
                                 kElementBytes * layout.ranks;
    std::vector<float> send(static_cast<std::size_t>(largest / kElementBytes), 1.0f);
    std::vector<float> recv(send.size(), 1.0f);
    for (CollectiveKind kind : options.collectives) {
      std::set<std::int64_t> seen;  // small sizes can round to the same S for a large group
      for (std::int64_t target : sizes) {
        const std::int64_t bytes = rounded_message_bytes(kind, target, layout.ranks);
        if (!seen.insert(bytes).second) continue;
        CommRow row;
        row.collective = kind;
        row.group = layout;
        row.bytes = bytes;
        row.count = bytes / kElementBytes;
        row.time_s = time_collective_s(world, group, kind, bytes, options.timing, send, recv);
        // nccl-tests doc/PERFORMANCE.md: algbw = S / t; busbw = algbw × (n−1)/n (all-gather, reduce-scatter) or
        // × 2(n−1)/n (all-reduce) — the factors collective_cost.h's plug-ins own.
        row.algbw_bytes_per_s = algorithm_bandwidth(bytes, row.time_s);
        row.busbw_bytes_per_s = bus_bandwidth(kind, bytes, row.time_s, layout.ranks);
        rows.push_back(row);
        if (on_row) on_row(row);
      }
    }
  }
  return rows;
}

}  // namespace shardplan::bench
