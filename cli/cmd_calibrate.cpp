// `shardplan calibrate --trace measured.json ... --out profile.json`: fit the cost model to executor runs.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <unistd.h>

#include "calibration_samples.h"
#include "chrome_trace.h"
#include "commands.h"
#include "errors.h"
#include "inputs.h"
#include "json_input.h"
#include "model_source.h"
#include "plan_json.h"

namespace shardplan::cli {

Action add_calibrate_command(CLI::App& app) {
  auto* command = app.add_subcommand("calibrate", "fit the cost model (links, compute, memory) to measured runs");
  struct Flags {
    std::vector<std::string> traces;
    std::string cluster;
    std::string catalog_file;
    std::string out;
    bool json = false;
  };
  auto flags = std::make_shared<Flags>();
  command->add_option("--trace", flags->traces, "measured trace from `run --trace` (repeatable)")->required();
  command->add_option("--cluster", flags->cluster, "the cluster the runs used (default: <ranks>xcpu)");
  add_catalog_flag(*command, flags->catalog_file);
  command->add_option("--out", flags->out, "write the fitted profile (shardplan.profile/v1)")->required();
  command->add_flag("--json", flags->json, "print the profile");
  return [flags]() {
    const HardwareCatalog catalog = load_catalog(flags->catalog_file);
    CalibrationSamples samples;
    HardwareProfile base;
    bool have_base = false;
    for (const auto& path : flags->traces) {
      const Timeline measured = read_chrome_trace(path);
      const JsonObjectReader metadata(measured.metadata, path, "shardplan.metadata");
      if (!metadata.has("plan_json")) metadata.fail("plan_json", "the plan (traces written by `shardplan run --trace`)");
      const ModelSpec model = load_model(metadata.string("model"));
      const Plan plan = plan_from_json(metadata.raw().at("plan_json"), path, model);
      const std::string cluster_text =
          flags->cluster.empty() ? std::to_string(measured.ranks().size()) + "xcpu" : flags->cluster;
      const Cluster cluster = parse_cluster(cluster_text, catalog);
      if (!have_base) {
        base = profile_from_cluster(cluster);
        have_base = true;
      }
      add_calibration_samples(measured, model, plan, cluster, base, samples);
    }
    const Calibration calibration = calibrate(base, samples, flags->out);
    char host[256] = "unknown";
    ::gethostname(host, sizeof host - 1);
    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    const nlohmann::json document = to_json(calibration, host, date);
    write_file_atomically(flags->out, document.dump(2) + "\n");
    if (flags->json) {
      print_json(document);
    } else {
      std::printf("fitted from %zu compute, %zu memory-bound and %zu collective samples:\n",
                  calibration.compute.samples, calibration.memory.samples, calibration.intra_node.samples +
                  calibration.inter_node.samples);
      std::printf("  compute   %.3g FLOP/s (rms relative residual %.1f%%)\n", calibration.compute.per_s,
                  100 * calibration.compute.rms_relative_residual);
      std::printf("  memory    %.3g B/s (%.1f%%)\n", calibration.memory.per_s, 100 * calibration.memory.rms_relative_residual);
      std::printf("  intra     alpha %.3g s, busbw %.3g B/s (%.1f%%)\n", calibration.intra_node.latency_s,
                  calibration.intra_node.bus_bytes_per_s, 100 * calibration.intra_node.rms_relative_residual);
      std::printf("  overhead  %lld B\nwrote %s\n", static_cast<long long>(calibration.profile.context_overhead_bytes),
                  flags->out.c_str());
    }
    return 0;
  };
}

}  // namespace shardplan::cli
