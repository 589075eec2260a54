// Formatting of the source location that every shardplan error carries.
#include "errors.h"

#include <cctype>
#include <cstdio>
#include <string_view>

#include "input_limits.h"

namespace shardplan {
namespace {

// "… (N bytes)" after the first whole UTF-8 characters within `most` bytes of a longer value.
std::string clip_to(std::string_view value, std::size_t most) {
  if (value.size() <= most) return std::string(value);
  // Already clipped (a message quoting another's value): "<most bytes>…" or "<most bytes>… (N bytes)" stays as it is.
  constexpr std::string_view kEllipsis = "\u2026";
  if (const auto mark = value.find(kEllipsis); mark != std::string_view::npos && mark <= most) {
    const std::string_view rest = value.substr(mark + kEllipsis.size());
    if (rest.empty() || (rest.starts_with(" (") && rest.ends_with(" bytes)"))) return std::string(value);
  }
  std::size_t cut = most;
  while (cut > 0 && (static_cast<unsigned char>(value[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  return std::string(value.substr(0, cut)) + "\u2026 (" + std::to_string(value.size()) + " bytes)";
}

bool is_word_byte(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// A quote at `at` opens a quoted value unless it follows a letter or digit ("model's" is not one).
bool opens_quote(std::string_view line, std::size_t at) {
  return line[at] == '\'' && (at == 0 || !is_word_byte(line[at - 1]));
}

// The quote closing the one opened at `open`: the next one not followed by a letter or digit; npos when none.
std::size_t closing_quote(std::string_view line, std::size_t open) {
  for (std::size_t at = line.find('\'', open + 1); at != std::string_view::npos; at = line.find('\'', at + 1)) {
    if (at + 1 == line.size() || !is_word_byte(line[at + 1])) return at;
  }
  return std::string_view::npos;
}

// Note [Echoed values]: each quoted value and each other run of non-blank bytes, clipped.
std::string clip_values(std::string_view line) {
  std::string clipped;
  clipped.reserve(std::min(line.size(), limits::kMaxErrorLineBytes));
  std::size_t at = 0;
  while (at < line.size()) {
    if (line[at] == ' ') {
      clipped.push_back(' ');
      ++at;
      continue;
    }
    if (opens_quote(line, at)) {
      if (const auto close = closing_quote(line, at); close != std::string_view::npos) {
        clipped += "'" + clip_to(line.substr(at + 1, close - at - 1), limits::kMaxEchoedBytes) + "'";
        at = close + 1;
        continue;
      }
    }
    std::size_t end = at + 1;
    while (end < line.size() && line[end] != ' ' && !opens_quote(line, end)) ++end;
    // Punctuation closing the run ("path:" before a reason, "value," in a list) is the message's, not the value's.
    std::size_t body_end = end;
    while (body_end > at + 1 && std::string_view(":,;.)").find(line[body_end - 1]) != std::string_view::npos) {
      --body_end;
    }
    clipped += clip_to(line.substr(at, body_end - at), limits::kMaxEchoedBytes);
    clipped += line.substr(body_end, end - body_end);
    at = end;
  }
  return clip_to(clipped, limits::kMaxErrorLineBytes);
}

}  // namespace

std::string clip_echoed(std::string_view value) { return clip_to(value, limits::kMaxEchoedBytes); }

std::string Error::one_line(const std::string& text) {
  std::string line;
  line.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f) {
      line.push_back(c);
    } else if (c == '\n') {
      line += "\\n";
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      line += escaped;
    }
  }
  return clip_values(line);
}

std::string Error::raised_at() const {
  std::string_view file = where_.file_name();
  // Strip the build's absolute prefix so the location reads as a path in the repository.
  for (std::string_view folder : {"costmodel/", "planner/", "executor/", "traces/", "cli/", "tests/"}) {
    if (const auto pos = file.rfind(folder); pos != std::string_view::npos) {
      file.remove_prefix(pos);
      break;
    }
  }
  // snprintf rather than string concatenation: GCC 12 at -O3 emits a false -Wrestrict on the latter (GCC PR 105329).
  char location[512];
  std::snprintf(location, sizeof location, "%.*s:%u", static_cast<int>(file.size()), file.data(),
                static_cast<unsigned>(where_.line()));
  return location;
}

}  // namespace shardplan
