// MemoryHeadroom: the share of a GPU's memory (or the --memory-cap) a plan leaves free, and the one "fits" test
// every command applies with it (Note [Memory headroom]).
#pragma once

#include <cstdint>
#include <string>

#include "simulator.h"

namespace shardplan {

// Note [Memory headroom]: a plan fits when what the device would hold at the step's peak — the caching allocator's
// reserved peak plus the runtime overhead outside it (SimulationSummary::device_peak_bytes, Note [Reserved memory]
// in simulator.cpp; never below the allocated peak) — stays within the cap less the headroom. The predicted reserved
// peak is off by up to the memory error measured against published runs, so a plan predicted to fill the device
// could run out of memory when run.
//
// The default, 3 % of the cap: benchmarks/published-runs/run_dev_set.py compares the predicted reserved peak with
// the torchtitan rows that publish torch.cuda.max_memory_reserved (t01–t07, 7 rows; printed at this commit as
// t01 -1.9%, t04 -1.0%, t02 -0.2%, t03 -0.5%, t05 +0.6%, t06 +0.2%, t07 -2.1%). The largest underestimate, 2.1 %
// (t07), rounded up to the next whole percent: a plan predicted at 97 % of the cap is then measured at ≤ 99.1 %.
// Update it from the same script when rows with published memory are added.
//
// The plan search lowers its cap by the headroom and tests each simulated candidate's device peak against the rest;
// its wrap searches prune by a floor of the allocated peak, which is never above the device peak, so they stay exact
// under this test (search: "with a memory headroom the planned plan equals exhaustive search"). With --objective
// memory the least peak sought is still the allocated one: a setting whose least-allocated wrappings leave no headroom
// on the device peak yields no plan there, though a wrapping with a higher allocated but lower reserved peak might.
inline constexpr double kDefaultMemoryHeadroomFraction = 0.03;

struct MemoryHeadroom {
  std::int64_t cap_bytes = 0;  // the device's memory or --memory-cap
  double fraction = 0;         // of cap_bytes kept free

  std::int64_t headroom_bytes() const;
  std::int64_t usable_bytes() const { return cap_bytes - headroom_bytes(); }
  // The fits test (Note [Memory headroom]).
  bool fits(const SimulationSummary& summary) const;
  // "3% headroom, 2.39 GiB"
  std::string describe() const;
};

// The fits test against a usable budget (the cap less the headroom): the device's peak (reserved + overhead) and the
// allocated peak both within it.
bool fits_in_memory(const SimulationSummary& summary, std::int64_t usable_bytes);

}  // namespace shardplan
