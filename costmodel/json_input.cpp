// Implementation of JSON parsing with positions and of the field reader that names every bad field.
#include "json_input.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>

#include "errors.h"
#include "input_limits.h"
#include "name_suggest.h"

namespace shardplan {
namespace {

// nlohmann reports a byte offset; users want line and column (1-based), as editors show them.
std::pair<std::size_t, std::size_t> line_and_column(std::string_view text, std::size_t byte_offset) {
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < byte_offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {line, column};
}

// The byte offset where `text` first nests deeper than `most_depth` arrays and objects, if it does. Brackets inside
// strings do not count; the scan does not validate (the parser does that next), it only keeps the parser's result
// shallow enough for nlohmann's recursive copy, dump and comparison (Note [JSON depth] in input_limits.h).
std::optional<std::size_t> first_too_deep(std::string_view text, std::size_t most_depth) {
  std::size_t depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > most_depth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

// "a character device", "a FIFO": what a file that is not a regular one is, for the refusal.
std::string file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::string mib_text(std::int64_t bytes) {
  return bytes % (std::int64_t{1} << 20) == 0 ? std::to_string(bytes >> 20) + " MiB" : std::to_string(bytes) + " bytes";
}

// Closes a file descriptor when it goes out of scope.
struct FileDescriptor {
  int fd;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";

}  // namespace

nlohmann::json parse_json_text(std::string_view text, const std::string& origin, std::int64_t max_bytes) {
  if (text.size() > static_cast<std::uint64_t>(max_bytes)) {
    throw InputError(origin + ": " + std::to_string(text.size()) + " bytes, expected at most " + mib_text(max_bytes) +
                     " (README, Input limits)");
  }
  // A UTF-8 byte order mark (Windows editors write one) is not part of the document; columns count after it.
  if (text.starts_with(kUtf8Bom)) text.remove_prefix(kUtf8Bom.size());
  if (const auto offset = first_too_deep(text, limits::kMaxJsonDepth)) {
    const auto [line, column] = line_and_column(text, *offset);
    throw InputError(origin + ":" + std::to_string(line) + ":" + std::to_string(column) +
                     ": JSON nested too deep: expected at most " + std::to_string(limits::kMaxJsonDepth) +
                     " levels of arrays and objects");
  }
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& error) {
    // error.byte is the 1-based position of the offending byte; point at it.
    const std::size_t offset = error.byte > 0 ? error.byte - 1 : 0;
    const auto [line, column] = line_and_column(text, offset);
    std::string reason = error.what();
    // Keep nlohmann's explanation after its "[json.exception.parse_error.101] parse error at line 1, column 2: "
    // prefix: cut at the first ": " after "column".
    if (const auto column_pos = reason.find("column"); column_pos != std::string::npos) {
      if (const auto pos = reason.find(": ", column_pos); pos != std::string::npos) reason = reason.substr(pos + 2);
    }
    throw InputError(origin + ":" + std::to_string(line) + ":" + std::to_string(column) + ": malformed JSON: " + reason);
  } catch (const nlohmann::json::exception& error) {
    // e.g. out_of_range.406: a number that overflows a double ("1e400").
    std::string reason = error.what();
    if (const auto pos = reason.find("] "); pos != std::string::npos) reason = reason.substr(pos + 2);
    throw InputError(origin + ": malformed JSON: " + reason);
  }
}

std::string read_text_file(const std::string& path, std::int64_t max_bytes) {
  // Note [Input files]: O_NONBLOCK so that opening a FIFO returns at once (it is refused next); fstat on the open
  // descriptor, so the file checked is the file read.
  const FileDescriptor file{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  if (file.fd < 0) {
    const int error = errno;
    if (error == ENOENT) throw InputError(path + ": cannot open file for reading");
    throw InputError(path + ": cannot open file for reading (" + std::strerror(error) + ")");
  }
  struct stat status {};
  if (::fstat(file.fd, &status) != 0) throw InputError(path + ": cannot read its status: " + std::strerror(errno));
  if (S_ISDIR(status.st_mode)) throw InputError(path + ": is a directory, expected a file");
  if (!S_ISREG(status.st_mode)) {
    throw InputError(path + ": " + file_type_name(status.st_mode) + ", expected a regular file");
  }
  const auto too_large = [&](const std::string& size) {
    return InputError(path + ": " + size + ", expected at most " + mib_text(max_bytes) +
                      " for this kind of file (README, Input limits)");
  };
  if (status.st_size > max_bytes) throw too_large(std::to_string(status.st_size) + " bytes");
  ::fcntl(file.fd, F_SETFL, ::fcntl(file.fd, F_GETFL) & ~O_NONBLOCK);  // a regular file: plain blocking reads
  std::string contents;
  contents.resize(static_cast<std::size_t>(status.st_size) + 1);  // one byte more shows a file that grew
  std::size_t used = 0;
  for (;;) {
    if (used == contents.size()) {
      if (contents.size() > static_cast<std::size_t>(max_bytes)) throw too_large("more than " + mib_text(max_bytes));
      contents.resize(std::min(contents.size() * 2 + 4096, static_cast<std::size_t>(max_bytes) + 1));
    }
    const ssize_t got = ::read(file.fd, contents.data() + used, contents.size() - used);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw InputError(path + ": read error: " + std::strerror(errno));
    if (got == 0) break;
    used += static_cast<std::size_t>(got);
  }
  contents.resize(used);
  return contents;
}

nlohmann::json read_json_file(const std::string& path, std::int64_t max_bytes) {
  return parse_json_text(read_text_file(path, max_bytes), path, max_bytes);
}

bool is_inline_json(std::string_view text_or_path) {
  if (text_or_path.starts_with(kUtf8Bom)) text_or_path.remove_prefix(kUtf8Bom.size());
  const auto first = text_or_path.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && (text_or_path[first] == '{' || text_or_path[first] == '[');
}

std::string json_argument_origin(const std::string& text_or_path, const std::string& what) {
  return is_inline_json(text_or_path) ? what + " (inline JSON)" : text_or_path;
}

nlohmann::json read_json_argument(const std::string& text_or_path, const std::string& what) {
  if (is_inline_json(text_or_path)) return parse_json_text(text_or_path, json_argument_origin(text_or_path, what));
  return read_json_file(text_or_path);
}

namespace {
std::string counted(std::size_t count, const std::string& noun) {
  return std::to_string(count) + " " + noun + (count == 1 ? "" : "s");
}
}  // namespace

std::string describe_json_value(const nlohmann::json& value) {
  // Short flat values are shown whole ("[1000,0]"); a nested or long array or object only by its size, so an error
  // message never serialises an unbounded value (and never recurses into a deep one).
  constexpr std::size_t kMostShownElements = 8;
  constexpr std::size_t kShownChars = 40;
  if (value.is_structured()) {
    bool flat = value.size() <= kMostShownElements;
    for (const auto& element : value) flat = flat && !element.is_structured();
    if (!flat) {
      return value.is_array() ? "an array of " + counted(value.size(), "element")
                              : "an object with " + counted(value.size(), "field");
    }
  }
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > kShownChars) text = text.substr(0, kShownChars - 3) + "...";
  return text;
}

JsonObjectReader::JsonObjectReader(const nlohmann::json& value, std::string origin, std::string path)
    : object_(value), origin_(std::move(origin)), path_(std::move(path)) {
  if (!object_.is_object()) {
    throw InputError(origin_ + ": " + (path_.empty() ? std::string("document") : "field '" + path_ + "'") +
                     ": expected a JSON object, got " + describe_json_value(object_));
  }
}

bool JsonObjectReader::has(std::string_view key) const { return object_.contains(std::string(key)); }

std::string JsonObjectReader::field_path(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

void JsonObjectReader::fail(std::string_view key, std::string_view expected) const {
  std::string got;
  if (has(key)) got = ", got " + describe_json_value(object_.at(std::string(key)));
  throw InputError(origin_ + ": field '" + field_path(key) + "': expected " + std::string(expected) + got);
}

const nlohmann::json& JsonObjectReader::required(std::string_view key, std::string_view expected) const {
  if (!has(key)) {
    throw InputError(origin_ + ": missing field '" + field_path(key) + "' (expected " + std::string(expected) + ")");
  }
  return object_.at(std::string(key));
}

std::string JsonObjectReader::string(std::string_view key) const {
  const auto& value = required(key, "a string");
  if (!value.is_string() || value.get<std::string>().empty()) fail(key, "a non-empty string");
  return value.get<std::string>();
}

std::optional<std::string> JsonObjectReader::optional_string(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return string(key);
}

std::optional<std::int64_t> JsonObjectReader::integer_in(const nlohmann::json& value, std::int64_t least,
                                                          std::int64_t most) {
  if (!value.is_number_integer()) return std::nullopt;
  // nlohmann keeps integers past 2^63 - 1 as unsigned; get<std::int64_t>() would wrap them to negative numbers.
  if (value.is_number_unsigned() &&
      value.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    return std::nullopt;
  }
  const auto number = value.get<std::int64_t>();
  if (number < least || number > most) return std::nullopt;
  return number;
}

namespace {
std::string integer_range_text(std::int64_t least, std::int64_t most) {
  if (most == std::numeric_limits<std::int64_t>::max()) {
    return least == 1 ? "a positive integer" : "an integer >= " + std::to_string(least);
  }
  return "an integer in " + std::to_string(least) + ".." + std::to_string(most);
}

std::string number_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}
}  // namespace

std::int64_t JsonObjectReader::int_in_range(std::string_view key, std::int64_t least, std::int64_t most) const {
  const std::string expected = integer_range_text(least, most);
  const auto number = integer_in(required(key, expected), least, most);
  if (!number) fail(key, expected);
  return *number;
}

std::optional<std::int64_t> JsonObjectReader::optional_int_in_range(std::string_view key, std::int64_t least,
                                                                    std::int64_t most) const {
  if (!has(key)) return std::nullopt;
  return int_in_range(key, least, most);
}

double JsonObjectReader::number_in_range(std::string_view key, double least, double most) const {
  const std::string expected = "a number in [" + number_text(least) + ", " + number_text(most) + "]";
  const auto& value = required(key, expected);
  if (!value.is_number() || !std::isfinite(value.get<double>()) || !(value.get<double>() >= least) ||
      !(value.get<double>() <= most)) {
    fail(key, expected);
  }
  return value.get<double>();
}

std::optional<double> JsonObjectReader::optional_number_in_range(std::string_view key, double least,
                                                                 double most) const {
  if (!has(key)) return std::nullopt;
  return number_in_range(key, least, most);
}

void JsonObjectReader::update(std::string_view key, double& field, limits::Range range) const {
  if (const auto value = optional_number_in_range(key, range.least, range.most)) field = *value;
}

std::int64_t JsonObjectReader::positive_int(std::string_view key) const {
  return int_in_range(key, 1, std::numeric_limits<std::int64_t>::max());
}

std::optional<std::int64_t> JsonObjectReader::optional_positive_int(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return positive_int(key);
}

std::int64_t JsonObjectReader::non_negative_int(std::string_view key, std::int64_t fallback) const {
  if (!has(key)) return fallback;
  const auto number = integer_in(object_.at(std::string(key)), 0, std::numeric_limits<std::int64_t>::max());
  if (!number) fail(key, "a non-negative integer");
  return *number;
}

double JsonObjectReader::positive_number(std::string_view key) const {
  const auto& value = required(key, "a positive number");
  if (!value.is_number() || !(value.get<double>() > 0) || !std::isfinite(value.get<double>())) {
    fail(key, "a positive number");
  }
  return value.get<double>();
}

std::optional<double> JsonObjectReader::optional_positive_number(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return positive_number(key);
}

double JsonObjectReader::non_negative_number(std::string_view key, double fallback) const {
  if (!has(key)) return fallback;
  const auto& value = object_.at(std::string(key));
  if (!value.is_number() || !(value.get<double>() >= 0) || !std::isfinite(value.get<double>())) {
    fail(key, "a non-negative number");
  }
  return value.get<double>();
}

bool JsonObjectReader::boolean(std::string_view key, bool fallback) const {
  if (!has(key)) return fallback;
  const auto& value = object_.at(std::string(key));
  if (!value.is_boolean()) fail(key, "true or false");
  return value.get<bool>();
}

JsonObjectReader JsonObjectReader::object(std::string_view key) const {
  return JsonObjectReader(required(key, "a JSON object"), origin_, field_path(key));
}

std::vector<nlohmann::json> JsonObjectReader::array(std::string_view key, bool allow_empty) const {
  const auto& value = required(key, "an array");
  if (!value.is_array() || (!allow_empty && value.empty())) fail(key, allow_empty ? "an array" : "a non-empty array");
  return std::vector<nlohmann::json>(value.begin(), value.end());
}

JsonObjectReader JsonObjectReader::element(std::string_view key, std::size_t index, const nlohmann::json& value) const {
  return JsonObjectReader(value, origin_, field_path(key) + "[" + std::to_string(index) + "]");
}

void JsonObjectReader::reject_unknown_keys(const std::vector<std::string>& allowed) const {
  for (const auto& item : object_.items()) {
    bool known = false;
    for (const auto& name : allowed) known = known || name == item.key();
    if (!known) {
      throw InputError(origin_ + ": unknown field '" + field_path(item.key()) + "'" +
                       did_you_mean(item.key(), allowed));
    }
  }
}

}  // namespace shardplan
