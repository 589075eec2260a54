// A Hugging Face Hub model id given as --model ("meta-llama/Llama-3.1-70B"), read from the local Hugging Face cache.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace shardplan {

// Note [Hub ids]: huggingface_hub's cache, as its own code lays it out and reads it (huggingface_hub
// src/huggingface_hub/constants.py, file_download.py repo_folder_name and try_to_load_from_cache):
//   <cache>/models--<org>--<name>/refs/<revision>            the commit a branch or tag names ("main" by default)
//   <cache>/models--<org>--<name>/snapshots/<commit>/config.json
// where <cache> is $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE (its older name), else $HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub. A revision may follow the id after '@'
// ("org/name@v1.0", a ref name or a commit); without one it is "main". shardplan reads only config.json and never
// downloads: when the file is not cached, the error names the one command that fetches it (`hf download ID
// config.json`; huggingface_hub 1.0 retired `huggingface-cli`, src/huggingface_hub/cli/deprecated_cli.py).

// Whether `argument` has the form of a Hub model id with its namespace, "org/name" (huggingface_hub
// utils/_validators.py validate_repo_id: letters, digits, '-', '_', '.', no "--" or "..", at most 96 characters,
// not ending in ".git"), optionally followed by "@revision". A bare "name" is not taken for one: it is a preset.
bool looks_like_hub_model_id(const std::string& argument);

// The cache directory huggingface_hub would use, from the environment as above.
std::filesystem::path hf_hub_cache_directory();

struct HubConfig {
  std::filesystem::path config_path;  // .../snapshots/<commit>/config.json
  std::string model_name;             // the id's name part ("Llama-3.1-70B"), for the model's name
};

// The cached config.json of a Hub model id (looks_like_hub_model_id). InputError, one line, when it is not in the
// cache: it names the cache searched and the command that downloads the config.
HubConfig cached_hub_config(const std::string& model_id);

}  // namespace shardplan
