// Formatting of the source location that every shardplan error carries.
#include "errors.h"

#include <string_view>

namespace shardplan {

std::string Error::raised_at() const {
  std::string_view file = where_.file_name();
  // Strip the build's absolute prefix so the location reads as a path in the repository.
  for (std::string_view folder : {"costmodel/", "planner/", "executor/", "traces/", "cli/", "tests/"}) {
    if (const auto pos = file.rfind(folder); pos != std::string_view::npos) {
      file.remove_prefix(pos);
      break;
    }
  }
  std::string location(file);
  location.append(":").append(std::to_string(where_.line()));
  return location;
}

}  // namespace shardplan
