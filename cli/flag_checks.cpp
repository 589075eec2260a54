// Flag validators: ranges parsed from the text itself, so the check sees exactly what was typed; output targets.
#include "flag_checks.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "errors.h"
#include "output_files.h"

namespace shardplan::cli {

namespace {

std::string shown(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

}  // namespace

CLI::Validator int_range(std::int64_t least, std::int64_t most) {
  const std::string expected = "an integer in " + std::to_string(least) + ".." + std::to_string(most);
  return CLI::Validator(
      [least, most, expected](std::string& text) -> std::string {
        std::int64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [stop, error] = std::from_chars(text.data(), end, value);
        if (error != std::errc() || stop != end || value < least || value > most) {
          return "expected " + expected + ", got '" + text + "'";
        }
        return "";
      },
      "INT in " + std::to_string(least) + ".." + std::to_string(most));
}

CLI::Validator finite_range(double least, double most) {
  const std::string expected = "a finite number in [" + shown(least) + ", " + shown(most) + "]";
  return CLI::Validator(
      [least, most, expected](std::string& text) -> std::string {
        char* stop = nullptr;
        const double value = text.empty() ? NAN : std::strtod(text.c_str(), &stop);
        if (text.empty() || *stop != '\0' || !std::isfinite(value) || value < least || value > most) {
          return "expected " + expected + ", got '" + text + "'";
        }
        return "";
      },
      "NUMBER in [" + shown(least) + ", " + shown(most) + "]");
}

namespace {
// A validator that runs `check` and turns its InputError into CLI11's message (the flag's name is CLI11's prefix).
template <typename Check>
CLI::Validator from_check(const std::string& flag, Check check, const char* description) {
  return CLI::Validator(
      [flag, check](std::string& text) -> std::string {
        try {
          check(text);
        } catch (const InputError& error) {
          // CLI11 prefixes the message with the flag ("--out: ..."); drop the check's own copy of it.
          std::string message = error.what();
          if (message.rfind(flag, 0) == 0) message.erase(0, flag.size() + (message.size() > flag.size() ? 1 : 0));
          if (message.rfind(": ", 0) == 0) message.erase(0, 2);
          return message;
        }
        return "";
      },
      description);
}
}  // namespace

CLI::Validator output_file(const std::string& flag) {
  return from_check(flag, [flag](const std::string& path) { check_output_file(path, flag); }, "FILE (written)");
}

CLI::Validator output_directory(const std::string& flag) {
  return from_check(flag, [flag](const std::string& path) { check_output_directory(path, flag); }, "DIR");
}

}  // namespace shardplan::cli
