// Tests of the wrap searches' micro-batch classes (Note [Memory classes] in planner/wrap_micro_classes.h): equal
// memory figures share a class, any differing figure splits it, the last micro-batch is always alone, and the classes
// a real search context finds merge the middle micro-batches of a step.
#include <doctest/doctest.h>

#include "wrap_cases.h"
#include "wrap_context.h"
#include "wrap_micro_classes.h"

using namespace shardplan;
using namespace shardplan::testing;
using namespace shardplan::wrap_internal;

namespace {

// One unit's figures for `micros` micro-batches, all alike.
EdgeFragments alike_edge(std::size_t micros) {
  EdgeFragments edge;
  Fragment fragment;
  fragment.certain_peak_bytes = 1000;
  FragmentTiming timing;
  timing.peak_bytes = 1200;
  for (auto* fragments : {&edge.start, &edge.head, &edge.last_forward, &edge.turn, &edge.close}) {
    fragments->assign(micros, fragment);
  }
  for (auto* timings : {&edge.start_idle, &edge.head_idle, &edge.last_forward_idle, &edge.turn_idle, &edge.close_idle}) {
    timings->assign(micros, timing);
  }
  edge.before.assign(micros, 10);
  edge.span.assign(micros, 20);
  edge.after.assign(micros, 30);
  return edge;
}

PairFragments alike_pair(std::size_t micros) {
  PairFragments pair;
  PairFragments::Micro each;
  each.forward_left_certain = 500;
  each.backward_right_certain = 700;
  each.forward_left_idle.peak_bytes = 600;
  each.backward_right_idle.peak_bytes = 800;
  for (std::size_t at = 0; at < micros; ++at) pair.micro.push_back(each);
  return pair;
}

std::vector<std::size_t> class_of(const MicroClasses& classes) { return classes.class_of; }

}  // namespace

TEST_CASE("wrap micro classes: equal figures share a class, a differing figure splits it, the last is alone") {
  constexpr std::size_t kMicros = 5;
  EdgeFragments edge = alike_edge(kMicros);
  PairFragments pair = alike_pair(kMicros);
  SUBCASE("all alike: one class before the last") {
    const MicroClasses classes = memory_classes(kMicros, {&edge}, {&pair});
    CHECK(class_of(classes) == std::vector<std::size_t>{0, 0, 0, 0, 1});
    CHECK(classes.first_micro == std::vector<int>{0, 4});
    CHECK(classes.represents(0));
    CHECK_FALSE(classes.represents(2));
    CHECK(classes.represents(4));
  }
  SUBCASE("the first micro-batch's gradient buffers: its own class") {
    edge.span[0] = 99;
    CHECK(class_of(memory_classes(kMicros, {&edge}, {&pair})) == std::vector<std::size_t>{0, 1, 1, 1, 2});
  }
  SUBCASE("a pair figure differing in the middle: that micro-batch alone, the ones around it together") {
    pair.micro[2].backward_right_idle.early_streams = 1;
    CHECK(class_of(memory_classes(kMicros, {&edge}, {&pair})) == std::vector<std::size_t>{0, 0, 1, 0, 2});
  }
  SUBCASE("exactness is a figure too") {
    edge.turn_idle[3].exact = false;
    CHECK(class_of(memory_classes(kMicros, {&edge}, {&pair})) == std::vector<std::size_t>{0, 0, 0, 1, 2});
  }
  SUBCASE("one micro-batch: one class") {
    EdgeFragments one = alike_edge(1);
    CHECK(memory_classes(1, {&one}, {}).count() == 1);
  }
}

TEST_CASE("wrap micro classes: a search context merges the middle micro-batches of an accumulating step") {
  // The wrap cases' gradient accumulation (Note [Memory classes]): the first micro-batch (it allocates the gradient
  // buffers) and the last are classes of their own, so four micro-batches keep three terms; the floors and times these
  // give are the per-micro-batch ones (test_wrap_fragments, test_wrap_dp run on these cases).
  int accumulating = 0, merged = 0;
  for (const WrapCase& c : wrap_cases()) {
    if (c.micro_batches < 3) continue;
    INFO(c.name());
    ++accumulating;
    const WrapSetup setup = wrap_setup(c);
    WrapFragments fragments(setup.model, setup.base, setup.profile, setup.cluster.world_size(),
                            setup.cluster.gpus_per_node);
    const WrapContext context(fragments, 4, 0, true);
    const MicroClasses& classes = context.memory_classes();
    REQUIRE(classes.class_of.size() == static_cast<std::size_t>(c.micro_batches));
    if (c.micro_batches >= 4) {
      CHECK(classes.count() < static_cast<std::size_t>(c.micro_batches));
      ++merged;
    }
    CHECK(classes.class_of.back() == classes.count() - 1);  // the last micro-batch alone
    CHECK(std::count(classes.class_of.begin(), classes.class_of.end(), classes.count() - 1) == 1);
  }
  CHECK(accumulating >= 2);
  CHECK(merged >= 1);
}
