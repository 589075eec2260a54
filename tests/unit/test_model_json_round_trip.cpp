// Tests of a written model read back (Note [Exact layers] in layer_json.h): sliding windows, Llama 4's chunks and NoPE
// layers kept, the same layers and the same estimate, and bad window values refused naming their field.
#include <doctest/doctest.h>

#include <string>

#include "cluster.h"
#include "errors.h"
#include "estimate.h"
#include "hardware_catalog.h"
#include "hf_example_models.h"
#include "model_json.h"
#include "model_presets.h"
#include "wrapping.h"

using namespace shardplan;

namespace {

// The model as a file holds it: written, dumped to text, parsed and read.
ModelSpec written_and_read(const ModelSpec& model) {
  return model_from_json(nlohmann::json::parse(to_json(model).dump(2)), "written.json");
}

// `estimate`'s JSON for the model on 8 H100s at `seq_len` tokens (past every window below, so windows count).
nlohmann::json estimate_json(const ModelSpec& model, std::int64_t seq_len) {
  static const HardwareCatalog catalog = HardwareCatalog::builtin();
  EstimateRequest request;
  request.model = model;
  request.cluster = parse_cluster("8xH100-80GB", catalog);
  request.profile = profile_from_cluster(request.cluster);
  request.training.seq_len = seq_len;
  request.training.checkpointing = ActivationCheckpointing::full;
  request.wrapping = wrap_per_block(request.model);
  return to_json(run_estimate(request));
}

std::size_t windowed_blocks(const ModelSpec& model, bool chunked) {
  std::size_t count = 0;
  for (const LayerSpec& layer : model.layers) {
    if (layer.flops.attention_window > 0 && layer.flops.attention_chunked == chunked) ++count;
  }
  return count;
}

std::string read_error(const nlohmann::json& document) {
  try {
    model_from_json(document, "m.json");
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

}  // namespace

TEST_CASE("model JSON round trip: windows, chunks and NoPE layers kept, the same layers and estimate") {
  struct Case {
    ModelSpec model;
    std::size_t windowed;  // blocks with a sliding window
    std::size_t chunked;   // blocks with a Llama 4 chunk
    std::int64_t seq_len;
  };
  // Gemma 2 2B alternates 4096-token windows over 26 layers (13 slide); Mistral 7B v0.1 slides 4096 on all 32;
  // Phi-3-mini-4k 2047 on all 32; Llama 4 Scout chunks 8192 on the RoPE layers, 36 of 48 (every fourth is NoPE).
  const Case cases[] = {{testing::hf_model("gemma2-2b"), 13, 0, 8192},
                        {preset_model("mistral-7b"), 32, 0, 8192},
                        {testing::hf_model("phi3-mini-4k"), 32, 0, 4096},
                        {preset_model("llama4-scout-17b-16e"), 0, 36, 16384}};
  for (const Case& each : cases) {
    CAPTURE(each.model.name);
    REQUIRE(windowed_blocks(each.model, false) == each.windowed);
    REQUIRE(windowed_blocks(each.model, true) == each.chunked);
    const ModelSpec read = written_and_read(each.model);
    CHECK(read.param_count() == each.model.param_count());
    CHECK(windowed_blocks(read, false) == each.windowed);
    CHECK(windowed_blocks(read, true) == each.chunked);
    CHECK(read.layers == each.model.layers);  // kernels (RoPE or not, each attention's window) included
    CHECK(read.forward_flops_per_token(each.seq_len, true) == each.model.forward_flops_per_token(each.seq_len, true));
    CHECK(estimate_json(read, each.seq_len) == estimate_json(each.model, each.seq_len));
    // The test can fail: the same model without its windows charges more attention past the window.
    ModelSpec unwindowed = read;
    for (LayerSpec& layer : unwindowed.layers) {
      layer.flops.attention_window = 0;
      layer.flops.attention_chunked = false;
    }
    CHECK(unwindowed.forward_flops_per_token(each.seq_len, true) > read.forward_flops_per_token(each.seq_len, true));
    // Written again, the document is the same: nothing more is lost on a second trip.
    CHECK(to_json(read) == to_json(each.model));
  }
}

TEST_CASE("model JSON: a hand-written layer's window and chunk, and bad values refused naming the field") {
  const nlohmann::json base = {{"schema", "shardplan.model/v1"}, {"hidden_size", 64}, {"num_heads", 4},
                               {"layers", {{{"name", "block"}, {"kind", "transformer_block"}, {"params", 1000}}}}};
  nlohmann::json windowed = base;
  windowed["layers"][0]["flops"] = {{"attention_window", 512}};
  const ModelSpec model = model_from_json(windowed, "m.json");
  CHECK(model.layers[0].flops.attention_window == 512);
  CHECK_FALSE(model.layers[0].flops.attention_chunked);
  CHECK(model.layers[0].flops.matmul_flops_per_token == 2000.0);  // the flat defaults stay where not given
  CHECK(model.layers[0].forward_flops_per_token(4096, true) < model_from_json(base, "m.json")
                                                                   .layers[0]
                                                                   .forward_flops_per_token(4096, true));

  nlohmann::json negative = base;
  negative["layers"][0]["flops"] = {{"attention_window", -1}};
  CHECK(read_error(negative).find("field 'layers[0].flops.attention_window'") != std::string::npos);
  nlohmann::json chunk_without_window = base;
  chunk_without_window["layers"][0]["flops"] = {{"attention_chunked", true}};
  CHECK(read_error(chunk_without_window) ==
        "m.json: field 'layers[0].flops.attention_chunked': expected false when attention_window is 0 or absent, got "
        "true");
  nlohmann::json text_window = base;
  text_window["layers"][0]["kernels"] = {{"attention", {{"heads", 4}, {"head_dim", 16}, {"window", "wide"}}}};
  CHECK(read_error(text_window).find("field 'layers[0].kernels.attention.window'") != std::string::npos);
  nlohmann::json typo = base;
  typo["layers"][0]["flops"] = {{"attention_windw", 512}};
  CHECK(read_error(typo).find("attention_window") != std::string::npos);
  nlohmann::json activations = base;
  activations["layers"][0]["activations"] = {{"elements_per_token", -5}};
  CHECK(read_error(activations).find("field 'layers[0].activations.elements_per_token'") != std::string::npos);
}
