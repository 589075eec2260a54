// The preset table: hyper-parameters from each model's published Hugging Face config.json or paper.
#include "model_presets.h"

#include "decoder_builder.h"
#include "errors.h"
#include "name_suggest.h"

namespace shardplan {
namespace {

DecoderArchitecture llama(std::int64_t vocab, std::int64_t hidden, std::int64_t intermediate, std::int64_t layers,
                          std::int64_t heads, std::int64_t kv_heads, std::int64_t max_positions) {
  DecoderArchitecture arch;
  arch.family = DecoderArchitecture::Family::llama;
  arch.vocab_size = vocab;
  arch.hidden_size = hidden;
  arch.intermediate_size = intermediate;
  arch.num_layers = layers;
  arch.num_heads = heads;
  arch.num_kv_heads = kv_heads;
  arch.max_position_embeddings = max_positions;
  return arch;
}

DecoderArchitecture gpt(std::int64_t vocab, std::int64_t hidden, std::int64_t layers, std::int64_t heads,
                        std::int64_t max_positions) {
  DecoderArchitecture arch = llama(vocab, hidden, 4 * hidden, layers, heads, heads, max_positions);
  arch.family = DecoderArchitecture::Family::gpt2;
  arch.tie_word_embeddings = true;
  arch.dropout = 0.1;  // GPT-2 config.json: resid_pdrop = attn_pdrop = embd_pdrop = 0.1
  return arch;
}

DecoderArchitecture tied(DecoderArchitecture arch) {
  arch.tie_word_embeddings = true;
  return arch;
}

}  // namespace

const std::vector<ModelPreset>& model_presets() {
  // Function-local so there is no global initialisation order to worry about; built once.
  static const std::vector<ModelPreset> presets = {
      {"llama2-7b", "Llama 2 7B (meta-llama/Llama-2-7b-hf config.json)",
       llama(32000, 4096, 11008, 32, 32, 32, 4096), 4096},
      {"llama2-13b", "Llama 2 13B (meta-llama/Llama-2-13b-hf config.json)",
       llama(32000, 5120, 13824, 40, 40, 40, 4096), 4096},
      {"llama2-70b", "Llama 2 70B, GQA with 8 kv heads (meta-llama/Llama-2-70b-hf config.json)",
       llama(32000, 8192, 28672, 80, 64, 8, 4096), 4096},
      {"llama3-8b", "Llama 3 8B (meta-llama/Meta-Llama-3-8B config.json)",
       llama(128256, 4096, 14336, 32, 32, 8, 8192), 8192},
      {"llama3-70b", "Llama 3 70B (meta-llama/Meta-Llama-3-70B config.json)",
       llama(128256, 8192, 28672, 80, 64, 8, 8192), 8192},
      {"llama3.1-405b", "Llama 3.1 405B (meta-llama/Llama-3.1-405B config.json)",
       llama(128256, 16384, 53248, 126, 128, 8, 131072), 8192},
      // Tied input and output embeddings (config.json: tie_word_embeddings = true); 1,235,814,400 parameters. The
      // ~1B model the GPU check trains at world size 1.
      {"llama3.2-1b", "Llama 3.2 1B, tied embeddings (meta-llama/Llama-3.2-1B config.json)", tied(llama(128256, 2048, 8192, 16, 32, 8, 131072)), 8192},
      {"gpt3-175b", "GPT-3 175B (Brown et al. 2020, Table 2.1: 96 layers, d_model 12288, 96 heads, context 2048)",
       gpt(50257, 12288, 96, 96, 2048), 2048},
      {"gpt2", "GPT-2 124M (openai-community/gpt2 config.json)", gpt(50257, 768, 12, 12, 1024), 1024},
      // Byte-level vocabulary so the CPU executor can train on raw text; ~0.8 M parameters (~3 MB in fp32).
      {"tiny-llama", "a llama-family toy for the executor: 4 layers, hidden 128, GQA 4/2 heads, byte vocabulary",
       llama(256, 128, 352, 4, 4, 2, 512), 128},
  };
  return presets;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& preset : model_presets()) names.push_back(preset.name);
  return names;
}

std::optional<ModelPreset> find_model_preset(const std::string& name) {
  for (const auto& preset : model_presets()) {
    if (preset.name == name) return preset;
  }
  return std::nullopt;
}

ModelSpec preset_model(const std::string& name) {
  const auto preset = find_model_preset(name);
  if (!preset) {
    throw InputError("unknown model '" + name + "'" + did_you_mean(name, model_preset_names()) +
                     "; give a preset name (see `shardplan models`), a model JSON or a Hugging Face config.json");
  }
  ModelSpec model = build_decoder(preset->name, preset->architecture, "preset " + preset->name);
  model.default_seq_len = preset->default_seq_len;
  return model;
}

}  // namespace shardplan
