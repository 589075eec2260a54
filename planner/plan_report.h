// The `plan --report` page: the planned units over the layer sequence beside the baselines' wrappings, memory by
// category at each one's peak against the cap, host memory when offloading, and the planned step's timeline.
#pragma once

#include <string>

#include "cluster.h"
#include "model_spec.h"
#include "search.h"
#include "timeline.h"

namespace shardplan {

// `timeline`: the planned plan's simulated step (with memory samples). The page is self-contained HTML + SVG.
std::string render_plan_report(const SearchResult& result, const ModelSpec& model, const Cluster& cluster,
                               const Timeline& timeline);

// The wrapping picture alone (one SVG): a row per plan, each unit a bar over the layers it holds.
struct WrappingRow {
  std::string label;  // "planned", "transformer_auto_wrap_policy"
  const Plan* plan = nullptr;
  std::string note;   // right of the row: "0.912 s, 61.2 GiB"
};
std::string render_wrapping_svg(const std::vector<WrappingRow>& rows, const ModelSpec& model);

}  // namespace shardplan
