// A self-contained HTML report (no network): SVG timeline of the streams, stacked memory-over-time plot, summary table.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "timeline.h"

namespace shardplan {

struct ReportSummaryRow {
  std::string name;   // "step time"
  std::string value;  // "1.234 s"
};

struct ReportInput {
  std::string title;
  const Timeline* timeline = nullptr;           // required
  const Timeline* overlay = nullptr;            // optional second timeline (e.g. measured over predicted)
  std::vector<ReportSummaryRow> summary;
  // HTML (headings, SVG) placed between the summary and the timeline: a caller's own charts (plan_report.cpp).
  std::vector<std::string> sections;
};

// Returns the whole HTML document as one string: inline CSS and SVG only, no scripts or links that fetch anything.
std::string render_html_report(const ReportInput& input);

}  // namespace shardplan
