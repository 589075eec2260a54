// Dispatch of the --model argument to the preset table, the model JSON reader or the Hugging Face importer.
#include "model_source.h"

#include <filesystem>

#include "decoder_builder.h"
#include "hf_arch_gemma3_vlm.h"
#include "hf_arch_llama4.h"
#include "hf_arch_llava.h"
#include "hf_arch_qwen2_vl.h"
#include "hf_arch_vision.h"
#include "hf_config.h"
#include "hf_hub_cache.h"
#include "json_input.h"
#include "model_json.h"
#include "model_presets.h"

namespace shardplan {

ModelSpec load_model(const std::string& model_argument) {
  if (is_inline_json(model_argument)) {  // Note [Inline JSON]
    const std::string origin = json_argument_origin(model_argument, "model");
    const nlohmann::json document = parse_json_text(model_argument, origin);
    return model_from_document(document, "", origin);
  }
  // Anything but a directory (a checkout named like a preset) is a path, so a FIFO or a device is refused as such
  // (Note [Input files]), not looked up as a preset; the error_code overload, since a name past NAME_MAX (a long
  // preset name) makes the other one throw "File name too long" (exit 1).
  std::error_code error;
  const auto status = std::filesystem::symlink_status(model_argument, error);
  const bool names_file = std::filesystem::exists(status) && !std::filesystem::is_directory(status);
  const bool looks_like_path = model_argument.ends_with(".json") || model_argument.find('/') != std::string::npos;
  if (!names_file && !looks_like_path) return preset_model(model_argument);
  // A model's folder (a downloaded snapshot, a save_pretrained output): its config.json.
  const std::filesystem::path folder = std::filesystem::path(model_argument);
  if (std::filesystem::is_directory(std::filesystem::status(folder, error)) &&
      std::filesystem::is_regular_file(folder / "config.json", error)) {
    const std::string name = (folder.filename().empty() ? folder.parent_path() : folder).filename().string();
    return load_model_file((folder / "config.json").string(), name);
  }
  // Note [Hub ids]: "org/name" that is no file here is a Hugging Face Hub id, read from the local cache.
  if (!std::filesystem::exists(status) && looks_like_hub_model_id(model_argument)) {
    const HubConfig hub = cached_hub_config(model_argument);
    return load_model_file(hub.config_path.string(), hub.model_name);
  }
  return load_model_file(model_argument, "");
}

ModelSpec load_model_file(const std::string& model_argument, const std::string& name) {
  const nlohmann::json document = read_json_file(model_argument);  // names the file when it is missing
  const std::filesystem::path path(model_argument);
  const std::string stem = path.stem().string();
  const std::string hf_name = !name.empty()       ? name
                              : stem == "config" ? path.parent_path().filename().string()
                                                 : stem;
  return model_from_document(document, hf_name, model_argument);
}

ModelSpec model_from_document(const nlohmann::json& document, const std::string& name, const std::string& origin) {
  const std::string model_name = name.empty() ? "hf-model" : name;
  if (is_hf_vision_config(document)) return vision_model_from_hf_config(document, model_name, origin);
  if (is_hf_llava_config(document)) return llava_model_from_hf_config(document, model_name, origin);
  if (is_hf_gemma3_vlm_config(document)) return gemma3_vlm_model_from_hf_config(document, model_name, origin);
  if (is_hf_qwen2_vl_config(document)) return qwen2_vl_model_from_hf_config(document, model_name, origin);
  if (is_hf_llama4_config(document)) return llama4_model_from_hf_config(document, model_name, origin);
  if (looks_like_hf_config(document)) {
    return build_decoder(model_name, architecture_from_hf_config(document, origin), origin);
  }
  return model_from_json(document, origin);
}

}  // namespace shardplan
