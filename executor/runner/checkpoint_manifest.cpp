// The run record of a checkpoint manifest and the comparison that names the first field a resuming run changed.
#include "checkpoint_manifest.h"

#include <cstdio>

#include "checkpoint.h"
#include "errors.h"
#include "json_input.h"
#include "plan_json.h"

namespace shardplan::runner {

namespace {

using nlohmann::json;

// The plan as the record compares it: its name and model are labels (checked apart, or not at all), not shards.
json comparable_plan(json plan) {
  if (plan.is_object()) {
    plan.erase("name");
    plan.erase("model");
  }
  return plan;
}

std::string data_text(const std::string& file, std::uint64_t bytes, const std::string& checksum) {
  return "'" + file + "' (" + std::to_string(bytes) + " bytes, fnv1a64 " + checksum + ")";
}

}  // namespace

std::string hex64(std::uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

std::string plan_fingerprint(const Plan& plan, const ModelSpec& model) {
  return hex64(fnv1a64(to_json(plan, model).dump()));
}

CheckpointData describe_data_file(const std::string& path) {
  const std::string bytes = read_text_file(path);
  return {path, bytes.size(), fnv1a64(bytes)};
}

json run_record(int world_size, const ModelSpec& model, const Plan& plan, const CheckpointData& data) {
  json record = {{"world_size", world_size},
                 {"model", model.name},
                 {"plan", plan.name},
                 {"plan_fingerprint", plan_fingerprint(plan, model)},
                 {"plan_json", to_json(plan, model)}};
  if (!data.file.empty()) {
    record["data"] = {{"file", data.file}, {"bytes", data.bytes}, {"fnv1a64", hex64(data.fnv1a64)}};
  }
  return record;
}

std::optional<std::string> resume_mismatch(const json& record, int world_size, const ModelSpec& model,
                                           const Plan& plan, const CheckpointData& data) {
  const int written_world = record.at("world_size").get<int>();
  if (written_world != world_size) {
    return "written by " + std::to_string(written_world) + " ranks, this run has " + std::to_string(world_size);
  }
  const auto written_model = record.at("model").get<std::string>();
  if (written_model != model.name) {
    return "written for model '" + written_model + "', this run trains '" + model.name + "'";
  }
  if (!record.contains("plan_json")) {
    // A manifest of an older shardplan records the plan's fingerprint only.
    if (record.at("plan_fingerprint").get<std::string>() == plan_fingerprint(plan, model)) return std::nullopt;
    return "written for plan '" + record.at("plan").get<std::string>() + "' (fingerprint " +
           record.at("plan_fingerprint").get<std::string>() + "), this run's plan '" + plan.name + "' differs";
  }
  const json written = comparable_plan(record.at("plan_json"));
  const json current = comparable_plan(to_json(plan, model));
  // The settings a user changes with a flag first, by the flag's name.
  const json& training = written.at("training");
  for (const auto& [key, flag] : {std::pair<const char*, const char*>{"micro_batch", "--micro-batch"},
                                  {"seq_len", "--seq-len"}}) {
    if (training.at(key) != current.at("training").at(key)) {
      return std::string("written with ") + flag + " " + describe_json_value(training.at(key)) + ", this run has " +
             flag + " " + describe_json_value(current.at("training").at(key));
    }
  }
  if (record.contains("data") && !data.file.empty()) {
    const json& recorded = record.at("data");
    const auto bytes = recorded.at("bytes").get<std::uint64_t>();
    const auto checksum = recorded.at("fnv1a64").get<std::string>();
    if (bytes != data.bytes || checksum != hex64(data.fnv1a64)) {
      return "written from data file " + data_text(recorded.at("file").get<std::string>(), bytes, checksum) +
             ", this run reads " + data_text(data.file, data.bytes, hex64(data.fnv1a64)) + " (--data)";
    }
  }
  if (training.at("grad_accumulation_steps") != current.at("training").at("grad_accumulation_steps")) {
    return "written with " + describe_json_value(training.at("grad_accumulation_steps")) +
           " micro-batches per step, this run has " +
           describe_json_value(current.at("training").at("grad_accumulation_steps")) + " (--global-batch)";
  }
  const json patch = json::diff(written, current);
  if (patch.empty()) return std::nullopt;
  const std::string path = patch.front().at("path").get<std::string>();
  const json::json_pointer pointer(path);
  const auto value_at = [&](const json& document) {
    return document.contains(pointer) ? describe_json_value(document.at(pointer)) : std::string("nothing");
  };
  return "the plan differs at " + path + ": the checkpoint's " + value_at(written) + ", this run's " +
         value_at(current) + " (plan '" + record.at("plan").get<std::string>() + "' vs '" + plan.name + "')";
}

}  // namespace shardplan::runner
