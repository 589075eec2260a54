// Tests of calibration samples from timelines (planner/calibration_samples.h): the gaps between compute ops give the
// collective issue overhead back, and gaps where the runner waited for a collective are left out.
#include <doctest/doctest.h>

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
