// The calibration as JSON (to_json in calibration.h): its fits, the samples behind them and their residuals.
#include <string>
#include <utility>
#include <vector>

#include "calibration.h"
#include "compute_cost.h"
#include "least_squares.h"

namespace shardplan {

namespace {

nlohmann::json link_json(const LinkFit& fit) {
  return {{"latency_s", fit.latency_s},
          {"bus_bytes_per_s", fit.bus_bytes_per_s},
          {"overlap_slowdown", fit.overlap_slowdown},
          {"rms_relative_residual", fit.rms_relative_residual},
          {"max_relative_residual", fit.max_relative_residual},
          {"samples", fit.samples}};
}

nlohmann::json rate_json(const RateFit& fit, bool compute) {
  nlohmann::json document = {{"per_s", fit.per_s},
                             {"rms_relative_residual", fit.rms_relative_residual},
                             {"max_relative_residual", fit.max_relative_residual},
                             {"samples", fit.samples}};
  if (compute) document["half_efficiency_flops"] = fit.half_efficiency_flops;
  if (fit.attention_per_s > 0) document["attention_per_s"] = fit.attention_per_s;
  if (fit.memory_per_s > 0) document["memory_bytes_per_s"] = fit.memory_per_s;
  if (fit.overlap_fitted) document["overlap_slowdown"] = fit.overlap_slowdown;
  return document;
}

nlohmann::json collective_samples_json(const Calibration& calibration) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto* tier : {&calibration.samples.intra_node, &calibration.samples.inter_node}) {
    for (const CollectiveSample& sample : *tier) {
      nlohmann::json row = {{"collective", to_string(sample.kind)},
                            {"ranks", sample.ranks},
                            {"spans_nodes", sample.spans_nodes},
                            {"bytes", sample.message_bytes},
                            {"time_s", sample.time_s},
                            {"compute_overlap_s", sample.compute_overlap_s},
                            // nccl-tests doc/PERFORMANCE.md: algbw = S / t, busbw = algbw × bus_factor(n).
                            {"algbw_bytes_per_s", algorithm_bandwidth(sample.message_bytes, sample.time_s)},
                            {"busbw_bytes_per_s",
                             sample.ranks > 1 ? bus_bandwidth(sample.kind, sample.message_bytes, sample.time_s,
                                                              sample.ranks)
                                              : 0.0}};
      if (const CollectiveFit* fit = find_collective_fit(calibration.collectives, sample)) {
        const double predicted_s = predicted_time_s(fit->fit, sample);
        row["predicted_s"] = predicted_s;
        row["relative_residual"] = relative_residual(predicted_s, sample.time_s);
      }
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

nlohmann::json compute_samples_json(const std::vector<ComputeSample>& samples, const RateFit& fit,
                                    const HardwareProfile& profile) {
  nlohmann::json rows = nlohmann::json::array();
  for (const ComputeSample& sample : samples) {
    nlohmann::json row = {{"name", sample.name}, {"flops", sample.flops}, {"time_s", sample.time_s}};
    if (sample.overlap_s > 0) row["overlap_s"] = sample.overlap_s;
    if (sample.zeroed_bytes > 0) row["zeroed_bytes"] = sample.zeroed_bytes;
    if (sample.memory_bytes > 0) row["memory_bytes"] = sample.memory_bytes;
    row["gemms"] = sample.gemm_count;
    if (sample.attention_flops > 0) row["attention_flops"] = sample.attention_flops;
    if (sample.flops > 0 && sample.time_s > 0 && fit.samples > 0) {
      const double predicted_s = predicted_compute_s(fit, sample) + buffer_fill_time_s(sample.zeroed_bytes, profile);
      row["flops_per_s"] = sample.flops / sample.time_s;
      row["predicted_s"] = predicted_s;
      row["relative_residual"] = relative_residual(predicted_s, sample.time_s);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

nlohmann::json memory_samples_json(const std::vector<MemorySample1D>& samples, const RateFit& fit) {
  nlohmann::json rows = nlohmann::json::array();
  for (const MemorySample1D& sample : samples) {
    nlohmann::json row = {{"name", sample.name}, {"bytes", sample.bytes}, {"time_s", sample.time_s}};
    if (sample.bytes > 0 && sample.time_s > 0 && fit.samples > 0) {
      const double predicted_s = predicted_time_s(fit, sample.bytes);
      row["bytes_per_s"] = sample.bytes / sample.time_s;
      row["predicted_s"] = predicted_s;
      row["relative_residual"] = relative_residual(predicted_s, sample.time_s);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

nlohmann::json issue_samples_json(const std::vector<IssueGapSample>& samples) {
  nlohmann::json rows = nlohmann::json::array();
  for (const IssueGapSample& sample : samples) {
    rows.push_back({{"collectives_issued", sample.collectives_issued}, {"gap_s", sample.gap_s}});
  }
  return rows;
}

}  // namespace

nlohmann::json to_json(const Calibration& calibration, const MachineInfo& machine, const std::string& date) {
  nlohmann::json document = to_json(calibration.profile);
  nlohmann::json collectives = nlohmann::json::array();
  for (const CollectiveFit& cell : calibration.collectives) {
    nlohmann::json row = {{"collective", to_string(cell.kind)}, {"ranks", cell.ranks},
                          {"spans_nodes", cell.spans_nodes}};
    row.update(link_json(cell.fit));
    collectives.push_back(std::move(row));
  }
  document["fits"] = {{"intra_node", link_json(calibration.intra_node)},
                      {"inter_node", link_json(calibration.inter_node)},
                      {"collectives", std::move(collectives)},
                      {"compute", rate_json(calibration.compute, true)},
                      {"gemm", rate_json(calibration.gemm, true)},
                      {"memory", rate_json(calibration.memory, false)},
                      {"collective_issue",
                       {{"per_collective_s", calibration.issue.per_collective_s},
                        {"per_gap_s", calibration.issue.per_gap_s},
                        {"rms_residual_s", calibration.issue.rms_residual_s},
                        {"samples", calibration.issue.samples},
                        {"fitted", calibration.issue.fitted}}}};
  document["samples"] = {{"collectives", collective_samples_json(calibration)},
                         {"compute", compute_samples_json(calibration.samples.compute, calibration.compute,
                                                          calibration.profile)},
                         {"gemm", compute_samples_json(calibration.samples.gemm, calibration.gemm, calibration.profile)},
                         {"memory", memory_samples_json(calibration.samples.memory, calibration.memory)},
                         {"issue_gaps", issue_samples_json(calibration.samples.issue_gaps)}};
  document["machine"] = {{"host", machine.host}, {"cpu", machine.cpu}, {"nodes", machine.nodes},
                         {"ranks", machine.ranks}};
  document["date"] = date;
  return document;
}

}  // namespace shardplan
