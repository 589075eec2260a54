// The self-contained HTML report: summary table, SVG timeline lanes per (rank, stream), stacked memory-over-time plot.
#include "html_report.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string_view>

#include "errors.h"
#include "svg_chart.h"

namespace shardplan {
namespace {

using svg::escape;  // the reports' one escaping and number formatting (svg_chart.h)
using svg::format;

// Geometry shared by both plots, so the memory plot's x axis lines up under the timeline's.
constexpr double kLabelWidth = 230;
constexpr double kPlotWidth = 1100;
constexpr double kLaneHeight = 14;
constexpr double kLaneGap = 4;
constexpr double kAxisHeight = 28;
constexpr double kMemoryHeight = 260;
// Above this many ops, neighbouring ops closer than a few pixels are merged so the file stays a few MB.
constexpr std::size_t kMaxRects = 20000;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

constexpr std::array<const char*, kMemoryCategoryCount> kCategoryColours = {
    "#4e79a7", "#a0cbe8", "#f28e2b", "#59a14f", "#8cd17d", "#e15759", "#b07aa1", "#edc948", "#bab0ac"};

std::string format_seconds(double seconds) {
  return std::abs(seconds) < 1 ? format("%.3f ms", seconds * 1e3) : format("%.4f s", seconds);
}

// "55.83 GiB": for headings, which people read (issue 36: "peak 59948695552 B (55.83 GiB)").
std::string readable_bytes(std::int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (std::abs(value) >= 1024 && unit < 4) value /= 1024, ++unit;
  return unit == 0 ? std::to_string(bytes) + " B" : format("%.2f ", value) + units[unit];
}

// "59948695552 B (55.83 GiB)": exact, for tooltips.
std::string format_bytes(std::int64_t bytes) {
  const std::string readable = readable_bytes(bytes);
  return std::to_string(bytes) + " B" + (std::abs(bytes) < 1024 ? "" : " (" + readable + ")");
}

// A tick step of 1, 2 or 5 × 10^k giving about `target` ticks over `range`.
double nice_step(double range, int target) {
  const double raw = range / target;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double factor : {1.0, 2.0, 5.0}) {
    if (raw <= factor * power) return factor * power;
  }
  return 10 * power;
}

// "12.5" rather than "12.500000": tick labels need only the digits the step has.
std::string tick_label(double value, double step) {
  const int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", std::min(decimals, 12), value);
  return buffer;
}

struct TimeAxis {
  double start = 0;
  double span = 1;
  double x(double t) const { return kLabelWidth + (t - start) / span * kPlotWidth; }
};

// Vertical grid lines and labels in ms (spans under 2 s) or s, from the top of the plot down `height`. Labels count from
// the axis start, as Perfetto does, so a measured trace stamped with wall-clock time still reads "0 ms, 20 ms, ...".
void draw_time_axis(std::string& out, const TimeAxis& axis, double top, double height) {
  const bool in_ms = axis.span < 2;
  const double scale = in_ms ? 1e3 : 1;
  const double step = nice_step(axis.span * scale, 10);
  for (int index = 0; index * step <= axis.span * scale * (1 + 1e-9); ++index) {
    const double tick = index * step;
    const std::string x = format("%.1f", axis.x(axis.start + tick / scale));
    out += "<line class=\"grid\" x1=\"" + x + "\" y1=\"" + format("%.1f", top) + "\" x2=\"" + x + "\" y2=\"" +
           format("%.1f", top + height) + "\"/><text class=\"tick\" x=\"" + x + "\" y=\"" + format("%.1f", top - 4) +
           "\" text-anchor=\"middle\">" + tick_label(tick, step) + (in_ms ? " ms" : " s") + "</text>";
  }
}

// Kind → CSS class index; known schedule kinds get fixed colours so reports compare at a glance.
struct KindPalette {
  std::map<std::string, std::size_t> index;
  std::vector<std::string> colours;

