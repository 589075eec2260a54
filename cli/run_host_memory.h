// The host-memory check `run --device cpu` makes before any rank allocates: the model states against MemAvailable.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "model_spec.h"
#include "plan.h"

namespace shardplan::cli {

// Note [Run host memory]: the CPU executor keeps every rank's model states in host memory — each unit's sharded
// parameters, gradients and optimizer states (persistent_memory, planner/unit_layout.h, the same bytes the tracked
// peak starts from) — and every rank of a host allocates its own. A plan whose states this host cannot hold ended in
// std::bad_alloc (exit 1) or the OOM killer after minutes (`run --device cpu -m examples/hf/llama3-70b.json`: 1.1 TB
// per rank). So `run` refuses up front, exit 2, when ranks on this host × a rank's states exceed the host's
// MemAvailable (/proc/meminfo: the kernel's estimate of what can be allocated without swapping). The states are a
// floor of what a rank allocates (gathered units, gradients in flight and activations come on top), so the check
// refuses only what cannot run; without /proc/meminfo it is skipped.

// The MemAvailable line of /proc/meminfo's text, in bytes; nullopt when there is none.
std::optional<std::int64_t> mem_available_bytes(std::string_view meminfo);

// InputError naming both figures when `ranks_on_host` ranks of `plan` (on `world_size` ranks) need more for their
// model states than `available_bytes`.
void check_run_host_memory(const Plan& plan, const ModelSpec& model, int world_size, int ranks_on_host,
                           std::int64_t available_bytes);

// check_run_host_memory against this host's MemAvailable (no check when /proc/meminfo cannot be read).
void check_run_host_memory(const Plan& plan, const ModelSpec& model, int world_size, int ranks_on_host);

}  // namespace shardplan::cli
