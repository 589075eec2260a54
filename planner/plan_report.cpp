// The `plan --report` page: wrapping rows (planned vs baselines), memory at the peak by category, the timeline.
#include "plan_report.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "errors.h"
#include "html_report.h"
#include "plan_export.h"
#include "svg_chart.h"
#include "unit_layout.h"

namespace shardplan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// The memory plot's colours (html_report.cpp), so the bars read against the timeline's memory plot.
constexpr std::array<const char*, kMemoryCategoryCount> kCategoryColours = {
    "#4e79a7", "#a0cbe8", "#f28e2b", "#59a14f", "#8cd17d", "#e15759", "#b07aa1", "#edc948", "#bab0ac"};

std::string gib(std::int64_t bytes) { return svg::format("%.2f GiB", static_cast<double>(bytes) / kGiB); }

// The unit each layer belongs to (root included), from the plan's own unit list.
std::vector<int> unit_of_layers(const Plan& plan, const ModelSpec& model) {
  std::vector<int> owner(model.layers.size(), 0);
  const std::vector<UnitInfo> units = plan_units(plan, model);
  for (std::size_t id = 0; id < units.size(); ++id) {
    for (const std::size_t layer : units[id].layers) owner.at(layer) = static_cast<int>(id);
  }
  return owner;
}

// "full_shard, TP 2, EP 1": how the plan shards, under its note (issue 36: the picture showed the wrapping only).
std::string row_parallelism(const Plan& plan) {
  const auto unit = std::find_if(plan.units.begin(), plan.units.end(), [](const PlanUnit& u) { return !u.is_root; });
  const std::string strategy = unit == plan.units.end() ? "root only" : export_detail::strategy_label(unit->strategy);
  return strategy + ", TP " + std::to_string(plan.tensor_parallel_degree) + ", EP " +
         std::to_string(plan.training.expert_parallel_degree);
}

// "1.05 B", "218.1 M": parameter counts as people read them.
std::string readable_count(std::int64_t count) {
  const double value = static_cast<double>(count);
  if (value >= 1e9) return svg::format("%.2f B", value / 1e9);
  if (value >= 1e6) return svg::format("%.1f M", value / 1e6);
  if (value >= 1e3) return svg::format("%.1f k", value / 1e3);
  return std::to_string(count);
}

// Short enough for the note column: "10.455 s, 153.0 GiB, no fit".
std::string row_note(const PlanCandidate& candidate) {
  return svg::format("%.3f s, ", candidate.summary.step_time_s) +
         svg::format("%.1f GiB", static_cast<double>(candidate.summary.peak_memory_bytes) / kGiB) +
         (candidate.fits ? "" : ", no fit");
}

}  // namespace

