// SVG chart primitives for the HTML reports: XY plots with linear/log axes, stacked bars, a categorical grid, the page.
#include "svg_chart.h"

#include <algorithm>
#include <cstdio>
#include <limits>

namespace shardplan::svg {
namespace {

constexpr double kMarginLeft = 78;
constexpr double kMarginRight = 24;
constexpr double kMarginTop = 52;  // title and legend rows
constexpr double kMarginBottom = 46;
constexpr double kCharWidth = 6.6;  // average width of an 11 px sans-serif character, for laying out legends

double transform(double value, Scale scale) {
  switch (scale) {
    case Scale::linear: return value;
    case Scale::log10: return std::log10(value);
    case Scale::log2: return std::log2(value);
  }
  return value;
}

double inverse(double value, Scale scale) {
  switch (scale) {
    case Scale::linear: return value;
    case Scale::log10: return std::pow(10.0, value);
    case Scale::log2: return std::pow(2.0, value);
  }
  return value;
}

bool plottable(double value, Scale scale) { return std::isfinite(value) && (scale == Scale::linear || value > 0); }

// A tick step of 1, 2 or 5 × 10^k giving about `target` ticks over `range`.
double nice_step(double range, int target) {
  const double raw = range / target;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double factor : {1.0, 2.0, 5.0}) {
    if (raw <= factor * power) return factor * power;
  }
  return 10 * power;
}

// "1.5k", "20M", "0.25": tick labels short enough for a narrow axis, exact for the values log axes tick at.
std::string compact(double value) {
  const double magnitude = std::abs(value);
  const std::pair<double, const char*> units[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
  for (const auto& [size, suffix] : units) {
    if (magnitude >= size) return format("%.4g", value / size) + suffix;
  }
  return format("%.4g", value);
}

struct Range {
  double low = std::numeric_limits<double>::infinity();
  double high = -std::numeric_limits<double>::infinity();
  void add(double value) {
    low = std::min(low, value);
    high = std::max(high, value);
  }
  // Padded by 6% each side; a single value gets a unit of room (a decade or a doubling on log axes).
  void settle() {
    if (!(low <= high)) low = 0, high = 1;
    if (high - low < 1e-12) low -= 0.5, high += 0.5;
    const double pad = 0.06 * (high - low);
    low -= pad;
    high += pad;
  }
};

// Tick positions in transformed coordinates.
std::vector<double> ticks(const Range& range, Scale scale) {
  std::vector<double> result;
  if (scale == Scale::linear) {
    const double step = nice_step(range.high - range.low, 6);
    for (double tick = std::ceil(range.low / step) * step; tick <= range.high + 1e-9 * step; tick += step) {
      result.push_back(std::abs(tick) < 1e-12 * step ? 0 : tick);
    }
    return result;
  }
  // Whole powers (of 10 or 2), thinned to at most ~10; on a log10 axis spanning under two decades, 2× and 5× too.
  const double first = std::ceil(range.low), last = std::floor(range.high);
  const double every = std::max(1.0, std::ceil((last - first + 1) / 10));
  for (double power = first; power <= last; power += every) result.push_back(power);
  if (scale == Scale::log10 && range.high - range.low < 2) {
    for (double power = std::floor(range.low); power <= range.high; ++power) {
      for (double factor : {2.0, 5.0}) {
        const double tick = power + std::log10(factor);
        if (tick >= range.low && tick <= range.high) result.push_back(tick);
      }
    }
    std::sort(result.begin(), result.end());
  }
  // Under three ticks (a cost axis from $100k to $184k had one, issue 36): evenly spaced values between.
  if (scale == Scale::log10 && result.size() < 3) {
    const double low = std::pow(10.0, range.low), high = std::pow(10.0, range.high);
    const double step = nice_step(high - low, 4);
    for (double value = std::ceil(low / step) * step; value <= high * (1 + 1e-9); value += step) {
      if (value > 0) result.push_back(std::log10(value));
    }
    std::sort(result.begin(), result.end());
    result.erase(std::unique(result.begin(), result.end(), [](double a, double b) { return std::abs(a - b) < 1e-9; }),
                 result.end());
  }
  return result;
}

std::string tick_text(double transformed, Scale scale, double linear_step) {
  const double value = inverse(transformed, scale);
  if (scale != Scale::linear) return compact(value);
  if (std::abs(value) >= 1e4) return compact(value);
  const int decimals = linear_step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(linear_step) - 1e-9));
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", std::min(decimals, 9), value);
  return buffer;
}

