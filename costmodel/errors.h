// Typed errors for the whole tool: InputError (the user's input is wrong, exit 2) and InternalError (a bug, exit 1).
#pragma once

#include <source_location>
#include <stdexcept>
#include <string>
#include <string_view>

namespace shardplan {

// Every error carries where it was raised (file:line of our source) and the rank that raised it, so a message from one
// rank of a distributed run can be traced back; rank is -1 outside a distributed run.
class Error : public std::runtime_error {
 public:
  // Control characters in the message (a newline inside a user's key or flag value) are escaped, so every error is
  // exactly one line, as the CLI contract promises; every value it echoes is clipped (Note [Echoed values]).
  Error(const std::string& message, int rank, std::source_location where)
      : std::runtime_error(one_line(message)), rank_(rank), where_(where) {}
  int rank() const { return rank_; }
  const std::source_location& where() const { return where_; }
  // "costmodel/model_json.cpp:42" — for --verbose output and bug reports, not for the user's one-line message.
  std::string raised_at() const;
  static std::string one_line(const std::string& text);

 private:
  int rank_;
  std::source_location where_;
};

// Note [Echoed values]: an error names the value it refuses, but the value may be a 3 MB GPU name, a 5 MB line of an
// unterminated JSON string or a 4,000-byte path. Every error line is built by Error::one_line, which clips each echoed
// value longer than limits::kMaxEchoedBytes to its first bytes (whole UTF-8 characters) and "… (N bytes)": a value in
// single quotes ('name'; an apostrophe inside a word does not open one) and any other run of non-blank bytes (a path,
// "path:12:3:"). The line as a whole stops at limits::kMaxErrorLineBytes, so no input makes an error line unbounded.
// clip_echoed() is the same clipping for a message built outside Error (the Python module's own).
std::string clip_echoed(std::string_view value);

// The user's input (a file, a flag, a preset name) is wrong. The message names the file, the field and what was
// expected, in one line. The CLI prints it and exits with status 2.
class InputError : public Error {
 public:
  explicit InputError(const std::string& message, std::source_location where = std::source_location::current(),
                      int rank = -1)
      : Error(message, rank, where) {}
};

// An invariant of our own code broke. The CLI prints it and exits with status 1.
class InternalError : public Error {
 public:
  explicit InternalError(const std::string& message, std::source_location where = std::source_location::current(),
                         int rank = -1)
      : Error(message, rank, where) {}
};

// Checks an internal invariant; throws InternalError naming the condition and the place.
#define SHARDPLAN_CHECK(condition, message)                                          \
  do {                                                                               \
    if (!(condition)) throw ::shardplan::InternalError(std::string("check failed: ") \
                                                       + #condition + ": " + (message)); \
  } while (0)

}  // namespace shardplan
