// Tests of the hardware catalog (builtin entries, lookup, user catalogs) and of cluster parsing from strings and JSON.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "cluster.h"
#include "errors.h"
#include "hardware_catalog.h"
#include "json_input.h"

using shardplan::Cluster;
using shardplan::HardwareCatalog;
using shardplan::InputError;

namespace {

// Runs `action` and returns the InputError message it raised, or a marker a CHECK will show when none was raised.
std::string input_error(const std::function<void()>& action) {
  try {
    action();
  } catch (const InputError& error) {
    return error.what();
  }
  return "<no InputError thrown>";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The example files live in the repository; tests run from its root (meson `workdir`).
const std::string kExamples = "examples/clusters/";

}  // namespace

namespace {

// Every builtin GPU type, in catalog order (gpu_catalog_data.cpp, then gpu_catalog_more*.cpp).
const std::vector<std::string> kBuiltinGpus = {
    "A100-40GB",  "A100-80GB", "H100-80GB", "H200-141GB", "B200",     "L40S",     "RTX4090",     "MI300X",
    "V100-16GB",  "V100-32GB", "A10G",      "L4",         "RTX3090",  "RTX-A6000", "RTX6000-Ada", "H100-PCIe",
    "H100-NVL",   "H20",       "GH200-96GB", "GH200-144GB", "GB200",  "B300",     "MI250X",      "MI325X",
    "MI355X",     "cpu"};

// The types without a public cloud list price: their entries say price 0 = unknown (Note [Prices]).
bool price_unknown(const std::string& name) { return name == "cpu" || name == "H20" || name == "MI250X"; }

}  // namespace

TEST_CASE("catalog: every builtin GPU is present with positive numbers") {
  const auto catalog = HardwareCatalog::builtin();
  CHECK(catalog.gpu_names() == kBuiltinGpus);  // a new entry is added to the list above and checked below
  for (const auto& gpu : catalog.gpus()) {
    const std::string& name = gpu.name;
    CAPTURE(name);
    CHECK(!gpu.description.empty());
    CHECK(gpu.memory_bytes > 0);
    CHECK(gpu.peak_bf16_flops > 0);
    CHECK(gpu.peak_fp16_flops > 0);
    CHECK(gpu.peak_fp32_flops > 0);
    CHECK(gpu.hbm_bytes_per_s > 0);
    CHECK(!gpu.intra_node_link.empty());
    CHECK(gpu.intra_node_bytes_per_s > 0);
    CHECK(gpu.intra_node_latency_s > 0);
    CHECK(gpu.pcie_bytes_per_s > 0);
    CHECK(gpu.default_gpus_per_node >= 1);
    CHECK(gpu.price_per_gpu_hour >= 0);
    CHECK(gpu.context_overhead_bytes < gpu.memory_bytes);
    CHECK(gpu.host_memory_bytes_per_node > 0);
    CHECK_NOTHROW(catalog.fabric(gpu.default_fabric));
    CHECK(gpu.name.find(' ') == std::string::npos);  // names appear in cluster strings ("8xH100-PCIe")
    CHECK((gpu.name[0] < '0' || gpu.name[0] > '9'));
    // Kernel rates are fractions of the peaks when set (0 keeps the profile's default).
    CHECK(gpu.max_compute_efficiency >= 0);
    CHECK(gpu.max_compute_efficiency <= 1);
    CHECK(gpu.memory_efficiency >= 0);
    CHECK(gpu.memory_efficiency <= 1);
    if (name != "cpu") {
      CHECK(gpu.context_overhead_bytes > 0);  // the CUDA/ROCm context (the CPU executor tracks tensors only)
      CHECK(gpu.peak_bf16_flops > gpu.peak_fp32_flops);  // tensor cores vs plain FP32
      CHECK(gpu.peak_fp16_flops > gpu.peak_fp32_flops);
      CHECK(gpu.kernel_dispatch_s > 0);
      CHECK(gpu.collective_base_latency_s > 0);
    }
    if (!price_unknown(name)) CHECK(gpu.price_per_gpu_hour > 0);
  }
  // Spot checks against the datasheets (gpu_catalog_data.cpp has the sources).
  CHECK(catalog.gpu("H100-80GB").memory_bytes == 81559LL * 1024 * 1024);
  CHECK(catalog.gpu("H100-80GB").peak_bf16_flops == doctest::Approx(989.4e12));
  CHECK(catalog.gpu("A100-80GB").hbm_bytes_per_s == doctest::Approx(2.039e12));
  CHECK(catalog.gpu("MI300X").intra_node_bytes_per_s == doctest::Approx(448e9));
  CHECK(catalog.gpu("H200-141GB").peak_bf16_flops == catalog.gpu("H100-80GB").peak_bf16_flops);
}

TEST_CASE("catalog: the gpu_catalog_more entries against their datasheets and devices") {
  const auto catalog = HardwareCatalog::builtin();
  constexpr std::int64_t kMiB = 1LL << 20, kGiB = 1LL << 30;
  struct Expected {
    const char* name;
    std::int64_t memory_bytes;  // as the driver reports it (nvidia-smi, PyTorch or rocm-smi; the entry says which)
    double peak_bf16_flops;     // dense
    double hbm_bytes_per_s;
    int gpus_per_node;
    const char* fabric;
  };
  const Expected expected[] = {
      {"V100-16GB", 16384 * kMiB, 125e12, 900e9, 8, "ib-edr"},  // bf16 = the fp16 tensor peak (no bf16 tensor cores)
      {"V100-32GB", 32768 * kMiB, 125e12, 900e9, 8, "ib-edr"},
      {"A10G", 23028 * kMiB, 70e12, 600e9, 8, "ethernet-100g-shared"},
      {"L4", 23034 * kMiB, 121e12, 300e9, 8, "ethernet-100g-shared"},
      {"RTX3090", 24576 * kMiB, 71e12, 936e9, 8, "ethernet-100g-shared"},
      {"RTX-A6000", 49140 * kMiB, 154.8e12, 768e9, 4, "ethernet-100g-shared"},
      {"RTX6000-Ada", 49140 * kMiB, 364.25e12, 960e9, 4, "ethernet-100g-shared"},
      {"H100-PCIe", 81008 * kMiB, 756.5e12, 2.0e12, 8, "roce-200g"},
      {"H100-NVL", 95830 * kMiB, 835.5e12, 3.938e12, 8, "roce-200g"},
      {"H20", 97871 * kMiB, 148e12, 4.0e12, 8, "ib-ndr"},
      {"GH200-96GB", 97871 * kMiB, 989.4e12, 4.0e12, 1, "ib-ndr"},
      {"GH200-144GB", 153008209920LL, 989.4e12, 4.9e12, 1, "ib-ndr"},
      {"GB200", 189471 * kMiB, 2500e12, 8e12, 72, "ib-ndr"},
      {"B300", 275040 * kMiB, 2250e12, 8e12, 8, "ib-xdr"},
      {"MI250X", 64 * kGiB, 191.5e12, 1.6e12, 8, "slingshot-200g"},  // one GCD: half a package's 383 TFLOPS
      {"MI325X", 256 * kGiB, 1307.4e12, 6e12, 8, "roce-400g"},
      {"MI355X", 288 * kGiB, 2500e12, 8e12, 8, "roce-400g"},
  };
  for (const Expected& want : expected) {
    CAPTURE(want.name);
    const auto& gpu = catalog.gpu(want.name);
    CHECK(gpu.memory_bytes == want.memory_bytes);
    CHECK(gpu.peak_bf16_flops == doctest::Approx(want.peak_bf16_flops));
    CHECK(gpu.hbm_bytes_per_s == doctest::Approx(want.hbm_bytes_per_s));
    CHECK(gpu.default_gpus_per_node == want.gpus_per_node);
    CHECK(gpu.default_fabric == want.fabric);
  }
  // Links per direction (Note [Intra-node bandwidth]) and the host links that CPU offload copies use.
  CHECK(catalog.gpu("V100-16GB").intra_node_bytes_per_s == doctest::Approx(150e9));   // NVLink2, 300 GB/s bidir.
  CHECK(catalog.gpu("H100-PCIe").intra_node_bytes_per_s == doctest::Approx(64e9));    // PCIe Gen5 between pairs
  CHECK(catalog.gpu("GB200").intra_node_bytes_per_s == doctest::Approx(900e9));       // NVLink5 across the NVL72
  CHECK(catalog.gpu("MI250X").intra_node_bytes_per_s == doctest::Approx(50e9));       // one xGMI link between packages
  CHECK(catalog.gpu("MI355X").intra_node_bytes_per_s == doctest::Approx(537.6e9));
  CHECK(catalog.gpu("GH200-96GB").pcie_bytes_per_s == doctest::Approx(450e9));        // NVLink-C2C to Grace memory
  CHECK(catalog.gpu("V100-16GB").peak_fp32_flops == doctest::Approx(15.7e12));
  CHECK(catalog.gpu("MI250X").peak_fp32_flops == doctest::Approx(47.9e12 / 2));
  // The GH200 and H20 are Hopper: the GH200 has H100 SXM's compute, the H20 a cut-down one.
  CHECK(catalog.gpu("GH200-144GB").peak_bf16_flops == catalog.gpu("H100-80GB").peak_bf16_flops);
  CHECK(catalog.gpu("H20").peak_bf16_flops < catalog.gpu("H100-PCIe").peak_bf16_flops);
  // Measured GEMM plateaus where the entries cite one; unmeasured types keep the profile's default (0 here).
  CHECK(catalog.gpu("B300").max_compute_efficiency == doctest::Approx(1769.0 / 2250.0));
  CHECK(catalog.gpu("MI325X").max_compute_efficiency == doctest::Approx(784.9 / 1307.4));
  CHECK(catalog.gpu("H20").max_compute_efficiency == 0);
  CHECK(catalog.gpu("MI250X").max_compute_efficiency == 0);
}

TEST_CASE("catalog: builtin fabrics") {
  const auto catalog = HardwareCatalog::builtin();
  for (const char* name : {"ib-hdr", "ib-ndr", "ib-xdr", "roce-200g", "roce-400g", "ethernet-100g", "ethernet-25g",
                           "ib-edr", "slingshot-200g", "ethernet-100g-shared"}) {
    CAPTURE(name);
    const auto& fabric = catalog.fabric(name);
    CHECK(fabric.name == name);
    CHECK(fabric.bytes_per_s_per_gpu > 0);
    CHECK(fabric.latency_s > 0);
  }
  CHECK(catalog.fabric("ib-ndr").bytes_per_s_per_gpu == doctest::Approx(400e9 / 8));
  CHECK(catalog.fabric("ethernet-25g").bytes_per_s_per_gpu == doctest::Approx(25e9 / 8));
  // Nodes with fewer NICs than GPUs (Note [Rails]): the node's network is its NICs', whatever its GPU count.
  CHECK(catalog.fabric("ib-edr").node_bytes_per_s(8) == doctest::Approx(4 * 100e9 / 8));          // DGX-1: 4 × EDR
  CHECK(catalog.fabric("slingshot-200g").node_bytes_per_s(8) == doctest::Approx(4 * 200e9 / 8));  // Frontier node
  CHECK(catalog.fabric("ethernet-100g-shared").node_bytes_per_s(8) == doctest::Approx(100e9 / 8));
  CHECK(catalog.fabric("ethernet-100g").node_bytes_per_s(8) == doctest::Approx(8 * 100e9 / 8));   // one per GPU
}

TEST_CASE("catalog: lookup is case-insensitive, unknown names get suggestions") {
  const auto catalog = HardwareCatalog::builtin();
  CHECK(catalog.gpu("h100-80gb").name == "H100-80GB");
  CHECK(catalog.fabric("IB-NDR").name == "ib-ndr");

  const auto typo = input_error([&] { catalog.gpu("H100-80G"); });
  CHECK(contains(typo, "unknown GPU 'H100-80G'"));
  CHECK(contains(typo, "'H100-80GB'"));
  CHECK(contains(input_error([&] { catalog.gpu("H10-80GB"); }), "'H100-80GB'"));
  CHECK(contains(input_error([&] { catalog.fabric("ib-nd"); }), "'ib-ndr'"));
}

TEST_CASE("catalog: merge_user_json overrides only the fields it gives") {
  auto catalog = HardwareCatalog::builtin();
  const auto before = catalog.gpu("H100-80GB");
  catalog.merge_user_json(
      {{"schema", "shardplan.catalog/v1"}, {"gpus", {{{"name", "h100-80gb"}, {"price_per_gpu_hour", 1.5}}}}}, "test");
  const auto& after = catalog.gpu("H100-80GB");
  CHECK(after.name == "H100-80GB");  // the canonical name survives a differently-cased override
  CHECK(after.price_per_gpu_hour == doctest::Approx(1.5));
  CHECK(after.memory_bytes == before.memory_bytes);
  CHECK(after.peak_bf16_flops == before.peak_bf16_flops);
  CHECK(after.default_fabric == before.default_fabric);
  CHECK(catalog.gpus().size() == HardwareCatalog::builtin().gpus().size());
}

TEST_CASE("catalog: merge_user_json adds a GPU and a fabric with sensible defaults") {
  auto catalog = HardwareCatalog::builtin();
  const nlohmann::json document = {
      {"fabrics", {{{"name", "slingshot-200g"}, {"bytes_per_s_per_gpu", 25e9}}}},
      {"gpus",
       {{{"name", "TestGPU"}, {"memory_gib", 16}, {"peak_bf16_flops", 160e12}, {"hbm_bytes_per_s", 1e12},
         {"default_fabric", "slingshot-200g"}}}}};
  catalog.merge_user_json(document, "test");
  const auto& gpu = catalog.gpu("testgpu");
  CHECK(gpu.memory_bytes == 16LL << 30);
  CHECK(gpu.peak_fp16_flops == doctest::Approx(160e12));
  CHECK(gpu.peak_fp32_flops == doctest::Approx(10e12));
  CHECK(gpu.intra_node_bytes_per_s == doctest::Approx(32e9));
  CHECK(gpu.intra_node_latency_s > 0);
  CHECK(gpu.default_gpus_per_node == 8);
  CHECK(catalog.fabric("slingshot-200g").latency_s > 0);
  CHECK(parse_cluster("2x4xTestGPU", catalog).fabric.name == "slingshot-200g");
}

TEST_CASE("catalog: bad user catalogs name the field and leave the catalog unchanged") {
  auto catalog = HardwareCatalog::builtin();
  const auto merge = [&](const nlohmann::json& document) {
    return input_error([&] { catalog.merge_user_json(document, "mine.json"); });
  };
  const auto schema = merge({{"schema", "shardplan.model/v1"}});
  CHECK(contains(schema, "mine.json"));
  CHECK(contains(schema, "'schema'"));
  CHECK(contains(schema, "shardplan.catalog/v1"));

  const auto typo = merge({{"gpus", {{{"name", "H100-80GB"}, {"memroy_bytes", 1}}}}});
  CHECK(contains(typo, "gpus[0].memroy_bytes"));
  CHECK(contains(typo, "'memory_bytes'"));

  CHECK(contains(merge({{"gpus", {{{"name", "H100-80GB"}, {"hbm_bytes_per_s", -1}}}}}), "gpus[0].hbm_bytes_per_s"));
  CHECK(contains(merge({{"gpus", {{{"name", "H100-80GB"}, {"peak_bf16_flops", 0}}}}}), "gpus[0].peak_bf16_flops"));
  CHECK(contains(merge({{"fabrics", {{{"name", "ib-ndr"}, {"latency_s", -5e-6}}}}}), "fabrics[0].latency_s"));
  CHECK(contains(merge({{"gpus", {{{"name", "New"}, {"memory_bytes", 1LL << 34}, {"peak_bf16_flops", 1e14}}}}}),
                 "gpus[0].hbm_bytes_per_s"));
  CHECK(contains(merge({{"gpus", {{{"name", "New"}, {"peak_bf16_flops", 1e14}, {"hbm_bytes_per_s", 1e12}}}}}),
                 "gpus[0].memory_bytes"));
  CHECK(contains(merge({{"gpus", {{{"name", "H100-80GB"}, {"memory_bytes", 1}, {"memory_gib", 1}}}}}),
                 "memory_gib"));
  CHECK(contains(merge({{"gpus", {{{"name", "H100-80GB"}, {"default_fabric", "ib-nrd"}}}}}), "'ib-ndr'"));
  CHECK(contains(merge({{"gpus", {{{"name", "8GPU"}, {"memory_gib", 8}}}}}), "gpus[0].name"));
  CHECK(contains(merge({{"gpus", nlohmann::json::array({"H100-80GB"})}}), "gpus[0]"));
  // The price override in the first entry must not stick when the second entry is bad.
  merge({{"gpus", {{{"name", "A100-40GB"}, {"price_per_gpu_hour", 9.0}}, {{"name", "A100-80GB"}, {"memory_gib", -1}}}}});
  CHECK(catalog.gpu("A100-40GB").price_per_gpu_hour == doctest::Approx(1.29));
}

TEST_CASE("catalog: the example user catalog file") {
  auto catalog = HardwareCatalog::builtin();
  catalog.merge_user_file(kExamples + "my-catalog.json");
  CHECK_THROWS_AS(HardwareCatalog::builtin().gpu("A40"), InputError);  // the example adds what the builtin lacks
  const auto& added = catalog.gpu("A40");
  CHECK(added.memory_bytes == 46068LL * 1024 * 1024);
  CHECK(added.peak_fp16_flops == doctest::Approx(added.peak_bf16_flops));
  CHECK(added.default_gpus_per_node == 4);
  CHECK(catalog.fabric("roce-100g").bytes_per_s_per_gpu == doctest::Approx(12.5e9));
  CHECK(catalog.gpu("H100-80GB").price_per_gpu_hour == doctest::Approx(2.49));
  const Cluster cluster = parse_cluster("8xA40", catalog);
  CHECK(cluster.nodes == 2);
  CHECK(cluster.gpus_per_node == 4);
  CHECK(cluster.fabric.name == "roce-100g");
  CHECK(contains(input_error([] { HardwareCatalog::builtin().merge_user_file("no/such/catalog.json"); }),
                 "no/such/catalog.json"));
}

TEST_CASE("catalog: to_json emits every field and reads back") {
  const auto catalog = HardwareCatalog::builtin();
  const auto json = to_json(catalog.gpu("MI300X"));
  // The 16 datasheet and node fields, its fp8 peak (written for GPUs with fp8 only) and the kernel rates the entry
  // sets, its fp8 GEMM plateau and fixed cost among them (unset ones are left out: the profile's defaults).
  CHECK(json.size() == 16 + 1 + 10);
  CHECK(json.at("fp8_compute_efficiency") == doctest::Approx(1150.0 / 2614.9));
  CHECK(json.at("peak_fp8_flops") == 2614.9e12);
  CHECK_FALSE(to_json(catalog.gpu("A100-80GB")).contains("peak_fp8_flops"));
  CHECK(json.at("memory_bytes").get<std::int64_t>() == catalog.gpu("MI300X").memory_bytes);
  CHECK(json.at("max_compute_efficiency") == 0.55);
  CHECK_FALSE(json.contains("nvls_bus_bytes_per_s"));
  CHECK(to_json(catalog.fabric("ib-hdr")).size() == 5);  // and its measured NIC efficiency

  auto copy = json;
  copy["name"] = "MI300X-copy";
  auto extended = catalog;
  extended.merge_user_json({{"gpus", {copy}}}, "round-trip");
  CHECK(to_json(extended.gpu("MI300X-copy")).at("peak_fp32_flops") == json.at("peak_fp32_flops"));
  CHECK(to_json(extended.gpu("MI300X-copy")).at("context_overhead_bytes") == json.at("context_overhead_bytes"));
}

TEST_CASE("cluster: string forms") {
  const auto catalog = HardwareCatalog::builtin();
  const Cluster one = parse_cluster("8xH100-80GB", catalog);
  CHECK(one.nodes == 1);
  CHECK(one.gpus_per_node == 8);
  CHECK(one.fabric.name == "ib-ndr");
  CHECK(one.price_per_gpu_hour == doctest::Approx(2.99));

  const Cluster many = parse_cluster("4x8xH100-80GB", catalog);
  CHECK(many.nodes == 4);
  CHECK(many.gpus_per_node == 8);
  CHECK(many.world_size() == 32);
  CHECK(many.describe() == "4 \xC3\x97 8 \xC3\x97 H100-80GB over ib-ndr (32 GPUs)");

  const Cluster sixteen = parse_cluster("16xH100-80GB", catalog);
  CHECK(sixteen.nodes == 2);
  CHECK(sixteen.gpus_per_node == 8);

  CHECK(parse_cluster("2xcpu", catalog).world_size() == 2);
  CHECK(parse_cluster("2xcpu", catalog).gpu.name == "cpu");
  // CPU ranks of one host are one node, however many cores the host has (mpirun --oversubscribe).
  CHECK(parse_cluster("64xcpu", catalog).nodes == 1);
  CHECK(parse_cluster("2x4xcpu", catalog).nodes == 2);
  CHECK(parse_cluster("1xA100-40GB", catalog).world_size() == 1);
  CHECK(parse_cluster("3x5xA100-80GB", catalog).world_size() == 15);  // explicit form allows any board size
  CHECK(parse_cluster("2x8xMI300X", catalog).gpu.name == "MI300X");
  CHECK(parse_cluster("8xrtx4090", catalog).gpu.name == "RTX4090");
  CHECK(parse_cluster("8XB200", catalog).fabric.name == "ib-xdr");
  // Every builtin name parses in both forms; those with an 'x' ("RTX6000-Ada", "MI250X") are not split at it.
  for (const std::string& name : kBuiltinGpus) {
    if (name == "cpu") continue;
    CAPTURE(name);
    const Cluster two_nodes = parse_cluster("2x8x" + name, catalog);
    CHECK(two_nodes.gpu.name == name);
    CHECK(two_nodes.world_size() == 16);
    const Cluster one = parse_cluster("1x" + name, catalog);
    CHECK(one.world_size() == 1);
    CHECK(one.fabric.name == catalog.gpu(name).default_fabric);
  }
  CHECK(parse_cluster("2x8xH100-PCIe", catalog).fabric.name == "roce-200g");
  CHECK(parse_cluster("8xRTX6000-Ada", catalog).nodes == 2);  // 4-GPU workstations
  CHECK(parse_cluster("8xmi250x", catalog).nodes == 1);       // one Frontier node: 4 packages = 8 GCDs
  CHECK(parse_cluster("16xMI250X", catalog).fabric.name == "slingshot-200g");
  CHECK(parse_cluster("4xGH200-144GB", catalog).nodes == 4);  // one superchip per node
  // GB200's node is its NVL72 NVLink domain: 72 GPUs on NVLink, racks over the fabric.
  CHECK(parse_cluster("72xGB200", catalog).nodes == 1);
  CHECK(parse_cluster("144xGB200", catalog).nodes == 2);
  CHECK(parse_cluster("8xGB200", catalog).gpus_per_node == 8);
  CHECK(contains(input_error([&] { parse_cluster("100xGB200", catalog); }), "nodes of 72"));
  CHECK(parse_cluster("16xV100-32GB", catalog).fabric.name == "ib-edr");
  // What describe() prints parses back.
  CHECK(parse_cluster(many.describe().substr(0, many.describe().find(" over")), catalog).world_size() == 32);
}

TEST_CASE("cluster: bad strings are one-line InputErrors naming the string") {
  const auto catalog = HardwareCatalog::builtin();
  for (const char* text : {"0xH100-80GB", "-1x8xH100", "x8xH100", "4x8x", "4x8", "8", "8xFoo", "ax8xH100-80GB",
                           "4xax8xH100-80GB", "1.5xH100-80GB", "4x0xH100-80GB", "2000000xH100-80GB",
                           "1000x1001xH100-80GB", "99999999999999999999999xH100-80GB", "12xH100-80GB", "H100-80GB",
                           "", "xH100-80GB", "4x-2xH100-80GB"}) {
    CAPTURE(text);
    const auto message = input_error([&] { parse_cluster(text, catalog); });
    CHECK(contains(message, "cluster '" + std::string(text) + "'"));
    CHECK(!contains(message, "\n"));
  }
  CHECK(contains(input_error([&] { parse_cluster("0xH100-80GB", catalog); }), "at least 1"));
  CHECK(contains(input_error([&] { parse_cluster("-1x8xH100", catalog); }), "positive"));
  CHECK(contains(input_error([&] { parse_cluster("4x8x", catalog); }), "missing GPU type"));
  CHECK(contains(input_error([&] { parse_cluster("2000000xH100-80GB", catalog); }), "absurd"));
  CHECK(contains(input_error([&] { parse_cluster("12xH100-80GB", catalog); }), "NODESxGPUSxTYPE"));
  CHECK(contains(input_error([&] { parse_cluster("H100-80GB", catalog); }), "missing GPU count"));

  const auto unknown = input_error([&] { parse_cluster("8xH100-80G", catalog); });
  CHECK(contains(unknown, "unknown GPU 'H100-80G'"));
  CHECK(contains(unknown, "'H100-80GB'"));
  CHECK(contains(input_error([&] { parse_cluster("4x8xH100", catalog); }), "'H100-80GB'"));
}

TEST_CASE("cluster: JSON example files") {
  const auto catalog = HardwareCatalog::builtin();
  const Cluster h100 = parse_cluster(kExamples + "2x8xH100-ib-ndr.json", catalog);
  CHECK(h100.world_size() == 16);
  CHECK(h100.fabric.name == "ib-ndr");
  CHECK(h100.price_per_gpu_hour == doctest::Approx(2.25));
  CHECK(h100.gpu.price_per_gpu_hour == doctest::Approx(2.99));  // the override is the cluster's, not the GPU's

  const Cluster inline_catalog = parse_cluster(kExamples + "2x4xA40-inline-catalog.json", catalog);
  CHECK(inline_catalog.world_size() == 8);
  CHECK(inline_catalog.gpu.name == "A40");
  CHECK(inline_catalog.gpu.memory_bytes == std::llround(44.99 * (1LL << 30)));
  CHECK(inline_catalog.fabric.name == "ethernet-25g");
  CHECK(inline_catalog.price_per_gpu_hour == 0);
  CHECK_THROWS_AS(catalog.gpu("A40"), InputError);  // the caller's catalog is untouched

  const auto json = to_json(h100);
  CHECK(json.at("schema") == "shardplan.cluster/v1");
  CHECK(json.at("world_size") == 16);
  CHECK(json.at("gpu").at("name") == "H100-80GB");
  CHECK(json.at("fabric").at("name") == "ib-ndr");
  CHECK(json.at("price_per_gpu_hour") == 2.25);
}

TEST_CASE("cluster: bad cluster JSON names the file and the field") {
  const auto catalog = HardwareCatalog::builtin();
  const auto from = [&](const nlohmann::json& document) {
    return input_error([&] { cluster_from_json(document, "c.json", catalog); });
  };
  CHECK(contains(from({{"schema", "shardplan.catalog/v1"}, {"gpu", "B200"}}), "shardplan.cluster/v1"));
  CHECK(contains(from({{"gpu", "B200"}, {"node", 2}}), "'nodes'"));
  CHECK(contains(from({{"gpu", "B20"}}), "'B200'"));
  CHECK(contains(from({{"gpu", "B200"}, {"nodes", 0}}), "'nodes'"));
  CHECK(contains(from({{"gpu", "B200"}, {"gpus_per_node", -8}}), "'gpus_per_node'"));
  CHECK(contains(from({{"gpu", "B200"}, {"nodes", 2000}, {"gpus_per_node", 1000}}), "1000000"));
  CHECK(contains(from({{"gpu", "B200"}, {"fabric", "ib-xrd"}}), "'ib-xdr'"));
  CHECK(contains(from({{"gpu", "B200"}, {"price_per_gpu_hour", -1}}), "'price_per_gpu_hour'"));
  CHECK(contains(from({{"gpu", "New"}, {"catalog", {{"gpus", {{{"name", "New"}}}}}}}), "catalog.gpus[0]"));
  CHECK(contains(from({{"nodes", 2}}), "'gpu'"));
  CHECK(cluster_from_json({{"gpu", "B200"}}, "c.json", catalog).world_size() == 8);  // gpus_per_node defaults
  CHECK(contains(input_error([&] { parse_cluster("missing-cluster.json", catalog); }), "missing-cluster.json"));
}

TEST_CASE("cluster: malformed JSON reports line:column") {
  CHECK(contains(input_error([] { shardplan::parse_json_text("{\n  \"gpu\": \"B200\",\n  \"nodes\": ,\n}", "x.json"); }),
                 "x.json:3:"));

  const auto path = (std::filesystem::temp_directory_path() / "shardplan_test_bad_cluster.json").string();
  {
    std::ofstream file(path);
    file << "{\n  \"gpu\": \"H100-80GB\",\n  \"nodes\": 2\n  \"fabric\": \"ib-ndr\"\n}\n";
  }
  const auto message = input_error([&] { parse_cluster(path, HardwareCatalog::builtin()); });
  std::filesystem::remove(path);
  CHECK(contains(message, path + ":4:"));
}