std::string marker_svg(const XyPoint& point, double x, double y, const std::string& colour) {
  std::string out;
  const std::string title = point.tooltip.empty() ? "" : "<title>" + escape(point.tooltip) + "</title>";
  if (point.highlight) {
    out += "<circle class=\"ring\" cx=\"" + format("%.1f", x) + "\" cy=\"" + format("%.1f", y) + "\" r=\"8.5\"/>";
  }
  switch (point.marker) {
    case Marker::circle:
      out += "<circle cx=\"" + format("%.1f", x) + "\" cy=\"" + format("%.1f", y) + "\" r=\"4.5\" fill=\"" + colour +
             "\">" + title + "</circle>";
      break;
    case Marker::square:
      out += "<rect x=\"" + format("%.1f", x - 4) + "\" y=\"" + format("%.1f", y - 4) +
             "\" width=\"8\" height=\"8\" fill=\"" + colour + "\">" + title + "</rect>";
      break;
    case Marker::cross:
      out += "<path d=\"M" + format("%.1f", x - 4.5) + " " + format("%.1f", y - 4.5) + "l9 9m0 -9l-9 9\" stroke=\"" +
             colour + "\" stroke-width=\"2.2\" fill=\"none\">" + title + "</path>";
      break;
  }
  if (!point.label.empty()) {
    out += "<text class=\"point\" x=\"" + format("%.1f", x + 6) + "\" y=\"" + format("%.1f", y - 7) + "\">" +
           escape(point.label) + "</text>";
  }
  return out;
}

}  // namespace

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string format(const char* pattern, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, pattern, value);
  return buffer;
}

const std::vector<std::string>& palette() {
  static const std::vector<std::string> colours = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
                                                   "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
  return colours;
}

