// Fuzz-like tests of the input loaders: deterministic mutations of the shipped example JSON files must be either
// accepted or rejected with shardplan::InputError (one line, naming the input) — never any other exception.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "cluster.h"
#include "errors.h"
#include "fuzz_mutations.h"
#include "hardware_catalog.h"
#include "json_input.h"
#include "model_source.h"

namespace {

using nlohmann::json;
using shardplan::InputError;
using fuzz_mutations::text_mutations;
using fuzz_mutations::value_mutations;
using fuzz_mutations::collect_pointers;

// Fixed seed: every run feeds the same inputs, so a failure reproduces.
constexpr std::uint32_t kSeed = 0x5eed2024;

enum class InputKind { model, cluster, catalog };

struct ExampleFile {
  std::string path;
  InputKind kind;
  std::string text;
};

std::string read_file(const std::string& path) {
  std::ifstream stream(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>());
}

// The shipped examples, sorted by path so the mutation sequence does not depend on directory order. Tests run from the
// repository root (meson's workdir).
std::vector<ExampleFile> example_files() {
  std::vector<ExampleFile> files;
  for (const std::string folder : {"examples/hf", "examples/models", "examples/clusters"}) {
    if (!std::filesystem::is_directory(folder)) continue;
    for (const auto& entry : std::filesystem::directory_iterator(folder)) {
      if (entry.path().extension() != ".json") continue;
      ExampleFile file{entry.path().string(), InputKind::model, read_file(entry.path().string())};
      if (folder == std::string("examples/clusters")) {
        // A user catalog lives beside the cluster files; it is read by a different loader.
        file.kind = file.text.find("shardplan.catalog/v1") != std::string::npos ? InputKind::catalog
                                                                                 : InputKind::cluster;
      }
      files.push_back(std::move(file));
    }
  }
  std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
  return files;
}

const shardplan::HardwareCatalog& builtin_catalog() {
  static const shardplan::HardwareCatalog catalog = shardplan::HardwareCatalog::builtin();
  return catalog;
}

void load_document(InputKind kind, const json& document, const std::string& origin) {
  switch (kind) {
    case InputKind::model: shardplan::model_from_document(document, "fuzz", origin); break;
    case InputKind::cluster: shardplan::cluster_from_json(document, origin, builtin_catalog()); break;
    case InputKind::catalog: {
      shardplan::HardwareCatalog catalog = builtin_catalog();
      catalog.merge_user_json(document, origin);
      break;
    }
  }
}

void load_text(InputKind kind, const std::string& text, const std::string& origin) {
  load_document(kind, shardplan::parse_json_text(text, origin), origin);
}

// Printable excerpt of a mutated input for failure messages: up to 160 bytes from `from`.
std::string excerpt(const std::string& text, std::size_t from = 0) {
  from = std::min(from, text.size());
  std::string shown = from > 0 ? "..." : "";
  for (char c : text.substr(from, 160)) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f) {
      shown += c;
    } else {
      shown += "\\x" + std::string(1, "0123456789abcdef"[byte >> 4]) + "0123456789abcdef"[byte & 15];
    }
  }
  return from + 160 < text.size() ? shown + "..." : shown;
}

// Where `mutated` first differs from `original`, less some context, so a failure shows the mutation itself.
std::size_t context_start(const std::string& original, const std::string& mutated) {
  std::size_t i = 0;
  while (i < original.size() && i < mutated.size() && original[i] == mutated[i]) ++i;
  return i > 60 ? i - 60 : 0;
}

// Runs one attempt and sorts the outcome; anything but InputError is recorded as a failure with the input.
class Tally {
 public:
  explicit Tally(std::string label) : label_(std::move(label)) {}

  // The unmutated text of the current file, to locate mutations in failure messages.
  void set_original(const std::string& original) { original_ = original; }

  void attempt(const std::string& input, const std::function<void()>& action) {
    ++attempts_;
    try {
      action();
      ++accepted_;
    } catch (const InputError& error) {
      ++rejected_;
      last_message_ = error.what();
    } catch (const std::exception& error) {
      record_failure(input, std::string("non-InputError exception: ") + error.what());
    } catch (...) {
      record_failure(input, "non-std exception");
    }
  }

  int attempts() const { return attempts_; }
  int accepted() const { return accepted_; }
  int rejected() const { return rejected_; }
  int failures() const { return failures_; }
  const std::string& last_message() const { return last_message_; }