std::string render_wrapping_svg(const std::vector<WrappingRow>& rows, const ModelSpec& model) {
  constexpr double kLabel = 230, kNote = 250, kPlot = 840, kRow = 30, kGap = 14, kTop = 40;
  const double layers = static_cast<double>(std::max<std::size_t>(model.layers.size(), 1));
  const double cell = kPlot / layers;
  const double height = kTop + static_cast<double>(rows.size()) * (kRow + kGap) + 34;
  std::string out = "<svg class=\"wrapping\" " + svg::size_attributes(kLabel + kPlot + kNote, height) +
                    " role=\"img\"><title>units over the layer " +
                    "sequence</title>";
  out += "<text class=\"chart-title\" x=\"" + svg::format("%.0f", kLabel) + "\" y=\"16\">Units over the " +
         std::to_string(model.layers.size()) + " layers (model order, left to right): each bar is one FSDP unit; " +
         "grey: the root unit</text>";
  // Layer ticks: every block index that keeps the labels apart, and the first and last layer.
  const std::size_t every = std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(40.0 / cell)));
  for (std::size_t layer = 0; layer < model.layers.size(); layer += every) {
    out += "<text class=\"tick\" x=\"" + svg::format("%.1f", kLabel + (static_cast<double>(layer) + 0.5) * cell) +
           "\" y=\"" + svg::format("%.0f", kTop - 6) + "\" text-anchor=\"middle\">" + std::to_string(layer) +
           "<title>" + svg::escape(model.layers[layer].name) + "</title></text>";
  }
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const Plan& plan = *rows[r].plan;
    const double y = kTop + static_cast<double>(r) * (kRow + kGap);
    out += "<text class=\"label\" x=\"" + svg::format("%.0f", kLabel - 8) + "\" y=\"" + svg::format("%.1f", y + 19) +
           "\" text-anchor=\"end\">" + svg::escape(rows[r].label) + "</text>";
    const std::vector<int> owner = unit_of_layers(plan, model);
    const std::vector<UnitInfo> units = plan_units(plan, model);
    // Each maximal run of layers of one unit is a bar (the root's layers are apart: embedding first, head last).
    for (std::size_t begin = 0; begin < owner.size();) {
      std::size_t end = begin + 1;
      while (end < owner.size() && owner[end] == owner[begin]) ++end;
      const int id = owner[begin];
      const PlanUnit& unit = plan.units.at(static_cast<std::size_t>(id));
      const bool root = id == 0;
      const std::string colour = root ? "#c9c9c9" : (id % 2 == 1 ? "#4e79a7" : "#86a9cf");
      const bool kept = !root && !unit.reshard_after_forward.enabled;
      const double x0 = kLabel + static_cast<double>(begin) * cell, width = static_cast<double>(end - begin) * cell;
      const std::string tooltip = (root ? std::string("root unit") : "unit " + std::to_string(id)) + " '" +
                                  units.at(static_cast<std::size_t>(id)).name + "': layers " + std::to_string(begin) +
                                  "-" + std::to_string(end - 1) + ", " +
                                  readable_count(static_cast<std::int64_t>(units.at(static_cast<std::size_t>(id)).param_count)) +
                                  " parameters" +
                                  (kept ? ", kept gathered from forward to backward" : "");
      out += "<rect x=\"" + svg::format("%.2f", x0 + 0.5) + "\" y=\"" + svg::format("%.1f", y) + "\" width=\"" +
             svg::format("%.2f", std::max(width - 1, 0.5)) + "\" height=\"" + svg::format("%.0f", kRow - 8) +
             "\" fill=\"" + colour + "\"" + (kept ? " stroke=\"#222\" stroke-width=\"2\"" : "") + "><title>" +
             svg::escape(tooltip) + "</title></rect>";
      if (!root && width >= 16) {
        out += "<text class=\"cell-text\" x=\"" + svg::format("%.1f", x0 + width / 2) + "\" y=\"" +
               svg::format("%.1f", y + 15) + "\" text-anchor=\"middle\" style=\"fill:#fff\">" +
               std::to_string(end - begin) + "</text>";
      }
      begin = end;
    }
    // Checkpointed layers: a tick under each (full: dark, selective: light).
    for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
      const ActivationCheckpointing mode = layer_checkpointing_of(plan, model, layer);
      if (mode == ActivationCheckpointing::none) continue;
      out += "<rect x=\"" + svg::format("%.2f", kLabel + static_cast<double>(layer) * cell + 0.5) + "\" y=\"" +
             svg::format("%.1f", y + kRow - 6) + "\" width=\"" + svg::format("%.2f", std::max(cell - 1, 0.5)) +
             "\" height=\"4\" fill=\"" + (mode == ActivationCheckpointing::full ? "#e15759" : "#f1a2a3") +
             "\"><title>layer " + std::to_string(layer) + ": activation checkpointing " + to_string(mode) +
             "</title></rect>";
    }
    out += "<text class=\"note\" x=\"" + svg::format("%.0f", kLabel + kPlot + 8) + "\" y=\"" +
           svg::format("%.1f", y + 15) + "\">" + svg::escape(rows[r].note) + "</text>";
    out += "<text class=\"note\" x=\"" + svg::format("%.0f", kLabel + kPlot + 8) + "\" y=\"" +
           svg::format("%.1f", y + 29) + "\">" + svg::escape(row_parallelism(plan)) + "</text>";
  }
  const double legend_y = height - 12;
  out += "<rect x=\"" + svg::format("%.0f", kLabel) + "\" y=\"" + svg::format("%.0f", legend_y - 9) +
         "\" width=\"14\" height=\"10\" fill=\"#4e79a7\" stroke=\"#222\" stroke-width=\"2\"/><text x=\"" +
         svg::format("%.0f", kLabel + 20) + "\" y=\"" + svg::format("%.0f", legend_y) +
         "\">outlined: kept gathered after forward (reshard_after_forward=False)</text><rect x=\"" +
         svg::format("%.0f", kLabel + 400) + "\" y=\"" + svg::format("%.0f", legend_y - 6) +
         "\" width=\"14\" height=\"4\" fill=\"#e15759\"/><text x=\"" + svg::format("%.0f", kLabel + 420) + "\" y=\"" +
         svg::format("%.0f", legend_y) + "\">activation checkpointing (full; light: selective)</text>";
  return out + "</svg>\n";
}

