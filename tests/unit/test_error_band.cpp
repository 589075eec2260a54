// Tests of the error-band lookup (Note [Error bands]): the group for a known GPU and run kind, the GPU class's and
// the overall fallbacks, the headroom it gives, and its text and JSON.
#include <doctest/doctest.h>

#include <optional>

#include "error_band.h"

using namespace shardplan;

namespace {

// The committed group (error_band_data.cpp), so these tests follow the figures error_bands.py writes.
ErrorBandGroup group(ErrorMetric metric, const std::string& gpu_class, const std::string& run_kind) {
  for (const ErrorBandGroup& candidate : published_error_band_groups()) {
    if (candidate.metric == metric && candidate.gpu_class == gpu_class && candidate.run_kind == run_kind) {
      return candidate;
    }
  }
  FAIL("no group " << gpu_class << " / " << run_kind);
  return {};
}

}  // namespace

TEST_CASE("error band: a known GPU and run kind gets its own group's median |error| and run count") {
  const ErrorBandGroup h100_multi = group(ErrorMetric::step_time, "H100", "multi-node pre-training");
  REQUIRE(h100_multi.runs >= kMinBandRuns);
  // Both H100 names the published runs use fall in the class; 2 nodes is multi-node.
  for (const std::string gpu : {"H100-80GB", "H100-96GB"}) {
    CAPTURE(gpu);
    const ErrorBand band = error_bands_for(gpu, {2, false}).step_time;
    CHECK(band.relative_error == h100_multi.median_abs_error);
    CHECK(band.largest_underestimate == h100_multi.largest_underestimate);
    CHECK(band.runs == h100_multi.runs);
    CHECK(band.group_label == "on H100, multi-node pre-training");
    CHECK_FALSE(band.overall);
  }
  const ErrorBandGroup a100_single = group(ErrorMetric::step_time, "A100", "single-node pre-training");
  const ErrorBand a100 = error_bands_for("A100-40GB", {1, false}).step_time;
  CHECK(a100.relative_error == a100_single.median_abs_error);
  CHECK(a100.group_label == "on A100, single-node pre-training");
  // The A100 groups differ from the H100 ones: the band depends on the GPU.
  CHECK(a100.runs != h100_multi.runs);
}

TEST_CASE("error band: too few runs in the group fall back to the GPU class, then to the overall band, said so") {
  // Memory is published on fewer than kMinBandRuns single-node H100 runs (t01–t03): the class over all kinds stands in.
  const ErrorBandGroup single = group(ErrorMetric::memory, "H100", "single-node pre-training");
  REQUIRE(single.runs < kMinBandRuns);
  const ErrorBandGroup h100 = group(ErrorMetric::memory, "H100", "");
  const ErrorBand memory = error_bands_for("H100-80GB", {1, false}).memory;
  CHECK(memory.runs == h100.runs);
  CHECK(memory.relative_error == h100.median_abs_error);
  CHECK(memory.group_label ==
        "on H100, all run kinds — only " + std::to_string(single.runs) + " single-node pre-training");
  CHECK_FALSE(memory.overall);
  // No A100 run publishes memory: the overall band.
  const ErrorBandGroup all_memory = group(ErrorMetric::memory, "", "");
  const ErrorBand a100 = error_bands_for("A100-80GB", {4, false}).memory;
  CHECK(a100.overall);
  CHECK(a100.runs == all_memory.runs);
  CHECK(a100.group_label == "the overall band — none on A100");
  // A GPU with no published run at all (and a name that only looks like a class member): the overall band.
  const ErrorBandGroup all_steps = group(ErrorMetric::step_time, "", "");
  for (const std::string gpu : {"RTX4090", "H100-NVL", "H200-141GB"}) {
    CAPTURE(gpu);
    const ErrorBand band = error_bands_for(gpu, {1, false}).step_time;
    CHECK(band.overall);
    CHECK(band.runs == all_steps.runs);
    CHECK(band.relative_error == all_steps.median_abs_error);
    CHECK(band.group_label == "the overall band — none on " + gpu);
  }
  // No published run is LoRA/QLoRA fine-tuning: the class's band over the pre-training kinds, said so.
  const ErrorBand lora = error_bands_for("A100-80GB", {1, true}).step_time;
  CHECK(lora.runs == group(ErrorMetric::step_time, "A100", "").runs);
  CHECK(lora.group_label == "on A100, all run kinds — none single-node fine-tuning");
}

TEST_CASE("error band: the memory headroom's default is the memory band's largest underestimate, rounded up") {
  CHECK(memory_headroom_percent(ErrorBand{0.006, 0.0213, 7, "", false}) == 3);
  CHECK(memory_headroom_percent(ErrorBand{0.006, 0.0200, 7, "", false}) == 2);  // a whole percent stays
  CHECK(memory_headroom_percent(ErrorBand{0.006, 0.0201, 7, "", false}) == 3);
  CHECK(memory_headroom_percent(ErrorBand{0.006, 0, 7, "", false}) == 0);  // never underestimated
  // Today every GPU's memory band holds t07's 2.1 % underestimate: 3 %, the default before the bands.
  for (const std::string gpu : {"H100-80GB", "A100-40GB", "RTX4090"}) {
    CAPTURE(gpu);
    CHECK(memory_headroom_percent(error_bands_for(gpu, {1, false}).memory) == 3);
  }
}

TEST_CASE("error band: text and JSON carry the band, its runs and its group") {
  const ErrorBand band{0.1138, 0.2055, 13, "on H100, multi-node pre-training", false};
  CHECK(describe(band) == "typically ±11.4 %, from 13 published runs on H100, multi-node pre-training");
  const ErrorBand overall{0.0982, 0.3489, 68, "the overall band — none on RTX4090", true};
  CHECK(describe(overall) == "typically ±9.8 %, from 68 published runs, the overall band — none on RTX4090");
  const nlohmann::json document = to_json(PredictionErrorBands{band, overall});
  CHECK(document.at("step_time").at("relative_error") == 0.1138);
  CHECK(document.at("step_time").at("runs") == 13);
  CHECK(document.at("step_time").at("group") == "on H100, multi-node pre-training");
  CHECK(document.at("step_time").at("overall") == false);
  CHECK(document.at("memory").at("overall") == true);
  CHECK(document.at("memory").at("largest_underestimate") == 0.3489);
  CHECK(document.at("min_runs_per_group") == kMinBandRuns);
}

TEST_CASE("error band: the committed groups add up: each class's kinds to the class, the classes to the whole set") {
  for (const ErrorMetric metric : {ErrorMetric::step_time, ErrorMetric::memory}) {
    int classes = 0;
    for (const ErrorBandGroup& whole : published_error_band_groups()) {
      if (whole.metric != metric || whole.gpu_class.empty() || !whole.run_kind.empty()) continue;
      classes += whole.runs;
      int kinds = 0;
      for (const ErrorBandGroup& part : published_error_band_groups()) {
        if (part.metric == metric && part.gpu_class == whole.gpu_class && !part.run_kind.empty()) kinds += part.runs;
      }
      CAPTURE(whole.gpu_class);
      CHECK(kinds == whole.runs);
    }
    CHECK(classes == group(metric, "", "").runs);
  }
}