 private:
  void record_failure(const std::string& input, const std::string& what) {
    ++failures_;
    if (failures_ <= 10) {
      FAIL_CHECK(label_ << ": " << what << "\n  input: " << excerpt(input, context_start(original_, input)));
    }
  }

  std::string label_;
  int attempts_ = 0, accepted_ = 0, rejected_ = 0, failures_ = 0;
  std::string last_message_;
  std::string original_;
};

// A temp file per process, rewritten for each sampled mutation (load_model and parse_cluster read files).
class ScratchFile {
 public:
  ScratchFile() {
    path_ = (std::filesystem::temp_directory_path() / ("shardplan-fuzz-" + std::to_string(::getpid()) + ".json"))
                .string();
  }
  ~ScratchFile() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  const std::string& write(const std::string& contents) {
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << contents;
    return path_;
  }

 private:
  std::string path_;
};

void load_file(InputKind kind, const std::string& path) {
  switch (kind) {
    case InputKind::model: shardplan::load_model(path); break;
    case InputKind::cluster: shardplan::parse_cluster(path, builtin_catalog()); break;
    case InputKind::catalog: {
      shardplan::HardwareCatalog catalog = builtin_catalog();
      catalog.merge_user_file(path);
      break;
    }
  }
}

}  // namespace

TEST_CASE("fuzz: the unmutated example files load") {
  const auto files = example_files();
  // 9 Hugging Face configs, the example models and the cluster files: all must be found.
  REQUIRE(files.size() >= 12);
  int models = 0, clusters = 0, catalogs = 0;
  for (const auto& file : files) {
    CAPTURE(file.path);
    CHECK_NOTHROW(load_text(file.kind, file.text, file.path));
    CHECK_NOTHROW(load_file(file.kind, file.path));
    models += file.kind == InputKind::model;
    clusters += file.kind == InputKind::cluster;
    catalogs += file.kind == InputKind::catalog;
  }
  CHECK(models >= 10);
  CHECK(clusters >= 2);
  CHECK(catalogs >= 1);
}

TEST_CASE("fuzz: text mutations of the examples are accepted or rejected with InputError only") {
  std::mt19937 rng(kSeed);
  ScratchFile scratch;
  Tally truncations("truncation"), others("text mutation"), via_files("file mutation");
  for (const auto& file : example_files()) {
    truncations.set_original(file.text);
    others.set_original(file.text);
    via_files.set_original(file.text);
    const auto mutations = text_mutations(file.text, rng);
    const std::size_t step = std::max<std::size_t>(1, file.text.size() / 80);
    const std::size_t truncation_count = (file.text.size() + step - 1) / step;
    for (std::size_t i = 0; i < mutations.size(); ++i) {
      const std::string& text = mutations[i];
      const std::string origin = file.path + "#" + std::to_string(i);
      Tally& tally = i < truncation_count ? truncations : others;
      tally.attempt(text, [&] { load_text(file.kind, text, origin); });
      if (i % 7 == 0) {
        // A sample also goes through the file-reading entry points the CLI uses.
        const std::string& path = scratch.write(text);
        via_files.attempt(text, [&] { load_file(file.kind, path); });
      }
    }
  }
  CHECK(truncations.failures() == 0);
  CHECK(others.failures() == 0);
  CHECK(via_files.failures() == 0);
  MESSAGE("truncations: " << truncations.attempts() << " tried, " << truncations.rejected() << " rejected; others: "
                          << others.attempts() << " tried, " << others.rejected() << " rejected");
  // A truncated JSON document is malformed unless only trailing whitespace was cut; the empty prefix is one of them.
  CHECK(truncations.attempts() > 1000);
  CHECK(truncations.rejected() >= truncations.attempts() * 95 / 100);
  CHECK(others.attempts() > 10000);
  CHECK(others.rejected() >= others.attempts() / 2);
  CHECK(others.accepted() > 0);  // e.g. a space replaced by a newline
  CHECK(via_files.attempts() > 1000);
  CHECK(via_files.rejected() >= via_files.attempts() / 2);
}

