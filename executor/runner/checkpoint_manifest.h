// The checkpoint manifest's record of the run that wrote it, and the one-line answer to "does this run match it?".
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "model_spec.h"
#include "plan.h"

namespace shardplan::runner {

// The training data a run reads, as a checkpoint records it: a resumed run must continue the same byte stream.
struct CheckpointData {
  std::string file;            // as given (--data); empty: not recorded, not checked
  std::uint64_t bytes = 0;
  std::uint64_t fnv1a64 = 0;   // of the whole file
};

// The data file's size and checksum; InputError naming the file when it cannot be read.
CheckpointData describe_data_file(const std::string& path);

// What the manifest records about the run beside the shards (Note [Checkpoint layout] in checkpoint.h): world size,
// model, plan name and fingerprint, and — to say exactly what differs on resume — the plan itself, its training
// settings and the data file.
nlohmann::json run_record(int world_size, const ModelSpec& model, const Plan& plan, const CheckpointData& data);

// Why this run cannot resume from a manifest holding `record` (keys as run_record writes them), or nullopt when it
// can: the first of world size, model, micro-batch, seq-len, data file and checksum, gradient accumulation, then the
// first plan field that differs (a JSON pointer with both values). A manifest of an older shardplan, without the
// plan, is compared by its fingerprint alone. InputError when the record is malformed.
std::optional<std::string> resume_mismatch(const nlohmann::json& record, int world_size, const ModelSpec& model,
                                           const Plan& plan, const CheckpointData& data);

// A fingerprint of the plan as its JSON says it: a checkpoint of another wrapping or strategy has other shards.
std::string plan_fingerprint(const Plan& plan, const ModelSpec& model);

std::string hex64(std::uint64_t value);

}  // namespace shardplan::runner