std::string render_xy_chart(const XyChart& chart) {
  Range xs, ys;
  for (const auto& series : chart.series) {
    for (const auto& point : series.points) {
      if (!plottable(point.x, chart.x.scale) || !plottable(point.y, chart.y.scale)) continue;
      xs.add(transform(point.x, chart.x.scale));
      ys.add(transform(point.y, chart.y.scale));
    }
    for (const auto& [x, y] : series.reference) {
      if (plottable(x, chart.x.scale) && plottable(y, chart.y.scale)) {
        xs.add(transform(x, chart.x.scale));
        ys.add(transform(y, chart.y.scale));
      }
    }
  }
  for (const auto& [x, y] : chart.front) {
    if (plottable(x, chart.x.scale) && plottable(y, chart.y.scale)) {
      xs.add(transform(x, chart.x.scale));
      ys.add(transform(y, chart.y.scale));
    }
  }
  xs.settle();
  ys.settle();
  const double plot_w = chart.width - kMarginLeft - kMarginRight;
  const double plot_h = chart.height - kMarginTop - kMarginBottom;
  const auto px = [&](double value) {
    return kMarginLeft + (transform(value, chart.x.scale) - xs.low) / (xs.high - xs.low) * plot_w;
  };
  const auto py = [&](double value) {
    return kMarginTop + plot_h * (1 - (transform(value, chart.y.scale) - ys.low) / (ys.high - ys.low));
  };

  std::string out = "<svg class=\"chart\" " + size_attributes(chart.width, chart.height) + " role=\"img\"><title>" + escape(chart.title) + "</title>";
  out += "<text class=\"chart-title\" x=\"" + format("%.0f", kMarginLeft) + "\" y=\"16\">" + escape(chart.title) +
         "</text>";
  // Legend row under the title.
  double legend_x = kMarginLeft;
  for (const auto& series : chart.series) {
    out += "<rect x=\"" + format("%.1f", legend_x) + "\" y=\"26\" width=\"10\" height=\"10\" fill=\"" + series.colour +
           "\"/><text x=\"" + format("%.1f", legend_x + 14) + "\" y=\"35\">" + escape(series.name) + "</text>";
    legend_x += 30 + kCharWidth * static_cast<double>(series.name.size());
  }
  if (!chart.front.empty()) {
    out += "<path class=\"front\" d=\"M" + format("%.1f", legend_x) + " 31h18\"/><circle class=\"ring\" cx=\"" +
           format("%.1f", legend_x + 9) + "\" cy=\"31\" r=\"5\"/><text x=\"" + format("%.1f", legend_x + 24) +
           "\" y=\"35\">" + escape(chart.front_label) + "</text>";
  }
  // Frame, grid and ticks.
  out += "<rect class=\"frame\" x=\"" + format("%.0f", kMarginLeft) + "\" y=\"" + format("%.0f", kMarginTop) +
         "\" width=\"" + format("%.1f", plot_w) + "\" height=\"" + format("%.1f", plot_h) + "\"/>";
  const double x_step = chart.x.scale == Scale::linear ? nice_step(xs.high - xs.low, 6) : 1;
  for (double tick : ticks(xs, chart.x.scale)) {
    const double x = kMarginLeft + (tick - xs.low) / (xs.high - xs.low) * plot_w;
    out += "<line class=\"grid\" x1=\"" + format("%.1f", x) + "\" y1=\"" + format("%.0f", kMarginTop) + "\" x2=\"" +
           format("%.1f", x) + "\" y2=\"" + format("%.1f", kMarginTop + plot_h) + "\"/><text class=\"tick\" x=\"" +
           format("%.1f", x) + "\" y=\"" + format("%.1f", kMarginTop + plot_h + 15) + "\" text-anchor=\"middle\">" +
           escape(tick_text(tick, chart.x.scale, x_step) + chart.x.unit) + "</text>";
  }
  const double y_step = chart.y.scale == Scale::linear ? nice_step(ys.high - ys.low, 6) : 1;
  for (double tick : ticks(ys, chart.y.scale)) {
    const double y = kMarginTop + plot_h * (1 - (tick - ys.low) / (ys.high - ys.low));
    out += "<line class=\"grid\" x1=\"" + format("%.0f", kMarginLeft) + "\" y1=\"" + format("%.1f", y) + "\" x2=\"" +
           format("%.1f", kMarginLeft + plot_w) + "\" y2=\"" + format("%.1f", y) + "\"/><text class=\"tick\" x=\"" +
           format("%.0f", kMarginLeft - 6) + "\" y=\"" + format("%.1f", y + 4) + "\" text-anchor=\"end\">" +
           escape(tick_text(tick, chart.y.scale, y_step) + chart.y.unit) + "</text>";
  }
  out += "<text class=\"axis-title\" x=\"" + format("%.1f", kMarginLeft + plot_w / 2) + "\" y=\"" +
         format("%.1f", chart.height - 8) + "\" text-anchor=\"middle\">" + escape(chart.x.title) + "</text>";
  out += "<text class=\"axis-title\" transform=\"translate(14 " + format("%.1f", kMarginTop + plot_h / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" + escape(chart.y.title) + "</text>";
  // The front under the series, then lines, then markers on top.
  if (!chart.front.empty()) {
    std::string path;
    for (const auto& [x, y] : chart.front) {
      if (!plottable(x, chart.x.scale) || !plottable(y, chart.y.scale)) continue;
      path += (path.empty() ? "M" : "L") + format("%.1f", px(x)) + " " + format("%.1f", py(y));
    }
    if (!path.empty()) out += "<path class=\"front\" d=\"" + path + "\"/>";
  }
  for (const auto& series : chart.series) {
    std::string path;
    for (const auto& [x, y] : series.reference) {
      if (!plottable(x, chart.x.scale) || !plottable(y, chart.y.scale)) continue;
      path += (path.empty() ? "M" : "L") + format("%.1f", px(x)) + " " + format("%.1f", py(y));
    }
    if (!path.empty()) out += "<path class=\"reference\" stroke=\"" + series.colour + "\" d=\"" + path + "\"/>";
  }
  for (const auto& series : chart.series) {
    if (!series.line) continue;
    std::string points;
    for (const auto& point : series.points) {
      if (!plottable(point.x, chart.x.scale) || !plottable(point.y, chart.y.scale)) continue;
      points += format("%.1f,", px(point.x)) + format("%.1f ", py(point.y));
    }
    out += "<polyline class=\"series\" stroke=\"" + series.colour + "\" points=\"" + points + "\"/>";
  }
  for (const auto& series : chart.series) {
    for (const auto& point : series.points) {
      if (!plottable(point.x, chart.x.scale) || !plottable(point.y, chart.y.scale)) continue;
      out += marker_svg(point, px(point.x), py(point.y), series.colour);
    }
  }
  return out + "</svg>\n";
}

std::string render_stacked_bars(const StackedBars& bars) {
  constexpr double kLabelWidth = 300, kNoteWidth = 150, kRowHeight = 22, kRowGap = 8, kTop = 44;
  const double plot_w = bars.width - kLabelWidth - kNoteWidth;
  double largest = std::isfinite(bars.marker) ? bars.marker : 0;
  for (const auto& row : bars.rows) {
    double total = 0;
    for (const auto& segment : row.segments) total += std::max(0.0, segment.value);
    largest = std::max(largest, total);
  }
  if (largest <= 0) largest = 1;
  const double step = nice_step(largest, 6);
  const double axis_max = std::ceil(largest * 1.02 / step) * step;
  const auto x_of = [&](double value) { return kLabelWidth + value / axis_max * plot_w; };
  const double height = kTop + static_cast<double>(bars.rows.size()) * (kRowHeight + kRowGap) + 12;
  std::string out = "<svg class=\"bars\" " + size_attributes(bars.width, height) + " role=\"img\"><title>" + escape(bars.title) + "</title>";
  out += "<text class=\"chart-title\" x=\"" + format("%.0f", kLabelWidth) + "\" y=\"16\">" + escape(bars.title) +
         "</text>";
  for (double tick = 0; tick <= axis_max + 1e-9 * step; tick += step) {
    const std::string x = format("%.1f", x_of(tick));
    out += "<line class=\"grid\" x1=\"" + x + "\" y1=\"" + format("%.0f", kTop - 6) + "\" x2=\"" + x + "\" y2=\"" +
           format("%.0f", height - 8) + "\"/><text class=\"tick\" x=\"" + x + "\" y=\"" + format("%.0f", kTop - 10) +
           "\" text-anchor=\"middle\">" + tick_text(tick, Scale::linear, step) + " " + escape(bars.unit) + "</text>";
  }
  for (std::size_t i = 0; i < bars.rows.size(); ++i) {
    const BarRow& row = bars.rows[i];
    const double y = kTop + static_cast<double>(i) * (kRowHeight + kRowGap);
    out += "<text class=\"label\" x=\"" + format("%.0f", kLabelWidth - 8) + "\" y=\"" +
           format("%.1f", y + kRowHeight - 6) + "\" text-anchor=\"end\">" + escape(row.label) + "</text>";
    double at = 0;
    for (const auto& segment : row.segments) {
      if (segment.value <= 0) continue;
      out += "<rect x=\"" + format("%.2f", x_of(at)) + "\" y=\"" + format("%.1f", y) + "\" width=\"" +
             format("%.2f", std::max(0.5, x_of(at + segment.value) - x_of(at))) + "\" height=\"" +
             format("%.0f", kRowHeight) + "\" fill=\"" + segment.colour + "\"><title>" + escape(segment.name) + ": " +
             format("%.2f ", segment.value) + escape(bars.unit) + "</title></rect>";
      at += segment.value;
    }
    out += "<text class=\"note\" x=\"" + format("%.1f", x_of(at) + 6) + "\" y=\"" +
           format("%.1f", y + kRowHeight - 6) + "\">" + format("%.2f ", at) + escape(bars.unit) +
           (row.note.empty() ? "" : ", " + escape(row.note)) + "</text>";
  }
  if (std::isfinite(bars.marker)) {
    const std::string x = format("%.1f", x_of(bars.marker));
    out += "<line class=\"cap\" x1=\"" + x + "\" y1=\"" + format("%.0f", kTop - 4) + "\" x2=\"" + x + "\" y2=\"" +
           format("%.0f", height - 6) + "\"/><text class=\"cap-label\" x=\"" + x + "\" y=\"" +
           format("%.0f", height - 1) + "\" text-anchor=\"middle\">" + escape(bars.marker_label) + "</text>";
  }
  return out + "</svg>\n";
}

std::string render_grid(const Grid& grid) {
  constexpr double kRowLabel = 130, kCellW = 70, kCellH = 26, kTop = 46;
  const double width = std::max(kRowLabel + kCellW * static_cast<double>(grid.column_labels.size()) + 20,
                                kRowLabel + 7.2 * static_cast<double>(grid.title.size()) + 20);  // the bold title fits
  const double height = kTop + kCellH * static_cast<double>(grid.row_labels.size()) + 10;
  std::string out = "<svg class=\"grid-chart\" " + size_attributes(width, height) + " role=\"img\"><title>" + escape(grid.title) + "</title>";
  out += "<text class=\"chart-title\" x=\"" + format("%.0f", kRowLabel) + "\" y=\"16\">" + escape(grid.title) +
         "</text>";
  for (std::size_t c = 0; c < grid.column_labels.size(); ++c) {
    out += "<text class=\"tick\" x=\"" + format("%.1f", kRowLabel + kCellW * (static_cast<double>(c) + 0.5)) +
           "\" y=\"" + format("%.0f", kTop - 8) + "\" text-anchor=\"middle\">" + escape(grid.column_labels[c]) +
           "</text>";
  }
  for (std::size_t r = 0; r < grid.row_labels.size(); ++r) {
    const double y = kTop + kCellH * static_cast<double>(r);
    out += "<text class=\"label\" x=\"" + format("%.0f", kRowLabel - 8) + "\" y=\"" + format("%.1f", y + 17) +
           "\" text-anchor=\"end\">" + escape(grid.row_labels[r]) + "</text>";
    for (std::size_t c = 0; c < grid.column_labels.size(); ++c) {
      if (r >= grid.cells.size() || c >= grid.cells[r].size()) continue;
      const GridCell& cell = grid.cells[r][c];
      const double x = kRowLabel + kCellW * static_cast<double>(c);
      out += "<rect class=\"cell\" x=\"" + format("%.1f", x + 1) + "\" y=\"" + format("%.1f", y + 1) + "\" width=\"" +
             format("%.0f", kCellW - 2) + "\" height=\"" + format("%.0f", kCellH - 2) + "\" fill=\"" + cell.colour +
             "\"><title>" + escape(cell.tooltip) + "</title></rect><text class=\"cell-text\" x=\"" +
             format("%.1f", x + kCellW / 2) + "\" y=\"" + format("%.1f", y + 17) + "\" text-anchor=\"middle\">" +
             escape(cell.text) + "</text>";
    }
  }
  return out + "</svg>\n";
}

std::string legend(const std::vector<std::pair<std::string, std::string>>& colour_and_name) {
  std::string out = "<div class=\"legend\">";
  for (const auto& [colour, name] : colour_and_name) {
    out += "<span><i class=\"swatch\" style=\"background:" + colour + "\"></i>" + escape(name) + "</span>";
  }
  return out + "</div>\n";
}

std::string size_attributes(double width, double height) {
  return "width=\"" + format("%.0f", width) + "\" height=\"" + format("%.0f", height) + "\" viewBox=\"0 0 " +
         format("%.0f", width) + " " + format("%.0f", height) + "\"";
}

const char* chart_style() {
  return R"(svg{display:block;margin:8px 0;max-width:100%;height:auto}svg text{font-size:11px;fill:#333}.chart-title{font-size:13px;font-weight:600}
.axis-title{font-size:12px}.grid{stroke:#e3e3e3;stroke-width:1}.frame{fill:none;stroke:#bbb}
.series{fill:none;stroke-width:1.6}.reference{fill:none;stroke-width:1;stroke-dasharray:3 3;opacity:.7}.front{fill:none;stroke:#222;stroke-width:1.4;stroke-dasharray:5 4}
.ring{fill:none;stroke:#222;stroke-width:1.6}.point{font-size:10px;fill:#555}
.cap{stroke:#c00;stroke-width:1.5;stroke-dasharray:6 3}.cap-label{fill:#c00}.cell-text{font-size:11px;fill:#111}
)";
}

std::string html_page(const std::string& title, const std::string& body) {
  static constexpr const char* kStyle = R"(body{font-family:system-ui,sans-serif;margin:24px;color:#222}
h1{font-size:22px}h2{font-size:17px;margin-top:28px}p.note,.note{color:#555;font-size:13px}
table.summary{border-collapse:collapse}table.summary td,table.summary th{border:1px solid #ccc;padding:4px 10px;text-align:left}
table.summary th{background:#f4f4f4;font-weight:600}
.legend span{display:inline-block;margin-right:14px;font-size:12px}.swatch{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:middle}
)";
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" + escape(title) +
         "</title>\n<style>\n" + kStyle + chart_style() + "</style>\n</head>\n<body>\n<h1>" + escape(title) + "</h1>\n" + body +
         "</body>\n</html>\n";
}

}  // namespace shardplan::svg
