// Self-contained SVG charts for the HTML reports: XY plots (linear, log10 or log2 axes), horizontal stacked bars, a
// categorical grid, and the escaping, legend and page frame they share. No scripts, fonts or links: a file opens offline.
#pragma once

#include <cmath>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardplan::svg {

// Text safe inside HTML and SVG elements and attributes.
std::string escape(std::string_view text);
// printf-style formatting of one number ("%.2f"), for coordinates and labels.
std::string format(const char* pattern, double value);

enum class Scale { linear, log10, log2 };

struct Axis {
  std::string title;
  Scale scale = Scale::linear;
  std::string unit;  // appended to tick labels ("GiB"), may be empty
};

enum class Marker { circle, square, cross };

struct XyPoint {
  double x = 0;
  double y = 0;
  std::string label;    // drawn beside the point (may be empty)
  std::string tooltip;  // <title> of the marker
  bool highlight = false;  // drawn with a ring around it (e.g. on the Pareto front)
  Marker marker = Marker::circle;
};

struct XySeries {
  std::string name;
  std::string colour;  // "#4e79a7"
  std::vector<XyPoint> points;
  bool line = false;  // connect the points in order
  // A thin dashed line in the series' colour through these points (e.g. ideal linear scaling), under the points.
  std::vector<std::pair<double, double>> reference;
};

struct XyChart {
  std::string title;
  Axis x, y;
  std::vector<XySeries> series;
  // A dashed step line through these points, in order (the Pareto front), labelled in the legend.
  std::vector<std::pair<double, double>> front;
  std::string front_label;
  double width = 760;
  double height = 420;
};

// The chart as one <svg> element; points with non-positive coordinates on a log axis are left out. Axis ranges span
// the points (and the front), padded by a little so no marker sits on a frame line.
std::string render_xy_chart(const XyChart& chart);

struct BarSegment {
  std::string name;    // the category, shown in the tooltip
  double value = 0;    // in the chart's unit
  std::string colour;
};

struct BarRow {
  std::string label;  // left of the bar
  std::vector<BarSegment> segments;
  std::string note;   // right of the bar ("fits", "over the cap")
};

struct StackedBars {
  std::string title;
  std::string unit;  // "GiB"
  std::vector<BarRow> rows;
  double marker = NAN;      // a vertical line at this value (the memory cap), NaN for none
  std::string marker_label;
  double width = 1100;
};

std::string render_stacked_bars(const StackedBars& bars);

// A grid of labelled cells: rows × columns, each cell coloured by its class, with short text inside.
struct GridCell {
  std::string text;     // "71%", "-"
  std::string colour;
  std::string tooltip;
};

struct Grid {
  std::string title;
  std::vector<std::string> row_labels;
  std::vector<std::string> column_labels;
  std::vector<std::vector<GridCell>> cells;  // [row][column]; a missing cell is drawn empty
};

std::string render_grid(const Grid& grid);

// A row of colour swatches with names (HTML).
std::string legend(const std::vector<std::pair<std::string, std::string>>& colour_and_name);

// width="W" height="H" viewBox="0 0 W H": with chart_style's max-width:100%, a chart wider than the window scales
// down to fit (issue 36: reports 1,320-1,350 px wide were clipped in a 1,280 px window) instead of being cut off.
std::string size_attributes(double width, double height);

// The style rules the charts' classes need (html_page includes them; a page of its own adds them to its style).
const char* chart_style();

// A whole HTML document: the reports' shared style, `title` as <h1>, then `body`.
std::string html_page(const std::string& title, const std::string& body);

// The shared category colours (Tableau 10), in order, for series that have no fixed colour.
const std::vector<std::string>& palette();

}  // namespace shardplan::svg
