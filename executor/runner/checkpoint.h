// Sharded checkpoints of a Runner: every rank saves its own shards, rank 0 a manifest with checksums; resume verifies.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "checkpoint_manifest.h"
#include "communicator.h"
#include "runner.h"

namespace shardplan::runner {

// Note [Checkpoint layout]: a checkpoint of step N (the runner's AdamW step count) lives in D/step-<N>/:
//   rank-<r>.bin   — rank r's state: a header (magic "SPCKPT01", version, rank, world size, unit count, step, data
//                    position, each unit's shard element count), then per unit its parameter shard, AdamW m and v as
//                    raw native-endian float32. Gradients are not saved: they are zero after every optimizer step.
//   manifest.json  — schema "shardplan.checkpoint/v1": world size, model, plan name, a fingerprint of the plan JSON
//                    and the plan JSON itself, the data file (name, bytes, FNV-1a hash) when given, step, data
//                    position and, per rank, file name, byte size and the 64-bit FNV-1a hash of its bytes.
// and D/latest is a one-line text file naming the newest complete step directory ("step-<N>").
//
// Every file is written to "<name>.tmp.<pid>", flushed to disk (fsync) and renamed over its name; the rank files come
// first, then (after every rank reports success) the manifest, then `latest`. A crash at any point therefore leaves
// `latest` naming the previous complete checkpoint: a half-written step directory has no manifest, or is not yet named
// by `latest`, and is never picked up. Loading reads `latest` and the manifest, and each rank checks its file's size
// and checksum BEFORE using any byte of it. A resume that does not match says which setting differs: first of world
// size, model, --micro-batch, --seq-len, the data file, micro-batches per step, then the plan field
// (checkpoint_manifest.h). Temporaries of a save killed before its renames are removed by the next save or resume.

inline constexpr const char* kCheckpointSchema = "shardplan.checkpoint/v1";

// What a checkpoint records besides the shards.
struct CheckpointInfo {
  std::string step_dir;              // D/step-<N>
  std::int64_t step = 0;             // optimizer steps taken (the runner's count after loading)
  std::uint64_t data_position = 0;   // the caller's dataset position to continue from (ByteTextDataset::seek)
};

// 64-bit FNV-1a (offset basis 14695981039346656037, prime 1099511628211) over `bytes`: the manifest's checksum.
std::uint64_t fnv1a64(std::string_view bytes);

// Collective over `world` (the communicator the runner was built on): writes D/step-<step>/ for the runner's current
// step and then points D/latest at it, recording `data` (the training data) when given. InputError on every rank
// when any rank could not write (the first failing rank's message, on every rank); then `latest` still names the
// previous checkpoint.
CheckpointInfo save_checkpoint(Runner& runner, comm::Communicator& world, const std::string& dir,
                               std::uint64_t data_position, const CheckpointData& data = {});

// Collective over `world`: restores the checkpoint D/latest names into `runner` (shards, m, v, step count) and
// returns its step and data position. A missing `latest` or manifest, another world size, model, plan or (when
// given and recorded) data file, or a truncated, oversized or corrupt rank file is an InputError naming the file and
// what differs; every rank throws the first failing rank's message (so one rank can print it for all), no rank hangs,
// and nothing is loaded anywhere unless every rank verified its file.
CheckpointInfo load_checkpoint(Runner& runner, comm::Communicator& world, const std::string& dir,
                               const CheckpointData& data = {});

}  // namespace shardplan::runner
