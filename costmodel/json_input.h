// Reading user JSON: parse errors with file:line:column, and field access that names the field and what was expected.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "input_limits.h"

namespace shardplan {

// Parses `text`; a syntax error becomes InputError "<origin>:<line>:<column>: malformed JSON: <reason>", and so does
// nesting deeper than kMaxJsonDepth (input_limits.h), found before parsing. Text longer than `max_bytes` is refused
// unparsed; a leading UTF-8 byte order mark is skipped.
nlohmann::json parse_json_text(std::string_view text, const std::string& origin,
                               std::int64_t max_bytes = limits::kMaxJsonFileBytes);

// Reads (read_text_file) and parses a file of at most `max_bytes`; an unreadable file is an InputError naming it.
nlohmann::json read_json_file(const std::string& path, std::int64_t max_bytes = limits::kMaxJsonFileBytes);

// Note [Inline JSON]: where a flag takes a JSON file (--model, --cluster, --catalog, --plan, --profile) it also takes
// the document itself, written inline: text whose first non-blank character (after a UTF-8 byte order mark, if any)
// is '{' or '[' (an array is then refused for not being an object, not taken for a file name). No file name begins
// so in practice, and the Python module passes dicts this way. Messages name it "<what> (inline JSON)".
bool is_inline_json(std::string_view text_or_path);
// "<what> (inline JSON)" for inline text, else the path: the origin messages about the document name.
std::string json_argument_origin(const std::string& text_or_path, const std::string& what);
// The document of a flag value: parsed inline (Note [Inline JSON]) or read from the file it names.
nlohmann::json read_json_argument(const std::string& text_or_path, const std::string& what);

// Reads the whole file as text; InputError when it cannot be read, when it is not a regular file (a directory, a
// device, a FIFO) or when it holds more than `max_bytes`, both found before reading (Note [Input files]).
std::string read_text_file(const std::string& path, std::int64_t max_bytes = limits::kMaxJsonFileBytes);

// A view of one JSON object inside a document, which knows its file (`origin`) and path ("layers[3]") so every
// complaint names both: "model.json: field 'layers[3].params': expected a positive integer, got -5".
class JsonObjectReader {
 public:
  // Throws InputError when `value` is not an object.
  JsonObjectReader(const nlohmann::json& value, std::string origin, std::string path = "");

  bool has(std::string_view key) const;
  const nlohmann::json& raw() const { return object_; }
  std::string field_path(std::string_view key) const;

  std::string string(std::string_view key) const;
  std::optional<std::string> optional_string(std::string_view key) const;
  std::int64_t positive_int(std::string_view key) const;  // >= 1
  std::optional<std::int64_t> optional_positive_int(std::string_view key) const;
  std::int64_t non_negative_int(std::string_view key, std::int64_t fallback) const;
  double positive_number(std::string_view key) const;  // > 0, finite
  std::optional<double> optional_positive_number(std::string_view key) const;
  double non_negative_number(std::string_view key, double fallback) const;
  // An integer in [least, most]: a float, a string or a value outside the range (an unsigned one past 2^63 included)
  // fails naming the range, so no count is ever narrowed silently into a smaller type.
  std::int64_t int_in_range(std::string_view key, std::int64_t least, std::int64_t most) const;
  std::optional<std::int64_t> optional_int_in_range(std::string_view key, std::int64_t least, std::int64_t most) const;
  // A finite number in [least, most].
  double number_in_range(std::string_view key, double least, double most) const;
  std::optional<double> optional_number_in_range(std::string_view key, double least, double most) const;
  // Sets `field` to the number at `key` when there is one, which must be in `range`; leaves it otherwise.
  void update(std::string_view key, double& field, limits::Range range) const;
  bool boolean(std::string_view key, bool fallback) const;
  JsonObjectReader object(std::string_view key) const;
  // The elements of an array field (possibly empty when `allow_empty`).
  std::vector<nlohmann::json> array(std::string_view key, bool allow_empty = false) const;
  // A reader for element `index` of array field `key` (the element must be an object). The reader keeps a reference
  // to `value`: keep the array (e.g. the vector from array()) alive while the reader is used.
  JsonObjectReader element(std::string_view key, std::size_t index, const nlohmann::json& value) const;

  // Rejects keys not in `allowed`, naming the closest allowed key (catches typos such as "hiden_size").
  void reject_unknown_keys(const std::vector<std::string>& allowed) const;

  [[noreturn]] void fail(std::string_view key, std::string_view expected) const;
  // The integer at `value` when it is one in [least, most]; std::nullopt otherwise.
  static std::optional<std::int64_t> integer_in(const nlohmann::json& value, std::int64_t least, std::int64_t most);

  const std::string& origin() const { return origin_; }
  const std::string& path() const { return path_; }

 private:
  const nlohmann::json& required(std::string_view key, std::string_view expected) const;

  const nlohmann::json& object_;
  std::string origin_;
  std::string path_;
};

// "42", "\"abc\"", "an array of 30 elements": a short rendering of a bad value for an error message, whatever its
// size or depth.
std::string describe_json_value(const nlohmann::json& value);

}  // namespace shardplan
