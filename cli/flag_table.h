// The flag table: every command's options as data (flag, Python name, type, default, help), read off the CLI11 app
// itself. The Python API's signatures, the man page and the shell completions are all generated from it, so none of
// them can drift from the flags the parser accepts (issue 36).
#pragma once

#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace shardplan::cli {

// Note [Flag table]: one entry per visible command of `root` (hidden ones, in group "", are left out):
//   {"command", "description", "options": [{"flag": "--seq-len", "short": "", "name": "seq_len",
//     "type": "int" | "float" | "str" | "bool", "multiple": bool, "required": bool, "default": "..." | null,
//     "help": "..."}]}
// "bool" is a flag that takes no value; "multiple" an option that takes a list (repeated, or comma-separated where
// its help says so). --help and --json are left out: every caller of the table adds them itself.
nlohmann::json flag_table(const CLI::App& root);

// The Python keyword for a flag: "--seq-len" -> "seq_len".
std::string python_name(const std::string& flag);

}  // namespace shardplan::cli
