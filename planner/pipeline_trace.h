// A pipeline plan's simulated step as a Chrome trace and an HTML report: one process per pipeline rank, the
// send→recv pairs drawn as flow arrows.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chrome_trace.h"
#include "memory_headroom.h"
#include "output_files.h"
#include "step_analysis.h"

namespace shardplan {

// Note [Pipeline trace]: the programs of a pipeline step (Note [Pipeline programs]) share one Timeline, each
// program's ops and memory samples under its pipeline rank (simulate_pipeline with record_timeline). In the trace
// a pipeline rank is a process named "pipeline rank r (stages s, ...)", its streams its threads, and each cross
// dependency (a recv waiting for another program's send) a flow arrow from the send to the recv. A pipeline rank
// stands for all the data-parallel ranks of its stages, as "rank 0" does for a whole FSDP world in simulate's trace.
// `analysis` needs its timeline (analyze_pipeline_step with record_timeline).
ChromeTraceExtras pipeline_trace_extras(const PipelineStepAnalysis& analysis);
nlohmann::json pipeline_chrome_trace(const PipelineStepAnalysis& analysis);

// The HTML report: the step's summary, render_pipeline_text's per-rank table, and the timeline lanes of every rank.
std::string render_pipeline_report(const PipelineStepAnalysis& analysis, const MemoryHeadroom& headroom,
                                   const std::string& title);

// The trace and report to write (Note [Output files]); an empty path skips that file.
std::vector<OutputFile> pipeline_output_files(const PipelineStepAnalysis& analysis, const MemoryHeadroom& headroom,
                                              const std::string& title, const std::string& trace_path,
                                              const std::string& report_path);

}  // namespace shardplan
