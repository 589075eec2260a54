// simulate_pipeline: a PipelineSchedule's programs timed together — each rank's streams as the simulator walks them,
// each recv waiting for its send in the other program — and each rank's memory, compute and bubble.
#pragma once

#include <cstdint>
#include <vector>

#include "hardware_profile.h"
#include "pipeline_schedule.h"
#include "timeline.h"

namespace shardplan {

struct PipelineRankSummary {
  int rank = 0;
  std::vector<int> stages;        // the global stages it holds
  double compute_busy_s = 0;      // its compute stream's work
  double p2p_busy_s = 0;          // its sends
  double bubble_fraction = 0;     // 1 − compute_busy_s / the step's time: idle waiting on other stages (and exposed
                                  // FSDP communication)
  std::int64_t peak_memory_bytes = 0;
  std::int64_t device_peak_bytes = 0;
  MemoryByCategory memory_at_peak{};     // peak_memory_bytes by category, at the rank's peak
  int peak_in_flight_micro_batches = 0;  // forwarded, not yet backwarded, at once
};

struct PipelineSimulation {
  double step_time_s = 0;  // the last op of any program
  std::vector<PipelineRankSummary> ranks;
  double bubble_fraction = 0;  // mean over ranks
  std::int64_t tokens_per_step = 0;
  double tokens_per_s = 0;
  double mfu = 0;  // model FLOPs of every stage over step_time × pp ranks' peak
  // Empty unless asked for: every program's placed ops and memory samples, TimelineEvent::rank (and
  // MemorySample::rank) the pipeline rank, op_id the op's id in its program (Note [Pipeline trace]).
  Timeline timeline;
};

// Note [Pipeline placement]: each program is walked in its own op order with its own streams (OpWalk, as simulate
// does); a recv is placed once its send has been, at or after the send's end. The walk goes round the programs,
// each as far as its next unplaced cross dependency; a round that places nothing while ops remain is a deadlock in
// the orders (an InternalError: pipeline_order's replay check rules it out for the orders it builds). The overlap
// slowdown of collectives beside compute (Note [Collective slowdown]) is not iterated here: one pass, as simulate
// does when the slowdown is 1 (the catalog's).
PipelineSimulation simulate_pipeline(const PipelineSchedule& pipeline, const HardwareProfile& profile,
                                     bool record_timeline = false);

}  // namespace shardplan