  std::size_t of(const std::string& kind) {
    static constexpr std::array<std::pair<std::string_view, const char*>, 10> kKnown = {{
        {"forward", "#4e79a7"}, {"backward", "#f28e2b"}, {"recompute", "#edc948"}, {"all_gather", "#59a14f"},
        {"reduce_scatter", "#e15759"}, {"all_reduce", "#b07aa1"}, {"h2d", "#76b7b2"}, {"d2h", "#9c755f"},
        {"optimizer_step", "#ff9da7"}, {"free_unsharded", "#bab0ac"}}};
    static constexpr std::array<const char*, 6> kFallback = {"#17becf", "#bcbd22", "#8c564b", "#e377c2", "#7f7f7f",
                                                            "#1f77b4"};
    if (auto found = index.find(kind); found != index.end()) return found->second;
    const char* colour = kFallback[colours.size() % kFallback.size()];
    for (const auto& [name, known] : kKnown) {
      if (name == kind) colour = known;
    }
    index.emplace(kind, colours.size());
    colours.emplace_back(colour);
    return colours.size() - 1;
  }
};

struct Lane {
  std::string label;
  bool overlay = false;
  std::vector<const TimelineEvent*> events;
};

using LaneEvents = std::map<std::pair<int, std::string>, std::vector<const TimelineEvent*>>;

// One pass over the events (not one per lane): reports of many ranks hold hundreds of lanes.
LaneEvents group_by_lane(const Timeline* timeline) {
  LaneEvents lanes;
  if (timeline == nullptr) return lanes;
  for (const auto& event : timeline->events) lanes[{event.rank, event.stream}].push_back(&event);
  for (auto& [key, events] : lanes) {
    std::stable_sort(events.begin(), events.end(), [](auto* a, auto* b) { return a->start_s < b->start_s; });
  }
  return lanes;
}

// Per rank, the main timeline's streams in order, each followed directly by the overlay's lane of the same stream.
std::vector<Lane> build_lanes(const Timeline& main, const Timeline* overlay) {
  std::vector<int> ranks = main.ranks();
  std::vector<std::string> streams = main.streams();
  if (overlay != nullptr) {
    for (int rank : overlay->ranks()) ranks.push_back(rank);
    for (const auto& stream : overlay->streams()) {
      if (std::find(streams.begin(), streams.end(), stream) == streams.end()) streams.push_back(stream);
    }
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  }
  const std::string main_tag = overlay != nullptr ? " (" + (main.source.empty() ? "main" : main.source) + ")" : "";
  const std::string overlay_tag =
      overlay != nullptr ? " (" + (overlay->source.empty() ? "overlay" : overlay->source) + ")" : "";
  LaneEvents main_events = group_by_lane(&main), overlay_events = group_by_lane(overlay);
  std::vector<Lane> lanes;
  for (int rank : ranks) {
    for (const auto& stream : streams) {
      const std::string base = "rank " + std::to_string(rank) + " / " + stream;
      if (auto found = main_events.find({rank, stream}); found != main_events.end()) {
        lanes.push_back({base + main_tag, false, std::move(found->second)});
      }
      if (auto found = overlay_events.find({rank, stream}); found != overlay_events.end()) {
        lanes.push_back({base + overlay_tag, true, std::move(found->second)});
      }
    }
  }
  return lanes;
}

std::string op_tooltip(const TimelineEvent& event) {
  return escape(event.name) + "\nkind: " + escape(event.kind) + "\nstart: " + format_seconds(event.start_s) +
         "\nduration: " + format_seconds(event.duration_s()) + "\nbytes: " + format_bytes(event.bytes) +
         "\nflops: " + format("%.4g", event.flops);
}

void draw_rect(std::string& out, double x0, double x1, double y, std::size_t kind, const std::string& tooltip) {
  // At least a third of a pixel wide, so zero-length ops (frees, markers) still show up.
  out += "<rect class=\"k" + std::to_string(kind) + "\" x=\"" + format("%.2f", x0) + "\" y=\"" + format("%.1f", y) +
         "\" width=\"" + format("%.2f", std::max(x1 - x0, 0.3)) + "\" height=\"" + format("%.0f", kLaneHeight) +
         "\"><title>" + tooltip + "</title></rect>";
}

// Draws one lane's ops; with `merge_px` > 0, runs of ops closer than that many pixels become one rect coloured by the
// kind that took most of the run's time (Note: the tooltip says how many ops it stands for).
void draw_lane_ops(std::string& out, const Lane& lane, const TimeAxis& axis, double y, double merge_px,
                   KindPalette& palette) {
  for (std::size_t i = 0; i < lane.events.size();) {
    const TimelineEvent& first = *lane.events[i];
    if (merge_px <= 0) {
      draw_rect(out, axis.x(first.start_s), axis.x(first.end_s), y, palette.of(first.kind), op_tooltip(first));
      ++i;
      continue;
    }
    std::size_t j = i;
    double end = first.end_s, bytes = 0, flops = 0;
    std::map<std::string, double> time_by_kind;
    while (j < lane.events.size() && (j == i || axis.x(lane.events[j]->start_s) - axis.x(end) < merge_px)) {
      const TimelineEvent& event = *lane.events[j++];
      end = std::max(end, event.end_s);
      bytes += static_cast<double>(event.bytes);
      flops += event.flops;
      time_by_kind[event.kind] += event.duration_s();
    }
    if (j - i == 1) {
      draw_rect(out, axis.x(first.start_s), axis.x(first.end_s), y, palette.of(first.kind), op_tooltip(first));
    } else {
      const auto dominant = std::max_element(time_by_kind.begin(), time_by_kind.end(),
                                             [](const auto& a, const auto& b) { return a.second < b.second; });
      const std::string tooltip = std::to_string(j - i) + " ops merged (mostly " + escape(dominant->first) +
                                  ")\nstart: " + format_seconds(first.start_s) + "\nend: " + format_seconds(end) +
                                  "\nbytes: " + format("%.0f", bytes) + "\nflops: " + format("%.4g", flops);
      draw_rect(out, axis.x(first.start_s), axis.x(end), y, palette.of(dominant->first), tooltip);
    }
    i = j;
  }
}

void draw_timeline(std::string& out, const std::vector<Lane>& lanes, const TimeAxis& axis, KindPalette& palette) {
  std::size_t total = 0;
  for (const auto& lane : lanes) total += lane.events.size();
  // Each lane then holds at most about kPlotWidth / merge_px rects, so the whole plot stays near kMaxRects.
  const double merge_px =
      total > kMaxRects ? std::max(1.0, kPlotWidth * static_cast<double>(lanes.size()) / kMaxRects) : 0;
  const double height = kAxisHeight + static_cast<double>(lanes.size()) * (kLaneHeight + kLaneGap) + 6;
  out += "<p class=\"note\">" + std::to_string(total) + " ops on " + std::to_string(lanes.size()) + " lanes";
  if (merge_px > 0) out += "; ops closer than " + format("%.0f", merge_px) + " px are merged to keep the file small";
  out += ".</p>\n<svg class=\"timeline\" " + svg::size_attributes(kLabelWidth + kPlotWidth + 20, height) +
         " role=\"img\">";
  draw_time_axis(out, axis, kAxisHeight, height - kAxisHeight);
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    const double y = kAxisHeight + static_cast<double>(i) * (kLaneHeight + kLaneGap);
    const Lane& lane = lanes[i];
    out += "<g" + std::string(lane.overlay ? " class=\"overlay\"" : "") + "><rect class=\"lane\" x=\"" +
           format("%.0f", kLabelWidth) + "\" y=\"" + format("%.1f", y) + "\" width=\"" + format("%.0f", kPlotWidth) +
           "\" height=\"" + format("%.0f", kLaneHeight) + "\"/><text class=\"label\" x=\"" +
           format("%.0f", kLabelWidth - 6) + "\" y=\"" + format("%.1f", y + kLaneHeight - 3) +
           "\" text-anchor=\"end\">" + escape(lane.label) + "</text>";
    draw_lane_ops(out, lane, axis, y, merge_px, palette);
    out += "</g>\n";
  }
  out += "</svg>\n<div class=\"legend\">";
  for (const auto& [kind, index] : palette.index) {
    out += "<span><i class=\"swatch\" style=\"background:" + palette.colours[index] + "\"></i>" + escape(kind) +
           "</span>";
  }
  out += "</div>\n";
}

