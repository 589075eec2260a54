// Note [Hub ids] (hf_hub_cache.h): a Hub model id's config.json, found where huggingface_hub caches it.
#include "hf_hub_cache.h"

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string_view>

#include "errors.h"

namespace shardplan {
namespace {

bool is_name_character(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.';
}

// One part of an id: validate_repo_id's REPO_ID_REGEX, a word of [\w\-.] that neither starts nor ends with '-' or '.'.
bool is_id_part(std::string_view part) {
  if (part.empty()) return false;
  for (const char c : part) {
    if (!is_name_character(c)) return false;
  }
  const auto edge = [](char c) { return c == '-' || c == '.'; };
  return !edge(part.front()) && !edge(part.back());
}

// A branch, tag or commit: what a refs/ file or a snapshot folder may be named (refs/pr/1 included), never a way
// out of the repository's folder.
bool is_revision(std::string_view revision) {
  if (revision.empty() || revision.size() > 256 || revision.find("..") != std::string_view::npos ||
      revision.front() == '/' || revision.back() == '/') {
    return false;
  }
  for (const char c : revision) {
    if (!is_name_character(c) && c != '/') return false;
  }
  return true;
}

struct ParsedId {
  std::string repo_id;   // org/name
  std::string name;      // name
  std::string revision;  // "main" unless given after '@'
};

std::optional<ParsedId> parse_id(const std::string& argument) {
  const std::size_t at = argument.find('@');
  const std::string repo_id = argument.substr(0, at);
  ParsedId parsed;
  parsed.repo_id = repo_id;
  parsed.revision = at == std::string::npos ? "main" : argument.substr(at + 1);
  const std::size_t slash = repo_id.find('/');
  if (slash == std::string::npos || repo_id.find('/', slash + 1) != std::string::npos) return std::nullopt;
  if (repo_id.size() > 96 || repo_id.find("--") != std::string::npos || repo_id.find("..") != std::string::npos ||
      repo_id.ends_with(".git") || repo_id.ends_with(".json")) {
    return std::nullopt;
  }
  const std::string_view view(repo_id);
  if (!is_id_part(view.substr(0, slash)) || !is_id_part(view.substr(slash + 1))) return std::nullopt;
  if (!is_revision(parsed.revision)) return std::nullopt;
  parsed.name = repo_id.substr(slash + 1);
  return parsed;
}

std::optional<std::string> environment(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

// os.path.expanduser of a leading "~" (the only expansion huggingface_hub's defaults need here).
std::filesystem::path expand_home(const std::string& path) {
  if (path == "~" || path.starts_with("~/")) {
    if (const auto home = environment("HOME")) return std::filesystem::path(*home) / path.substr(path == "~" ? 1 : 2);
  }
  return path;
}

std::string read_ref(const std::filesystem::path& file) {
  std::ifstream stream(file);
  std::string text((std::istreambuf_iterator<char>(stream)), std::istreambuf_iterator<char>());
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  return text;
}

}  // namespace

bool looks_like_hub_model_id(const std::string& argument) { return parse_id(argument).has_value(); }

std::filesystem::path hf_hub_cache_directory() {
  if (const auto cache = environment("HF_HUB_CACHE")) return expand_home(*cache);
  if (const auto legacy = environment("HUGGINGFACE_HUB_CACHE")) return expand_home(*legacy);
  if (const auto home = environment("HF_HOME")) return expand_home(*home) / "hub";
  if (const auto xdg = environment("XDG_CACHE_HOME")) return expand_home(*xdg) / "huggingface" / "hub";
  return expand_home("~/.cache") / "huggingface" / "hub";
}

HubConfig cached_hub_config(const std::string& model_id) {
  const auto parsed = parse_id(model_id);
  SHARDPLAN_CHECK(parsed.has_value(), "cached_hub_config: '" + model_id + "' is not a Hub model id");
  const std::filesystem::path cache = hf_hub_cache_directory();
  // repo_folder_name: "models" and the id's parts joined by "--".
  const std::string folder = "models--" + parsed->repo_id.substr(0, parsed->repo_id.find('/')) + "--" + parsed->name;
  const std::filesystem::path repository = cache / folder;
  std::error_code ignored;
  // try_to_load_from_cache: a revision named in refs/ resolves to its commit; otherwise it is the commit itself.
  std::string commit = parsed->revision;
  if (const auto ref = repository / "refs" / parsed->revision; std::filesystem::is_regular_file(ref, ignored)) {
    commit = read_ref(ref);
  }
  if (is_revision(commit)) {
    const std::filesystem::path config = repository / "snapshots" / commit / "config.json";
    if (std::filesystem::is_regular_file(config, ignored)) return HubConfig{config, parsed->name};
  }
  const std::string revision_flag = parsed->revision == "main" ? "" : " --revision " + parsed->revision;
  throw InputError("--model " + model_id + ": not a file, and its config.json is not in the Hugging Face cache (" +
                   cache.string() + "); download it with: hf download " + parsed->repo_id + " config.json" +
                   revision_flag);
}

}  // namespace shardplan
