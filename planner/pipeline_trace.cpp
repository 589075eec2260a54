// Chrome trace and HTML report of a pipeline step (Note [Pipeline trace] in pipeline_trace.h).
#include "pipeline_trace.h"

#include <cmath>

#include "errors.h"
#include "html_report.h"
#include "svg_chart.h"

namespace shardplan {

ChromeTraceExtras pipeline_trace_extras(const PipelineStepAnalysis& analysis) {
  SHARDPLAN_CHECK(!analysis.simulation.timeline.events.empty(), "a pipeline trace needs the step's timeline");
  ChromeTraceExtras extras;
  for (const PipelineRankSummary& rank : analysis.simulation.ranks) {
    std::string stages;
    for (int stage : rank.stages) stages += (stages.empty() ? "" : ", ") + std::to_string(stage);
    extras.process_names[rank.rank] = "pipeline rank " + std::to_string(rank.rank) + " (stage" +
                                      (rank.stages.size() == 1 ? " " : "s ") + stages + ")";
  }
  for (const PipelineSchedule::CrossDependency& dependency : analysis.schedule.cross_dependencies) {
    extras.flows.push_back({dependency.on_program, dependency.on_op, dependency.program, dependency.op});
  }
  return extras;
}

nlohmann::json pipeline_chrome_trace(const PipelineStepAnalysis& analysis) {
  return to_chrome_trace(analysis.simulation.timeline, pipeline_trace_extras(analysis));
}

std::string render_pipeline_report(const PipelineStepAnalysis& analysis, const MemoryHeadroom& headroom,
                                   const std::string& title) {
  const PipelineSimulation& simulation = analysis.simulation;
  const PipelineOrder& order = analysis.schedule.order;
  ReportInput report;
  report.title = title;
  report.timeline = &simulation.timeline;
  report.summary = {
      {"pipeline", std::string(to_string(order.kind)) + ", " + std::to_string(order.ranks) + " ranks x " +
                       std::to_string(order.stages_per_rank) + " stages each, " +
                       std::to_string(order.micro_batches) + " micro-batches"},
      {"step time", svg::format("%.4f s", simulation.step_time_s)},
      {"tokens/s", std::to_string(std::llround(simulation.tokens_per_s))},
      {"MFU", svg::format("%.1f %%", 100 * simulation.mfu)},
      {"mean bubble", svg::format("%.1f %%", 100 * simulation.bubble_fraction)},
      {"memory", headroom.describe() + " kept free on each rank's device peak"},
  };
  report.sections.push_back("<h2>Pipeline ranks</h2>\n<p class=\"note\">The timeline below has one group of lanes "
                            "per pipeline rank (\"rank r\"), standing for the data-parallel ranks of its stages."
                            "</p>\n<pre>" +
                            svg::escape(render_pipeline_text(analysis, headroom)) + "</pre>\n");
  return render_html_report(report);
}

std::vector<OutputFile> pipeline_output_files(const PipelineStepAnalysis& analysis, const MemoryHeadroom& headroom,
                                              const std::string& title, const std::string& trace_path,
                                              const std::string& report_path) {
  std::vector<OutputFile> outputs;
  if (!trace_path.empty()) {
    // Invalid UTF-8 in op names replaced, as write_chrome_trace does: the trace is a report.
    outputs.push_back({trace_path, pipeline_chrome_trace(analysis).dump(-1, ' ', false,
                                                                        nlohmann::json::error_handler_t::replace)});
  }
  if (!report_path.empty()) outputs.push_back({report_path, render_pipeline_report(analysis, headroom, title)});
  return outputs;
}

}  // namespace shardplan