TEST_CASE("fuzz: odd values at every key path are accepted or rejected with InputError only") {
  Tally tally("value mutation");
  for (const auto& file : example_files()) {
    const json document = json::parse(file.text);
    tally.set_original(document.dump());
    const auto mutations = value_mutations(document);
    for (std::size_t i = 0; i < mutations.size(); ++i) {
      const std::string origin = file.path + "@" + std::to_string(i);
      tally.attempt(mutations[i].dump(), [&] { load_document(file.kind, mutations[i], origin); });
    }
  }
  CHECK(tally.failures() == 0);
  MESSAGE("value mutations: " << tally.attempts() << " tried, " << tally.rejected() << " rejected");
  CHECK(tally.attempts() > 3000);
  // Unknown keys, "description" and other free text make some mutations harmless; most are not.
  CHECK(tally.rejected() >= tally.attempts() / 2);
  CHECK(tally.accepted() > 0);
}

TEST_CASE("fuzz: each example fed to the other loaders is rejected with InputError") {
  Tally tally("cross-fed document");
  int attempts_expected = 0;
  for (const auto& file : example_files()) {
    const json document = json::parse(file.text);
    for (const InputKind other : {InputKind::model, InputKind::cluster, InputKind::catalog}) {
      if (other == file.kind) continue;
      ++attempts_expected;
      tally.attempt(file.text, [&] { load_document(other, document, file.path); });
    }
  }
  CHECK(tally.failures() == 0);
  CHECK(tally.attempts() == attempts_expected);
  CHECK(tally.rejected() == tally.attempts());
}

TEST_CASE("fuzz: random multi-byte corruption of the examples never escapes as another exception") {
  std::mt19937 rng(kSeed + 1);
  Tally tally("multi-byte corruption");
  static constexpr char kAlphabet[] = "{}[]\":,-+.0123456789eEtrufalsn \n\t\\/x\0\xc3\xa9\xff";
  const std::string alphabet(kAlphabet, sizeof kAlphabet - 1);
  for (const auto& file : example_files()) {
    tally.set_original(file.text);
    for (int round = 0; round < 150; ++round) {
      std::string text = file.text;
      const int edits = 2 + static_cast<int>(rng() % 6);
      for (int e = 0; e < edits && !text.empty(); ++e) text[rng() % text.size()] = alphabet[rng() % alphabet.size()];
      tally.attempt(text, [&] { load_text(file.kind, text, file.path); });
    }
  }
  CHECK(tally.failures() == 0);
  CHECK(tally.attempts() >= 150 * 12);
  CHECK(tally.rejected() >= tally.attempts() / 2);
}

TEST_CASE("fuzz: every InputError of a value mutation is one non-empty line naming the input") {
  // The CLI prints the message after "shardplan: error: " as one line; the origin lets the user find the file.
  int checked = 0, multi_line = 0, unnamed = 0;
  std::string first_bad;
  for (const auto& file : example_files()) {
    const json document = json::parse(file.text);
    std::vector<json> mutations = value_mutations(document);
    // Strings and keys with a newline inside: a message that echoes them must still be one line.
    std::vector<json::json_pointer> pointers;
    collect_pointers(document, json::json_pointer(), pointers);
    for (const auto& pointer : pointers) {
      if (document[pointer].is_string()) {
        json mutated = document;
        mutated[pointer] = document[pointer].get<std::string>() + "\nsecond line";
        mutations.push_back(std::move(mutated));
      }
      json renamed = document;
      json& parent = renamed[pointer.parent_pointer()];
      if (parent.is_object()) {
        parent[pointer.back() + "\nx"] = parent[pointer.back()];
        parent.erase(pointer.back());
        mutations.push_back(std::move(renamed));
      }
    }
    for (const auto& mutated : mutations) {
      const std::string origin = "fuzz-origin/" + std::filesystem::path(file.path).filename().string();
      try {
        load_document(file.kind, mutated, origin);
      } catch (const InputError& error) {
        ++checked;
        const std::string message = error.what();
        const bool one_line = !message.empty() && message.find('\n') == std::string::npos;
        const bool named = message.find(origin) != std::string::npos;
        multi_line += !one_line;
        unnamed += !named;
        if ((!one_line || !named) && first_bad.empty()) first_bad = excerpt(message) + "  <- " + excerpt(mutated.dump());
      } catch (...) {
        // Other exceptions are the other tests' business.
      }
    }
  }
  CAPTURE(first_bad);
  CHECK(checked > 3000);
  CHECK(unnamed == 0);
  CHECK(multi_line == 0);
}