// Stacked areas in category order, each a step function (memory holds its value until the next sample).
void draw_memory(std::string& out, const Timeline& timeline, const TimeAxis& axis) {
  // Rank 0 when it reported memory, else the lowest rank that did: one rank's plot is representative under FSDP.
  if (timeline.memory.empty()) {
    out += "<h2>Memory</h2>\n<p class=\"note\">No memory samples in this timeline.</p>\n";
    return;
  }
  const auto& memory = timeline.memory;
  const bool has_rank_0 = std::any_of(memory.begin(), memory.end(), [](const auto& s) { return s.rank == 0; });
  const int rank = has_rank_0 ? 0
                              : std::min_element(memory.begin(), memory.end(), [](const auto& a, const auto& b) {
                                  return a.rank < b.rank;
                                })->rank;
  std::vector<MemorySample> samples;
  for (const auto& sample : timeline.memory) {
    if (sample.rank == rank) samples.push_back(sample);
  }
  std::stable_sort(samples.begin(), samples.end(), [](const auto& a, const auto& b) { return a.time_s < b.time_s; });
  // More samples than pixels add bytes, not information; keep the largest sample per pixel column so peaks survive.
  if (samples.size() > 2 * static_cast<std::size_t>(kPlotWidth)) {
    std::vector<MemorySample> kept;
    for (const auto& sample : samples) {
      if (!kept.empty() && std::floor(axis.x(kept.back().time_s)) == std::floor(axis.x(sample.time_s))) {
        if (sample.total_bytes() > kept.back().total_bytes()) kept.back() = sample;
      } else {
        kept.push_back(sample);
      }
    }
    samples = std::move(kept);
  }
  long long peak = 1;
  for (const auto& sample : samples) peak = std::max(peak, sample.total_bytes());
  const double step = nice_step(static_cast<double>(peak) / kGiB, 5);
  const double y_max = std::ceil(static_cast<double>(peak) / kGiB / step) * step;
  const double top = kAxisHeight;
  const auto y_of = [&](double bytes) { return top + kMemoryHeight * (1 - bytes / kGiB / y_max); };
  const double end_s = std::max(axis.start + axis.span, samples.back().time_s);

  out += "<h2>Memory over time, rank " + std::to_string(rank) + " (peak " + readable_bytes(peak) + ")</h2>\n";
  out += "<svg class=\"memory\" " + svg::size_attributes(kLabelWidth + kPlotWidth + 20, top + kMemoryHeight + 10) +
         " role=\"img\">";
  draw_time_axis(out, axis, top, kMemoryHeight);
  for (int index = 0; index * step <= y_max + 1e-9 * step; ++index) {
    const double tick = index * step;
    const std::string y = format("%.1f", y_of(tick * kGiB));
    out += "<line class=\"grid\" x1=\"" + format("%.0f", kLabelWidth) + "\" y1=\"" + y + "\" x2=\"" +
           format("%.0f", kLabelWidth + kPlotWidth) + "\" y2=\"" + y + "\"/><text class=\"tick\" x=\"" +
           format("%.0f", kLabelWidth - 6) + "\" y=\"" + y + "\" text-anchor=\"end\">" + tick_label(tick, step) +
           " GiB</text>";
  }
  std::vector<double> below(samples.size(), 0);
  for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
    bool any = false;
    for (const auto& sample : samples) any = any || sample.bytes[c] != 0;
    if (!any) continue;
    // The outline runs left to right along this category's top, then right to left along the one below it.
    std::string upper;
    std::vector<std::string> lower;
    for (std::size_t i = 0; i < samples.size(); ++i) {
      const std::string x0 = format("%.2f,", axis.x(samples[i].time_s));
      const std::string x1 = format("%.2f,", axis.x(i + 1 < samples.size() ? samples[i + 1].time_s : end_s));
      const double value = below[i] + static_cast<double>(samples[i].bytes[c]);
      const std::string y_top = format("%.2f ", y_of(value)), y_bottom = format("%.2f ", y_of(below[i]));
      upper += x0 + y_top + x1 + y_top;
      lower.push_back(x1 + y_bottom + x0 + y_bottom);
      below[i] = value;
    }
    for (auto part = lower.rbegin(); part != lower.rend(); ++part) upper += *part;
    out += "<polygon fill=\"" + std::string(kCategoryColours[c]) + "\" points=\"" + upper + "\"><title>" +
           std::string(kMemoryCategoryNames[c]) + "</title></polygon>";
  }
  out += "</svg>\n<div class=\"legend\">";
  for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
    out += "<span><i class=\"swatch\" style=\"background:" + std::string(kCategoryColours[c]) + "\"></i>" +
           std::string(kMemoryCategoryNames[c]) + "</span>";
  }
  out += "</div>\n";
}

