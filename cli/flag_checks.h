// CLI11 validators run as flags are parsed, before any work: numeric ranges (Note [Input limits]) and output paths.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace shardplan::cli {

// An integer in [least, most], written in decimal: "4294967297" for an int flag is refused, never narrowed, and the
// range shows in --help.
CLI::Validator int_range(std::int64_t least, std::int64_t most);

// A finite number in [least, most]. CLI11's own Range lets "nan" through (every comparison with NaN is false) and
// "inf" past no upper bound; this refuses both.
CLI::Validator finite_range(double least, double most);

// An output file flag (Note [Output files] in traces/output_files.h): a name is given, the target is a regular file or
// absent, its directory exists or can be created and takes a new file. Checked when parsed, so before any work.
CLI::Validator output_file(const std::string& flag);
// An output directory flag: a directory, or one that can be created (check_output_directory).
CLI::Validator output_directory(const std::string& flag);

}  // namespace shardplan::cli
