// Tests of the hardware catalog (builtin entries, lookup, user catalogs) and of cluster parsing from strings and JSON.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

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

TEST_CASE("catalog: every builtin GPU is present with positive numbers") {
  const auto catalog = HardwareCatalog::builtin();
  for (const char* name : {"A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB", "B200", "L40S", "RTX4090", "MI300X",
                           "cpu"}) {
    CAPTURE(name);
    const auto& gpu = catalog.gpu(name);
    CHECK(gpu.name == name);
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
    CHECK_NOTHROW(catalog.fabric(gpu.default_fabric));
    if (std::string(name) != "cpu") {
      CHECK(gpu.context_overhead_bytes > 0);  // the CUDA/ROCm context (the CPU executor tracks tensors only)
      CHECK(gpu.price_per_gpu_hour > 0);
      CHECK(gpu.peak_bf16_flops > gpu.peak_fp32_flops);  // tensor cores vs plain FP32
    }
  }
  // Spot checks against the datasheets (gpu_catalog_data.cpp has the sources).
  CHECK(catalog.gpu("H100-80GB").memory_bytes == 81559LL * 1024 * 1024);
  CHECK(catalog.gpu("H100-80GB").peak_bf16_flops == doctest::Approx(989.4e12));
  CHECK(catalog.gpu("A100-80GB").hbm_bytes_per_s == doctest::Approx(2.039e12));
  CHECK(catalog.gpu("MI300X").intra_node_bytes_per_s == doctest::Approx(448e9));
  CHECK(catalog.gpu("H200-141GB").peak_bf16_flops == catalog.gpu("H100-80GB").peak_bf16_flops);
}

TEST_CASE("catalog: builtin fabrics") {
  const auto catalog = HardwareCatalog::builtin();
  for (const char* name : {"ib-hdr", "ib-ndr", "ib-xdr", "roce-200g", "roce-400g", "ethernet-100g", "ethernet-25g"}) {
    CAPTURE(name);
    const auto& fabric = catalog.fabric(name);
    CHECK(fabric.name == name);
    CHECK(fabric.bytes_per_s_per_gpu > 0);
    CHECK(fabric.latency_s > 0);
  }
  CHECK(catalog.fabric("ib-ndr").bytes_per_s_per_gpu == doctest::Approx(400e9 / 8));
  CHECK(catalog.fabric("ethernet-25g").bytes_per_s_per_gpu == doctest::Approx(25e9 / 8));
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
  // The 16 datasheet and node fields and the kernel rates the entry sets (unset ones are left out: the profile's
  // defaults).
  CHECK(json.size() == 16 + 8);
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
