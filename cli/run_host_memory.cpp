// Implementation of the host-memory check of `run --device cpu` (Note [Run host memory]).
#include "run_host_memory.h"

#include <charconv>
#include <fstream>
#include <sstream>
#include <string>

#include "errors.h"
#include "host_memory.h"
#include "unit_layout.h"

namespace shardplan::cli {

std::optional<std::int64_t> mem_available_bytes(std::string_view meminfo) {
  constexpr std::string_view kKey = "MemAvailable:";
  std::size_t at = meminfo.find(kKey);
  if (at == std::string_view::npos || (at > 0 && meminfo[at - 1] != '\n')) return std::nullopt;
  at = meminfo.find_first_not_of(' ', at + kKey.size());
  if (at == std::string_view::npos) return std::nullopt;
  std::int64_t kib = 0;
  const auto [end, error] = std::from_chars(meminfo.data() + at, meminfo.data() + meminfo.size(), kib);
  if (error != std::errc() || kib < 0 || kib > (std::int64_t{1} << 52)) return std::nullopt;
  // The kernel writes "kB" and means KiB (fs/proc/meminfo.c shifts pages by PAGE_SHIFT - 10).
  if (std::string_view(end, meminfo.data() + meminfo.size()).substr(0, 3) != " kB") return std::nullopt;
  return kib * 1024;
}

void check_run_host_memory(const Plan& plan, const ModelSpec& model, int world_size, int ranks_on_host,
                           std::int64_t available_bytes) {
  const MemoryByCategory states = persistent_memory(unit_layouts(plan, model, world_size, world_size), plan, 0);
  std::int64_t per_rank_bytes = 0;
  for (const auto category : {MemoryCategory::sharded_params, MemoryCategory::sharded_grads,
                              MemoryCategory::optimizer_states}) {
    per_rank_bytes += states[static_cast<std::size_t>(category)];
  }
  // Both below 2^62 (limits::kMaxStepBytes and the meminfo bound), so the product by a count of ranks cannot wrap
  // when compared as a quotient.
  if (per_rank_bytes > available_bytes / std::max(ranks_on_host, 1)) {
    throw InputError("run: the model states of " + model.name + " need " + host_bytes_text(per_rank_bytes) +
                     " per rank (" + std::to_string(ranks_on_host) + " rank" + (ranks_on_host == 1 ? "" : "s") +
                     " on this host), more than the host's available memory, " + host_bytes_text(available_bytes) +
                     " (MemAvailable in /proc/meminfo); expected a smaller model, more ranks or more hosts");
  }
}

void check_run_host_memory(const Plan& plan, const ModelSpec& model, int world_size, int ranks_on_host) {
  std::ifstream file("/proc/meminfo");
  std::ostringstream text;
  text << file.rdbuf();
  if (const auto available = mem_available_bytes(text.str())) {
    check_run_host_memory(plan, model, world_size, ranks_on_host, *available);
  }
}

}  // namespace shardplan::cli