TimeAxis time_axis(const Timeline& main, const Timeline* overlay) {
  double first = INFINITY, last = -INFINITY;
  for (const Timeline* timeline : {&main, overlay}) {
    if (timeline == nullptr) continue;
    for (const auto& event : timeline->events) first = std::min(first, event.start_s), last = std::max(last, event.end_s);
    for (const auto& sample : timeline->memory) first = std::min(first, sample.time_s), last = std::max(last, sample.time_s);
  }
  if (!(first <= last)) first = 0, last = 1;
  return TimeAxis{first, last > first ? last - first : 1};
}

constexpr const char* kStyle = R"(body{font-family:system-ui,sans-serif;margin:24px;color:#222}
h1{font-size:22px}h2{font-size:17px;margin-top:28px}
table.summary{border-collapse:collapse}table.summary td,table.summary th{border:1px solid #ccc;padding:4px 10px;text-align:left}
table.summary th{background:#f4f4f4;font-weight:600}
svg text{font-size:11px;fill:#333}.grid{stroke:#e3e3e3;stroke-width:1}.lane{fill:#f7f7f7}
.overlay .lane{fill:#eef3fa}.overlay rect:not(.lane){fill-opacity:.6}.note{color:#666;font-size:13px}
.legend span{display:inline-block;margin-right:14px;font-size:12px}.swatch{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:middle}
)";

}  // namespace

std::string render_html_report(const ReportInput& input) {
  SHARDPLAN_CHECK(input.timeline != nullptr, "render_html_report needs a timeline");
  const Timeline& main = *input.timeline;
  std::string body;
  body += "<h1>" + escape(input.title) + "</h1>\n";
  if (!input.summary.empty()) {
    body += "<table class=\"summary\">\n";
    for (const auto& row : input.summary) {
      body += "<tr><th>" + escape(row.name) + "</th><td>" + escape(row.value) + "</td></tr>\n";
    }
    body += "</table>\n";
  }
  for (const auto& section : input.sections) body += section;
  const TimeAxis axis = time_axis(main, input.overlay);
  KindPalette palette;
  body += "<h2>Timeline (" + format_seconds(main.span_s()) + ")</h2>\n";
  draw_timeline(body, build_lanes(main, input.overlay), axis, palette);
  draw_memory(body, main, axis);

  // The kind colours are known only after drawing, so the style sheet is assembled last.
  std::string style = std::string(kStyle) + svg::chart_style();
  for (std::size_t i = 0; i < palette.colours.size(); ++i) {
    style += ".k" + std::to_string(i) + "{fill:" + palette.colours[i] + "}\n";
  }
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" + escape(input.title) +
         "</title>\n<style>\n" + style + "</style>\n</head>\n<body>\n" + body + "</body>\n</html>\n";
}

}  // namespace shardplan
