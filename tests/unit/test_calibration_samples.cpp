// Tests of calibration samples from timelines (planner/calibration_samples.h): the gaps between compute ops give the
// collective issue overhead back, and gaps where the runner waited for a collective are left out; collectives count
// from their group's last issue.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "calibration_samples.h"
#include "cluster.h"
#include "hardware_catalog.h"
#include "lowering.h"
#include "model_presets.h"
#include "plan_json.h"
#include "simulator.h"

using namespace shardplan;

TEST_CASE("calibration samples: the simulator's own timeline gives its collective issue overhead back") {
  const ModelSpec model = preset_model("tiny-llama");
  const Cluster cluster = parse_cluster("2xcpu", HardwareCatalog::builtin());
  const Plan plan = read_plan_file("examples/plans/tiny-llama-per-block.json", model);
  HardwareProfile profile = profile_from_cluster(cluster);
  profile.collective_issue_overhead_s = 2e-4;
  const StepSchedule schedule = lower_plan(plan, model, {cluster.world_size(), cluster.gpus_per_node, 0});
  Timeline measured = simulate(schedule, profile, true).timeline;
  measured.source = "measured";  // as if the executor had run exactly the simulated step

  CalibrationSamples samples;
  add_calibration_samples(measured, model, plan, cluster, profile, samples);
  REQUIRE_FALSE(samples.issue_gaps.empty());
  int issuing = 0;
  for (const IssueGapSample& gap : samples.issue_gaps) {
    issuing += gap.collectives_issued > 0;
    // Only gaps without waiting are kept: exactly the issue time of the collectives issued there.
    CHECK(gap.gap_s == doctest::Approx(gap.collectives_issued * 2e-4).epsilon(1e-9));
  }
  CHECK(issuing > 0);
  // The catalog CPU profile exposes some collectives (the first all-gather, the last reduction before the
  // optimizer step): those gaps were waits and are not samples.
  std::size_t compute_ops = 0;
  for (const Op& op : schedule.ops) compute_ops += op.stream == StreamKind::compute;
  CHECK(samples.issue_gaps.size() < compute_ops - 1);
  const IssueFit fit = fit_issue_overhead(samples.issue_gaps);
  REQUIRE(fit.fitted);
  CHECK(fit.per_collective_s == doctest::Approx(2e-4).epsilon(1e-6));
  CHECK(fit.per_gap_s == doctest::Approx(0.0).epsilon(1e-9));
}

TEST_CASE("calibration samples: a collective counts from its group's last issue, not from a rank's own early one") {
  // Rank 1 issues every collective 1 ms before rank 0 and so waits that long inside it (Note [Collective from the last
  // issue]); the samples must be the collectives' own times, as the simulator (every rank alike) charges them.
  const ModelSpec model = preset_model("tiny-llama");
  const Cluster cluster = parse_cluster("2xcpu", HardwareCatalog::builtin());
  const Plan plan = read_plan_file("examples/plans/tiny-llama-per-block.json", model);
  const HardwareProfile profile = profile_from_cluster(cluster);
  const StepSchedule schedule = lower_plan(plan, model, {cluster.world_size(), cluster.gpus_per_node, 0});
  const Timeline simulated = simulate(schedule, profile, true).timeline;
  Timeline measured = simulated;
  measured.source = "measured";
  std::vector<double> own_times_s;
  for (const TimelineEvent& event : simulated.events) {
    REQUIRE(event.rank == 0);
    TimelineEvent early = event;
    early.rank = 1;
    if (is_collective(schedule.ops[static_cast<std::size_t>(event.op_id)].kind)) {
      early.start_s -= 1e-3;
      own_times_s.push_back(event.duration_s());
      own_times_s.push_back(event.duration_s());
    }
    measured.events.push_back(early);
  }
  REQUIRE_FALSE(own_times_s.empty());
  CalibrationSamples samples;
  add_calibration_samples(measured, model, plan, cluster, profile, samples);
  std::vector<double> sample_times_s;
  for (const CollectiveSample& sample : samples.intra_node) sample_times_s.push_back(sample.time_s);
  std::sort(own_times_s.begin(), own_times_s.end());
  std::sort(sample_times_s.begin(), sample_times_s.end());
  REQUIRE(sample_times_s.size() == own_times_s.size());
  for (std::size_t i = 0; i < own_times_s.size(); ++i) CHECK(sample_times_s[i] == doctest::Approx(own_times_s[i]));
}
