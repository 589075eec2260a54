// The `capacity --report` page: a days-vs-cost scatter with the Pareto front, throughput vs GPU count, a limits grid.
#include "capacity_report.h"

#include <algorithm>
#include <map>

#include "svg_chart.h"

namespace shardplan {
namespace {

// Note [Capacity limits] in capacity.h: one colour per limit, the same in the grid and the throughput chart's key.
struct LimitStyle {
  const char* limit;
  const char* colour;
  const char* name;
};
constexpr LimitStyle kLimits[] = {
    {"compute", "#59a14f", "compute (exposed communication under a quarter of the step)"},
    {"communication", "#f28e2b", "communication (a quarter of the step or more)"},
    {"pipeline_bubble", "#edc948", "pipeline bubble (the ranks idle a quarter of the step or more)"},
    {"memory", "#e15759", "GPU memory (no plan fits)"},
    {"host_memory", "#b07aa1", "host memory (offloaded states do not fit a node)"},
    {"batch", "#bab0ac", "global batch does not divide over the GPUs"},
    {"pinned", "#76b7b2", "a pinned knob (--tensor-parallel, --strategy, ...) the point cannot take"},
};

const char* limit_colour(const std::string& limit) {
  for (const auto& style : kLimits) {
    if (limit == style.limit) return style.colour;
  }
  return "#ffffff";
}

std::string point_tooltip(const CapacityPoint& point) {
  if (!point.fits) return point.gpu + " x " + std::to_string(point.gpus) + ": does not fit (" + point.why_not + ")";
  return point.gpu + " x " + std::to_string(point.gpus) + ": " + svg::format("%.1f days, ", point.days) +
         svg::format("$%.0f, ", point.cost_usd) + svg::format("%.0f tokens/s, ", point.tokens_per_s) +
         svg::format("MFU %.1f%%, ", 100 * point.mfu) +
         svg::format("exposed communication %.0f%% of the step; ",
                     point.step_time_s > 0 ? 100 * point.exposed_comm_s / point.step_time_s : 0) +
         point.knobs;
}

}  // namespace

std::string render_capacity_report(const CapacityResult& result, const std::string& title_detail) {
  std::vector<std::string> gpus;  // in sweep order
  std::vector<int> counts;
  for (const auto& point : result.points) {
    if (std::find(gpus.begin(), gpus.end(), point.gpu) == gpus.end()) gpus.push_back(point.gpu);
    if (std::find(counts.begin(), counts.end(), point.gpus) == counts.end()) counts.push_back(point.gpus);
  }
  std::sort(counts.begin(), counts.end());
  std::map<std::string, std::string> colour;
  for (std::size_t i = 0; i < gpus.size(); ++i) colour[gpus[i]] = svg::palette()[i % svg::palette().size()];

  std::string body = "<table class=\"summary\">\n<tr><th>swept</th><td>" + std::to_string(result.points.size()) +
                     " configurations in " + svg::format("%.2f s", result.seconds) + "</td></tr>\n";
  for (const auto& [gpu, count] : result.smallest_fitting) {
    body += "<tr><th>smallest fitting " + svg::escape(gpu) + "</th><td>" +
            (count > 0 ? std::to_string(count) + (count == 1 ? " GPU" : " GPUs")
                       : std::string("none up to the largest count swept")) +
            "</td></tr>\n";
  }
  // Note [Practical points] (capacity.h): the smallest count that trains the budget within the sweep's --max-days.
  for (const auto& [gpu, count] : result.smallest_practical) {
    body += "<tr><th>smallest practical " + svg::escape(gpu) + "</th><td>" +
            (count > 0 ? std::to_string(count) + (count == 1 ? " GPU" : " GPUs")
                       : std::string("none within ") + svg::format("%g days", result.max_practical_days)) +
            "</td></tr>\n";
  }
  for (const auto& point : result.points) {
    if (point.pareto) {
      body += "<tr><th>Pareto: " + svg::escape(point.gpu) + " x " + std::to_string(point.gpus) + "</th><td>" +
              svg::format("%.1f days, ", point.days) + svg::format("$%.0f", point.cost_usd) + "</td></tr>\n";
    }
  }
  body += "</table>\n";

  svg::XyChart cost;
  cost.title = "Days to train vs cost (fitting points; labels: GPU count)";
  cost.x = {"days to train the token budget", svg::Scale::log10, ""};
  cost.y = {"cost, USD", svg::Scale::log10, ""};
  cost.front_label = "Pareto front (ringed): no point is both faster and cheaper";
  cost.width = 1000;
  cost.height = 480;
  svg::XyChart speed;
  speed.title = "Throughput vs GPU count";
  speed.x = {"GPUs", svg::Scale::log2, ""};
  speed.y = {"tokens/s", svg::Scale::log10, ""};
  speed.width = 1000;
  speed.height = 440;
  std::vector<std::pair<double, double>> front;
  for (const auto& gpu : gpus) {
    svg::XySeries by_cost{gpu, colour[gpu], {}, false, {}};
    svg::XySeries by_count{gpu, colour[gpu], {}, true, {}};
    for (const auto& point : result.points) {
      if (point.gpu != gpu || !point.fits) continue;
      const std::string tooltip = point_tooltip(point);
      by_cost.points.push_back({point.days, point.cost_usd, std::to_string(point.gpus), tooltip, point.pareto,
                                svg::Marker::circle});
      by_count.points.push_back({static_cast<double>(point.gpus), point.tokens_per_s, "", tooltip, false,
                                 point.limit == "communication" ? svg::Marker::square : svg::Marker::circle});
      if (point.pareto) front.emplace_back(point.days, point.cost_usd);
    }
    // Linear scaling at the type's best tokens/s per GPU, over the counts that fit: where the curve falls away from
    // it, adding GPUs stops paying.
    double best_per_gpu = 0;
    for (const auto& point : by_count.points) best_per_gpu = std::max(best_per_gpu, point.y / point.x);
    if (!by_count.points.empty()) {
      by_count.reference = {{by_count.points.front().x, best_per_gpu * by_count.points.front().x},
                            {by_count.points.back().x, best_per_gpu * by_count.points.back().x}};
    }
    cost.series.push_back(std::move(by_cost));
    speed.series.push_back(std::move(by_count));
  }
  std::sort(front.begin(), front.end());
  cost.front = front;
  body += "<h2>Days vs dollars per GPU type</h2>\n" + svg::render_xy_chart(cost);
  body += "<h2>Where it stops scaling</h2>\n<p class=\"note\">Circles: compute-limited points; squares: "
          "communication-limited (a quarter of the step or more is exposed communication). Dashed: linear scaling at "
          "the type's best tokens/s per GPU.</p>\n" +
          svg::render_xy_chart(speed);

  svg::Grid grid;
  grid.title = "What limits each point (cells: exposed communication share of the step, or why it does not fit)";
  grid.row_labels = gpus;
  for (int count : counts) grid.column_labels.push_back(std::to_string(count));
  grid.cells.assign(gpus.size(), std::vector<svg::GridCell>(counts.size(), {"", "#ffffff", "not swept"}));
  for (const auto& point : result.points) {
    const auto row = static_cast<std::size_t>(std::find(gpus.begin(), gpus.end(), point.gpu) - gpus.begin());
    const auto column = static_cast<std::size_t>(std::find(counts.begin(), counts.end(), point.gpus) - counts.begin());
    std::string text = point.limit == "memory" ? "GPU mem" : point.limit == "host_memory" ? "host mem"
                       : point.limit == "pinned"    ? "pinned"
                                                    : "batch";
    if (point.fits) {
      text = svg::format("%.0f%%", point.step_time_s > 0 ? 100 * point.exposed_comm_s / point.step_time_s : 0);
    }
    grid.cells[row][column] = {text, limit_colour(point.limit), point_tooltip(point)};
  }
  std::vector<std::pair<std::string, std::string>> key;
  for (const auto& style : kLimits) key.emplace_back(style.colour, style.name);
  body += "<h2>What limits each point</h2>\n" + svg::render_grid(grid) + svg::legend(key);
  return svg::html_page("shardplan capacity: " + title_detail, body);
}

}  // namespace shardplan
