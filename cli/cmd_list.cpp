// `shardplan models` and `shardplan gpus`: the preset and catalog listings, as tables or JSON.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>

#include "commands.h"
#include "inputs.h"
#include "model_json.h"
#include "model_presets.h"

namespace shardplan::cli {

Action add_models_command(CLI::App& app, const Output& output) {
  auto* command = app.add_subcommand("models", "list the model presets");
  auto json = std::make_shared<bool>(false);
  command->add_flag("--json", *json, "print JSON");
  return [json, output]() {
    nlohmann::json list = nlohmann::json::array();
    // The name column as wide as the longest preset name ("llama4-scout-17b-16e"), so every row lines up.
    int name_width = 15;
    for (const auto& preset : model_presets()) name_width = std::max(name_width, static_cast<int>(preset.name.size()));
    if (!*json) std::printf("%-*s %17s %7s %7s  %s\n", name_width, "name", "parameters", "blocks", "seq", "source");
    for (const auto& preset : model_presets()) {
      const ModelSpec model = preset_model(preset.name);
      if (*json) {
        list.push_back({{"name", preset.name},
                        {"params", model.param_count()},
                        {"blocks", model.block_count()},
                        {"hidden_size", model.hidden_size},
                        {"default_seq_len", model.default_seq_len},
                        {"description", preset.description}});
      } else {
        std::printf("%-*s %17lld %7zu %7lld  %s\n", name_width, preset.name.c_str(),
                    static_cast<long long>(model.param_count()), model.block_count(),
                    static_cast<long long>(model.default_seq_len), preset.description.c_str());
      }
    }
    if (*json) output.json({{"schema", "shardplan.models/v1"}, {"models", list}});
    return 0;
  };
}

Action add_gpus_command(CLI::App& app, const Output& output) {
  auto* command = app.add_subcommand("gpus", "list the GPU and fabric catalog");
  auto json = std::make_shared<bool>(false);
  auto catalog_file = std::make_shared<std::string>();
  command->add_flag("--json", *json, "print JSON");
  add_catalog_flag(*command, *catalog_file);
  return [json, catalog_file, output]() {
    const HardwareCatalog catalog = load_catalog(*catalog_file);
    if (*json) {
      nlohmann::json gpus = nlohmann::json::array(), fabrics = nlohmann::json::array();
      for (const auto& gpu : catalog.gpus()) gpus.push_back(to_json(gpu));
      for (const auto& fabric : catalog.fabrics()) fabrics.push_back(to_json(fabric));
      output.json({{"schema", "shardplan.catalog/v1"}, {"gpus", gpus}, {"fabrics", fabrics}});
      return 0;
    }
    // Widths fit the builtin names ("GH200-144GB", "ethernet-100g-shared"); longer user names push their row right.
    std::printf("%-11s %9s %10s %10s %9s  %-16s %9s %8s %-20s %14s\n", "name", "mem GiB", "bf16 TF/s",
                "fp32 TF/s", "HBM TB/s", "intra-node link", "GB/s/dir", "$/GPU-h", "default fabric", "host GiB/node");
    for (const auto& gpu : catalog.gpus()) {
      std::printf("%-11s %9.1f %10.1f %10.1f %9.2f  %-16s %9.0f %8.2f %-20s %14.0f\n", gpu.name.c_str(),
                  static_cast<double>(gpu.memory_bytes) / (1 << 30), gpu.peak_bf16_flops / 1e12,
                  gpu.peak_fp32_flops / 1e12, gpu.hbm_bytes_per_s / 1e12, gpu.intra_node_link.c_str(),
                  gpu.intra_node_bytes_per_s / 1e9, gpu.price_per_gpu_hour, gpu.default_fabric.c_str(),
                  static_cast<double>(gpu.host_memory_bytes_per_node) / (1 << 30));
    }
    std::printf("\n%-20s %12s %12s  %s\n", "fabric", "GB/s/GPU", "latency us", "description");
    for (const auto& fabric : catalog.fabrics()) {
      std::printf("%-20s %12.2f %12.1f  %s\n", fabric.name.c_str(), fabric.bytes_per_s_per_gpu / 1e9,
                  fabric.latency_s * 1e6, fabric.description.c_str());
    }
    return 0;
  };
}

}  // namespace shardplan::cli
