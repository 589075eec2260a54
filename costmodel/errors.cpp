// Formatting of the source location that every shardplan error carries.
#include "errors.h"

#include <cstdio>
#include <string_view>

namespace shardplan {

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
  return line;
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
