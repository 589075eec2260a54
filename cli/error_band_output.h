// What plan, estimate and simulate print of the error bands (Note [Error bands] in costmodel/error_band.h), and the
// memory headroom each takes: --memory-headroom when given, else the memory band's (Note [Memory headroom]).
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cluster.h"
#include "error_band.h"
#include "training.h"

namespace shardplan::cli {

// The run kind the bands group by: the cluster's nodes, and fine-tuning for LoRA and QLoRA (full fine-tuning
// computes what pre-training does).
RunKind run_kind_of(const Cluster& cluster, const TrainingConfig& training);

struct MemoryHeadroomChoice {
  double percent = 0;
  bool from_band = false;  // --memory-headroom was not given: the memory band's largest underestimate, rounded up
  ErrorBand band;          // the memory band it came from (when from_band)
};

// --memory-headroom PCT as given on `command` (CLI11's count), else memory_headroom_percent(memory).
MemoryHeadroomChoice choose_memory_headroom(const CLI::App& command, double flag_percent, const ErrorBand& memory);

// "  headroom 3 % (the memory error band: its largest underestimate, 2.1 % on 7 published runs, rounded up)\n"
std::string headroom_line(const MemoryHeadroomChoice& headroom, const std::string& indent);

// The bands' lines under a heading, each prefixed with `indent`:
//   error bands (published runs like this one, Note [Error bands]):
//     step 0.9916 s (typically ±11.4 %, from 12 published runs on H100, single-node pre-training)
//     max_memory_reserved 74.78 GiB (typically ±0.6 %, from 7 published runs on H100, all run kinds — ...)
//     headroom 3 % (...)
std::string error_band_text(const PredictionErrorBands& bands, double step_time_s, std::int64_t reserved_peak_bytes,
                            const MemoryHeadroomChoice& headroom, const std::string& indent);

// to_json(bands) with "memory_headroom_percent" and "memory_headroom_source" ("error band" | "--memory-headroom").
nlohmann::json error_band_json(const PredictionErrorBands& bands, const MemoryHeadroomChoice& headroom);

}  // namespace shardplan::cli
