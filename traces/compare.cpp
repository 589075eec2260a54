// Comparison of predicted and measured timelines: totals per op kind and stream, step time, peak memory, worst ops.
#include "compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "errors.h"

namespace shardplan {
namespace {

double relative(double predicted, double measured) {
  if (measured == 0) return predicted == 0 ? 0.0 : INFINITY;
  return (predicted - measured) / measured;
}

double span_of(const Timeline& timeline, int rank) {
  double first = INFINITY, last = -INFINITY;
  for (const auto& event : timeline.events) {
    if (event.rank != rank) continue;
    first = std::min(first, event.start_s);
    last = std::max(last, event.end_s);
  }
  return last > first ? last - first : 0.0;
}

std::vector<ComparisonRow> rows(const std::map<std::string, ComparisonRow>& table) {
  std::vector<ComparisonRow> result;
  for (const auto& [name, row] : table) result.push_back(row);
  std::sort(result.begin(), result.end(), [](const auto& a, const auto& b) { return a.measured_s > b.measured_s; });
  return result;
}

}  // namespace

double ComparisonRow::relative_error() const { return relative(predicted_s, measured_s); }
double Comparison::step_relative_error() const { return relative(predicted_step_s, measured_step_s); }
double Comparison::peak_relative_error() const {
  return relative(static_cast<double>(predicted_peak_bytes), static_cast<double>(measured_peak_bytes));
}

TraceMatch match_traces(const Timeline& predicted, const Timeline& measured) {
  TraceMatch match;
  const auto fingerprint_of = [](const Timeline& timeline) -> const nlohmann::json* {
    const auto found = timeline.metadata.find("fingerprint");
    if (found == timeline.metadata.end() || !found->is_object()) return nullptr;
    for (const char* key : {"model", "parameters", "plan_digest"}) {
      if (!found->contains(key)) return nullptr;
    }
    return &*found;
  };
  const nlohmann::json* ours = fingerprint_of(predicted);
  const nlohmann::json* theirs = fingerprint_of(measured);
  if (!ours || !theirs) {
    match.unchecked = !ours && !theirs ? "neither trace" : !ours ? "the predicted trace" : "the measured trace";
    return match;
  }
  const auto model_text = [](const nlohmann::json& fingerprint) {
    return fingerprint.at("model").dump() + " (" + fingerprint.at("parameters").dump() + " parameters)";
  };
  if (ours->at("model") != theirs->at("model") || ours->at("parameters") != theirs->at("parameters")) {
    match.mismatch = "model " + model_text(*ours) + " vs " + model_text(*theirs);
  } else if (ours->at("plan_digest") != theirs->at("plan_digest")) {
    match.mismatch = "plan digest " + ours->at("plan_digest").dump() + " vs " + theirs->at("plan_digest").dump() +
                     " (the same model, another plan)";
  }
  return match;
}

Comparison compare_timelines(const Timeline& predicted, const Timeline& measured, int rank) {
  Comparison comparison;
  comparison.measured_rank = rank;
  const int predicted_rank = predicted.ranks().empty() ? 0 : predicted.ranks().front();
  std::map<int, const TimelineEvent*> predicted_by_id, measured_by_id;
  for (const auto& event : predicted.events) {
    if (event.rank == predicted_rank) predicted_by_id[event.op_id] = &event;
  }
  for (const auto& event : measured.events) {
    if (event.rank == rank) measured_by_id[event.op_id] = &event;
  }
  if (measured_by_id.empty()) {
    throw InputError("compare: the measured timeline has no ops on rank " + std::to_string(rank));
  }
  std::map<std::string, ComparisonRow> by_kind, by_stream;
  for (const auto& [id, measured_event] : measured_by_id) {
    const auto found = predicted_by_id.find(id);
    if (found == predicted_by_id.end()) {
      ++comparison.unmatched_ops;
      continue;
    }
    const TimelineEvent& predicted_event = *found->second;
    ++comparison.matched_ops;
    for (auto* table : {&by_kind, &by_stream}) {
      const std::string& key = table == &by_kind ? measured_event->kind : measured_event->stream;
      ComparisonRow& row = (*table)[key];
      row.name = key;
      ++row.ops;
      row.predicted_s += predicted_event.duration_s();
      row.measured_s += measured_event->duration_s();
    }
    comparison.worst_ops.push_back(
        {id, measured_event->name, predicted_event.duration_s(), measured_event->duration_s()});
  }
  comparison.unmatched_ops += predicted_by_id.size() - comparison.matched_ops;
  std::stable_sort(comparison.worst_ops.begin(), comparison.worst_ops.end(), [](const auto& a, const auto& b) {
    return std::abs(a.predicted_s - a.measured_s) > std::abs(b.predicted_s - b.measured_s);
  });
  if (comparison.worst_ops.size() > 10) comparison.worst_ops.resize(10);
  comparison.by_kind = rows(by_kind);
  comparison.by_stream = rows(by_stream);
  comparison.predicted_step_s = span_of(predicted, predicted_rank);
  comparison.measured_step_s = span_of(measured, rank);
  comparison.predicted_peak_bytes = predicted.peak_memory_bytes(predicted_rank);
  for (int measured_rank : measured.ranks()) {
    comparison.measured_peak_bytes = std::max(comparison.measured_peak_bytes, measured.peak_memory_bytes(measured_rank));
  }
  return comparison;
}

nlohmann::json to_json(const Comparison& comparison) {
  const auto table = [](const std::vector<ComparisonRow>& rows) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& row : rows) {
      list.push_back({{"name", row.name}, {"ops", row.ops}, {"predicted_s", row.predicted_s},
                      {"measured_s", row.measured_s}, {"relative_error", row.relative_error()}});
    }
    return list;
  };
  nlohmann::json worst = nlohmann::json::array();
  for (const auto& op : comparison.worst_ops) {
    worst.push_back({{"op_id", op.op_id}, {"name", op.name}, {"predicted_s", op.predicted_s},
                     {"measured_s", op.measured_s}});
  }
  return {{"schema", "shardplan.comparison/v1"},
          {"measured_rank", comparison.measured_rank},
          {"matched_ops", comparison.matched_ops},
          {"unmatched_ops", comparison.unmatched_ops},
          {"step_time", {{"predicted_s", comparison.predicted_step_s}, {"measured_s", comparison.measured_step_s},
                         {"relative_error", comparison.step_relative_error()}}},
          {"peak_memory", {{"predicted_bytes", comparison.predicted_peak_bytes},
                           {"measured_bytes", comparison.measured_peak_bytes},
                           {"relative_error", comparison.peak_relative_error()}}},
          {"by_kind", table(comparison.by_kind)},
          {"by_stream", table(comparison.by_stream)},
          {"worst_ops", std::move(worst)}};
}