std::string render_plan_report(const SearchResult& result, const ModelSpec& model, const Cluster& cluster,
                               const Timeline& timeline) {
  SHARDPLAN_CHECK(result.feasible, "a plan report needs a plan");
  const PlanCandidate& best = result.best;
  ReportInput report;
  report.title = "shardplan plan: " + model.name + " on " + cluster.describe();
  report.timeline = &timeline;
  report.summary = {
      {"plan", best.knobs},
      {"units", "root + " + std::to_string(best.plan.units.size() - 1)},
      {"step time", svg::format("%.4f s", best.summary.step_time_s)},
      {"tokens/s", svg::format("%.0f", best.summary.tokens_per_s)},
      {"MFU", svg::format("%.1f %%", 100 * best.summary.mfu)},
      {"peak memory", gib(best.summary.peak_memory_bytes) + " allocated (at " + best.summary.peak_op + ")"},
      // Note [Memory headroom]: the figure the fits test compares and the headroom it keeps.
      {"fits", "reserved " + gib(best.summary.device_peak_bytes) + " of " + gib(result.memory_cap_bytes) + ", " +
                   svg::format("%g %% headroom kept", 100 * result.memory_headroom_fraction)},
      {"search", std::to_string(result.candidates_evaluated) + " candidates simulated in " +
                     svg::format("%.2f s", result.seconds)},
  };
  if (result.host_memory.offloads()) report.summary.push_back({"host memory", describe(result.host_memory)});

  std::vector<WrappingRow> rows = {{"planned", &best.plan, row_note(best)}};
  for (const auto& baseline : result.baselines) {
    std::string note = row_note(baseline.candidate);
    if (baseline.candidate.summary.tokens_per_s > 0) {  // speed-up in tokens/s, as `plan` prints it
      note += svg::format(", %.2fx", best.summary.tokens_per_s / baseline.candidate.summary.tokens_per_s);
    }
    rows.push_back({baseline.name, &baseline.candidate.plan, note});
  }
  std::string wrapping = "<h2>Wrapping: the planned units against the baselines'</h2>\n<p class=\"note\">Right of "
                         "each row: step time, peak memory and the planned tokens/s over the baseline's.</p>\n";
  wrapping += render_wrapping_svg(rows, model);
  report.sections.push_back(wrapping);

  svg::StackedBars bars;
  bars.title = "Memory by category at each plan's peak (per GPU)";
  bars.unit = "GiB";
  bars.marker = static_cast<double>(result.usable_memory_bytes()) / kGiB;
  bars.marker_label = "cap " + gib(result.memory_cap_bytes) + " less the headroom";
  const auto bar_row = [&](const std::string& label, const PlanCandidate& candidate) {
    svg::BarRow row{label, {}, candidate.fits ? "fits" : "does not fit"};
    for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
      row.segments.push_back({std::string(kMemoryCategoryNames[c]),
                              static_cast<double>(candidate.summary.memory_at_peak[c]) / kGiB, kCategoryColours[c]});
    }
    return row;
  };
  bars.rows.push_back(bar_row("planned", best));
  for (const auto& baseline : result.baselines) bars.rows.push_back(bar_row(baseline.name, baseline.candidate));
  std::vector<std::pair<std::string, std::string>> swatches;
  for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
    swatches.emplace_back(kCategoryColours[c], std::string(kMemoryCategoryNames[c]));
  }
  std::string memory = "<h2>Memory at the peak</h2>\n" + render_stacked_bars(bars) + svg::legend(swatches);
  if (result.host_memory.offloads()) {
    memory += "<p class=\"note\">" + svg::escape(describe(result.host_memory)) + "</p>\n";
  }
  report.sections.push_back(memory);
  return render_html_report(report);
}

}  // namespace shardplan
