// The `capacity --report` page: days vs cost per GPU type with the Pareto front, throughput vs GPU count, and what
// limits each point (GPU memory, host memory, communication, compute).
#pragma once

#include <string>

#include "capacity.h"

namespace shardplan {

// `title_detail`: "llama3-70b, 1e+12 tokens". Self-contained HTML + SVG.
std::string render_capacity_report(const CapacityResult& result, const std::string& title_detail);

}  // namespace shardplan
