// Tests of the label DP's Pareto sets (Note [Pareto on arrival] in planner/wrap_label_dp.cpp): labels filtered as
// they arrive keep exactly what filtering them all at once in (cost, exact first, arrival) order keeps, in that
// order, whatever order they arrive in.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>

#include "wrap_label_dp.h"

using namespace shardplan;
using namespace shardplan::wrap_internal;

namespace {

// A label from small integers, so that ties and dominance are common. `tag` (in parent_label) names it.
Label small_label(std::mt19937& random, std::size_t tag) {
  std::uniform_int_distribution<int> small(0, 3);
  Label label;
  label.cost_s = small(random) + 0.5 * small(random);
  label.exact = small(random) < 2;
  // Two reduction streams, each free at 0 (idle) or later: the busy streams differ between labels too.
  label.state.stream_free_s[2] = small(random) < 2 ? 0.0 : small(random) + 1;
  label.state.stream_free_s[3] = small(random) < 3 ? 0.0 : small(random) + 1;
  label.busy = busy_streams(label.state);
  label.optimizer_elements = small(random) < 3 ? 100 : 101;
  label.persistent_bytes = 1000 + small(random) / 3;
  label.memory.assign(3, 0);
  for (std::size_t at = 0; at < label.memory.size(); ++at) label.memory[at] = small(random);
  label.parent_label = tag;
  return label;
}

// Note [Wrap DP]'s dominance, written out here for the reference (no communication busy intervals in these labels).
bool reference_dominates(const Label& better, const Label& label, bool with_floor) {
  if (better.busy != label.busy || better.optimizer_elements > label.optimizer_elements) return false;
  for (std::size_t stream = 0; stream < better.state.stream_free_s.size(); ++stream) {
    if (better.state.stream_free_s[stream] > label.state.stream_free_s[stream]) return false;
  }
  if (!with_floor) return true;
  if (better.persistent_bytes > label.persistent_bytes) return false;
  for (std::size_t at = 0; at < label.memory.size(); ++at) {
    if (better.memory[at] > label.memory[at]) return false;
  }
  return true;
}

// All at once: in (cost, exact first, arrival) order, a label survives unless a survivor before it dominates it.
std::vector<std::size_t> reference_survivors(const std::vector<Label>& arrived, bool with_floor) {
  std::vector<std::size_t> order(arrived.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (arrived[a].cost_s != arrived[b].cost_s) return arrived[a].cost_s < arrived[b].cost_s;
    return arrived[a].exact && !arrived[b].exact;
  });
  std::vector<std::size_t> survivors;
  for (std::size_t index : order) {
    const bool dominated = std::any_of(survivors.begin(), survivors.end(), [&](std::size_t survivor) {
      return reference_dominates(arrived[survivor], arrived[index], with_floor);
    });
    if (!dominated) survivors.push_back(index);
  }
  std::vector<std::size_t> tags;
  for (std::size_t index : survivors) tags.push_back(arrived[index].parent_label);
  return tags;
}

}  // namespace

TEST_CASE("Pareto on arrival: a set keeps what filtering all labels at once keeps, in the same order") {
  std::mt19937 random(37);
  std::size_t kept_total = 0, arrived_total = 0, ties = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const bool with_floor = trial % 2 == 0;
    std::vector<Label> arrived;
    const std::size_t count = 1 + trial % 60;
    for (std::size_t tag = 0; tag < count; ++tag) arrived.push_back(small_label(random, tag));
    std::shuffle(arrived.begin(), arrived.end(), random);  // the order they arrive in
    const std::vector<std::size_t> expected = reference_survivors(arrived, with_floor);
    ParetoSet set(with_floor);
    for (const Label& label : arrived) set.add(Label(label));
    std::vector<std::size_t> kept;
    for (const Label& label : set.sorted()) kept.push_back(label.parent_label);
    REQUIRE(kept == expected);
    CHECK_FALSE(set.overflowed());
    kept_total += kept.size();
    arrived_total += count;
    for (std::size_t i = 1; i < arrived.size(); ++i) ties += arrived[i].cost_s == arrived[i - 1].cost_s;
  }
  // Not vacuous: a third of the labels and more are dropped, and equal costs (where exactness and arrival decide)
  // are common.
  CHECK(kept_total * 3 < arrived_total * 2);
  CHECK(kept_total > 2000);
  CHECK(ties > 1000);
}

TEST_CASE("Pareto on arrival: past kMaxMembersWhileAdding members at once a set counts as overflowing") {
  // Labels none of which dominates another: each costs more and frees a stream sooner than the one before.
  ParetoSet set(false);
  for (std::size_t tag = 0; tag <= kMaxMembersWhileAdding; ++tag) {
    Label label;
    label.cost_s = static_cast<double>(tag);
    label.state.stream_free_s[2] = static_cast<double>(kMaxMembersWhileAdding + 1 - tag);
    label.busy = busy_streams(label.state);
    label.parent_label = tag;
    CHECK_FALSE(set.overflowed());
    set.add(std::move(label));
  }
  CHECK(set.overflowed());
}
