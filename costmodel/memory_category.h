// Memory categories: what each byte of device memory is for, shared by the schedule, the simulator and the executor.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

namespace shardplan {

// The same names as the terms of MemoryBreakdown (memory_model.h), so a simulated or measured peak reads term by term
// against the closed-form bound.
enum class MemoryCategory : int {
  sharded_params = 0,
  sharded_grads,
  optimizer_states,
  unsharded_params,  // gathered copies of non-root units
  root_unit,         // the gathered root unit
  unsharded_grads,
  comm_buffers,
  activations,
  overhead,
};
inline constexpr std::size_t kMemoryCategoryCount = 9;

inline constexpr std::array<std::string_view, kMemoryCategoryCount> kMemoryCategoryNames = {
    "sharded_params", "sharded_grads", "optimizer_states", "unsharded_params", "root_unit",
    "unsharded_grads", "comm_buffers",  "activations",      "overhead"};

inline std::string_view to_string(MemoryCategory category) {
  return kMemoryCategoryNames[static_cast<std::size_t>(category)];
}

// Bytes by category.
using MemoryByCategory = std::array<long long, kMemoryCategoryCount>;

}  // namespace shardplan