std::string render_text(const Comparison& comparison) {
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line, "matched %zu ops (%zu unmatched), measured rank %d\n", comparison.matched_ops,
                comparison.unmatched_ops, comparison.measured_rank);
  out << line;
  std::snprintf(line, sizeof line, "step time    predicted %10.6f s   measured %10.6f s   error %+7.1f%%\n",
                comparison.predicted_step_s, comparison.measured_step_s, 100 * comparison.step_relative_error());
  out << line;
  std::snprintf(line, sizeof line, "peak memory  predicted %10lld B   measured %10lld B   error %+7.1f%%\n",
                comparison.predicted_peak_bytes, comparison.measured_peak_bytes, 100 * comparison.peak_relative_error());
  out << line;
  for (const auto* rows : {&comparison.by_kind, &comparison.by_stream}) {
    out << (rows == &comparison.by_kind ? "\nby op kind" : "\nby stream") << "          ops   predicted s    measured s    error\n";
    for (const auto& row : *rows) {
      std::snprintf(line, sizeof line, "  %-16s %5d %13.6f %13.6f %+7.1f%%\n", row.name.c_str(), row.ops,
                    row.predicted_s, row.measured_s, 100 * row.relative_error());
      out << line;
    }
  }
  out << "\nworst ops (|predicted − measured|)\n";
  for (const auto& op : comparison.worst_ops) {
    std::snprintf(line, sizeof line, "  #%-5d %-40s %10.6f s vs %10.6f s\n", op.op_id, op.name.c_str(), op.predicted_s,
                  op.measured_s);
    out << line;
  }
  return out.str();
}

}  // namespace shardplan
