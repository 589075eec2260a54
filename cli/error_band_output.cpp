// The error bands' text and JSON for plan, estimate and simulate, and the memory headroom's choice
// (Note [Error bands] in costmodel/error_band.h).
#include "error_band_output.h"

#include <cstdio>

namespace shardplan::cli {

RunKind run_kind_of(const Cluster& cluster, const TrainingConfig& training) {
  return {cluster.nodes, !training.finetune.trains_all()};
}

MemoryHeadroomChoice choose_memory_headroom(const CLI::App& command, double flag_percent, const ErrorBand& memory) {
  if (command.count("--memory-headroom") > 0) return {flag_percent, false, memory};
  return {memory_headroom_percent(memory), true, memory};
}

std::string headroom_line(const MemoryHeadroomChoice& headroom, const std::string& indent) {
  char text[256];
  if (headroom.from_band) {
    std::snprintf(text, sizeof text,
                  "%sheadroom %g %% (the memory error band: its largest underestimate, %.1f %% on %d published "
                  "run%s, rounded up)\n",
                  indent.c_str(), headroom.percent, 100 * headroom.band.largest_underestimate, headroom.band.runs,
                  headroom.band.runs == 1 ? "" : "s");
  } else {
    std::snprintf(text, sizeof text, "%sheadroom %g %% (--memory-headroom)\n", indent.c_str(), headroom.percent);
  }
  return text;
}

std::string error_band_text(const PredictionErrorBands& bands, double step_time_s, std::int64_t reserved_peak_bytes,
                            const MemoryHeadroomChoice& headroom, const std::string& indent) {
  char step[48];
  std::snprintf(step, sizeof step, "step %.4f s", step_time_s);
  // The memory band is measured on the allocator's own reserved peak (torch.cuda.max_memory_reserved), without the
  // overhead outside it (Note [Error bands]).
  char memory[64];
  std::snprintf(memory, sizeof memory, "max_memory_reserved %.2f GiB",
                static_cast<double>(reserved_peak_bytes) / (1024.0 * 1024.0 * 1024.0));
  return indent + "error bands (how far the predictions of published runs like this one were off):\n" + indent +
         "  " + step + " (" + describe(bands.step_time) + ")\n" + indent + "  " + memory + " (" +
         describe(bands.memory) + ")\n" + headroom_line(headroom, indent + "  ");
}

nlohmann::json error_band_json(const PredictionErrorBands& bands, const MemoryHeadroomChoice& headroom) {
  nlohmann::json document = to_json(bands);
  document["memory_headroom_percent"] = headroom.percent;
  document["memory_headroom_source"] = headroom.from_band ? "error band" : "--memory-headroom";
  return document;
}

}  // namespace shardplan::cli
