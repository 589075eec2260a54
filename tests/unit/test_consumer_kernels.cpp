// GEMM and attention rates of the consumer and workstation cards (RTX 4090, RTX 6000 Ada, L40S) against their published
// kernel measurements, and "unmeasured" where none was found (unmeasured_rates.h). Can fail: without its GEMM rate (the
// profile's 0.75 default) the RTX 4090's 8192^3 row would read ≈ 123 against 160 TFLOP/s, -23% (worked by hand, not
// run as a mutation).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cluster.h"
#include "compute_cost.h"
#include "hardware_catalog.h"
#include "hardware_profile.h"
#include "unmeasured_rates.h"

using namespace shardplan;

namespace {

struct RateRow {
  std::string what;
  double published = 0;  // TFLOP/s as the source prints it
  double model = 0;
  const char* source = "";
};

void check_rates(const char* title, const std::vector<RateRow>& rows, double most) {
  std::string table = std::string(title) + "\n";
  for (const RateRow& row : rows) {
    char line[320];
    std::snprintf(line, sizeof line, "  %-44s published %7.1f  model %7.1f  %+6.1f%%  (%s)\n", row.what.c_str(),
                  row.published, row.model, 100 * (row.model / row.published - 1), row.source);
    table += line;
  }
  MESSAGE(table);
  for (const RateRow& row : rows) {
    CAPTURE(row.what);
    CHECK(std::abs(row.model / row.published - 1) <= most);
  }
}

HardwareProfile profile_of(const std::string& cluster) {
  return profile_from_cluster(parse_cluster(cluster, HardwareCatalog::builtin()));
}

double gemm_tflops(std::int64_t n, const HardwareProfile& profile) {
  const GemmCall gemm{n, n, n, 1};
  return gemm.flops() / gemm_time_s(gemm, 2, profile) / 1e12;
}

// Non-causal flash attention at sequence length s, head dim d (FLOPs as FlashAttention counts them: 4·s²·d per head,
// backward 2.5×); the rate does not depend on the batch.
double attention_tflops(std::int64_t seq, std::int64_t head_dim, bool backward, const HardwareProfile& profile) {
  const double forward = 4.0 * static_cast<double>(seq * seq * head_dim) * 16;
  const AttentionCall call{backward ? 2.5 * forward : forward, seq, head_dim, backward};
  return call.flops / attention_time_s(call, 2, profile) / 1e12;
}

bool lists(const HardwareProfile& profile, const std::string& rate) {
  return std::find(profile.unmeasured_rates.begin(), profile.unmeasured_rates.end(), rate) !=
         profile.unmeasured_rates.end();
}

}  // namespace

TEST_CASE("consumer kernels: RTX 4090 and RTX 6000 Ada GEMM and attention rates against their sources") {
  const HardwareProfile rtx4090 = profile_of("1xRTX4090"), rtx6000 = profile_of("1xRTX6000-Ada");
  const char* torch_table = "zzc0721/torch-performance-test-data#78, bf16 torch.matmul";
  const char* tvm = "apache/tvm tl_doc/flash_perf.md, flash_attn, s 2k";
  check_rates("consumer / workstation GEMM TFLOP/s (n x n x n)",
              {{"RTX 4090 bf16 1024^3", 126.84, gemm_tflops(1024, rtx4090), torch_table},
               {"RTX 4090 bf16 2048^3", 164.81, gemm_tflops(2048, rtx4090), torch_table},
               {"RTX 4090 bf16 4096^3", 151.50, gemm_tflops(4096, rtx4090), torch_table},
               {"RTX 4090 bf16 8192^3", 160.17, gemm_tflops(8192, rtx4090), torch_table},
               {"RTX 4090 bf16 10240^3", 158.54, gemm_tflops(10240, rtx4090), torch_table},
               {"RTX 4090 fp16 8192^3", 158.60, gemm_tflops(8192, rtx4090), "mli/transformers-benchmarks#4"},
               {"RTX 6000 Ada (300 W) bf16, best shape", 278.5, gemm_tflops(8192, rtx6000),
                "mag-/gpu_benchmark (Optuna best)"}},
              0.10);
  // Attention on the 4090: the entry's plateau is the measured forward rate, but no sequence-length sweep was found, so
  // the default half-rate length (350) stands: within 20% at 2k, as test_published_kernels' attention table allows.
  check_rates("RTX 4090 flash attention TFLOP/s (non-causal, d128, s 2048)",
              {{"RTX 4090 forward", 169.3, attention_tflops(2048, 128, false, rtx4090), tvm},
               {"RTX 4090 backward", 124.6, attention_tflops(2048, 128, true, rtx4090), tvm}},
              0.20);
  CHECK_FALSE(lists(rtx4090, "gemm"));
  CHECK_FALSE(lists(rtx4090, "attention"));
  CHECK_FALSE(lists(rtx6000, "gemm"));
  CHECK(lists(rtx6000, "attention"));         // no RTX 6000 Ada attention measurement was found
  CHECK(lists(rtx6000, "memory_bandwidth"));  // nor a STREAM-like one
}

TEST_CASE("consumer kernels: the L40S's rates are unmeasured, and the outputs' line and JSON say so") {
  const HardwareProfile l40s = profile_of("8xL40S");
  for (const char* rate : {"gemm", "fp8_gemm", "attention", "memory_bandwidth"}) {
    CAPTURE(rate);
    CHECK(lists(l40s, rate));
  }
  CHECK_FALSE(lists(l40s, "intra_node_busbw"));  // its PCIe P2P busbw comes from the transport's nccl-tests figure
  const std::string line = unmeasured_rates_line(l40s);
  MESSAGE(line);
  CHECK(line.find("unmeasured on L40S: gemm, fp8_gemm, attention, memory_bandwidth") == 0);
  CHECK(unmeasured_rates_json(l40s) ==
        nlohmann::json::array({"gemm", "fp8_gemm", "attention", "memory_bandwidth"}));
  // An H100's every rate is a measurement: no line. A calibrated profile's fits are measurements too.
  CHECK(unmeasured_rates_line(profile_of("8xH100-80GB")).empty());
  HardwareProfile calibrated = l40s;
  calibrated.source = "l40s-profile.json";
  CHECK(unmeasured_rates_line(calibrated).empty());
  CHECK(unmeasured_rates_json(calibrated).empty());
}
