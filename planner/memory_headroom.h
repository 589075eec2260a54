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
// The default, when --memory-headroom is not given: the memory error band's largest underestimate of the reserved
// peak, rounded up to the next whole percent (Note [Error bands] in costmodel/error_band.h) — the published runs like
// the one planned, grouped by GPU class and run kind, from benchmarks/published-runs/error_bands.py. Today the only
// rows that publish memory are torchtitan's (torch.cuda.max_memory_reserved, t01–t07 on H100, −2.1 % to +0.6 %), so
// every GPU gets 3 %: t07's 2.1 % rounded up; a plan predicted at 97 % of the cap is then measured at ≤ 99.1 %.
// The bands follow the rows as they are added.
//
// The plan search lowers its cap by the headroom and tests each simulated candidate's device peak against the rest;
// its wrap searches prune by a floor of the allocated peak, which is never above the device peak, so they stay exact
// under this test (search: "with a memory headroom the planned plan equals exhaustive search"). With --objective
// memory the least peak sought is still the allocated one: a setting whose least-allocated wrappings leave no headroom
// on the device peak yields no plan there, though a wrapping with a higher allocated but lower reserved peak might.
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
