// Test support for the exports: a scratch directory, and a generated script compiled with py_compile with its
// UPPER_CASE tables read back through ast.literal_eval (no torch needed).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "plan_export.h"

namespace shardplan::testing {

// A scratch directory removed when the test ends, so runs leave nothing behind.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "shardplan_export_XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::filesystem::path write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name) << text;
    return path_ / name;
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline bool have_python() { return std::system("python3 -c 'import ast, json, py_compile' >/dev/null 2>&1") == 0; }

// Reads every UPPER_CASE assignment of a generated script with ast.literal_eval (no torch needed) as JSON.
constexpr const char* kExtractor = R"PY(import ast, json, sys
values = {}
for node in ast.parse(open(sys.argv[1]).read()).body:
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id.isupper():
        values[node.targets[0].id] = ast.literal_eval(node.value)
json.dump(values, open(sys.argv[2], "w"))
)PY";

// Compiles the script with py_compile and returns its constant tables; null when python3 is missing.
inline nlohmann::json compile_and_read(const ExportedFile& file) {
  REQUIRE_MESSAGE(have_python(), "python3 (with ast, json, py_compile) not found on PATH");
  TempDir dir;
  const auto script = dir.write(file.file_name, file.contents);
  const auto extractor = dir.write("extract.py", kExtractor);
  const auto output = dir.path() / "tables.json";
  CHECK(std::system(("python3 -m py_compile '" + script.string() + "'").c_str()) == 0);
  REQUIRE(std::system(("python3 '" + extractor.string() + "' '" + script.string() + "' '" + output.string() + "'")
                          .c_str()) == 0);
  return nlohmann::json::parse(std::ifstream(output));
}

}  // namespace shardplan::testing
