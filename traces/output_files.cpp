// Output files (Note [Output files]): target checks with a probe, all-or-nothing writes, stale temporary clean-up.
#include "output_files.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "errors.h"

namespace shardplan {

namespace {

namespace fs = std::filesystem;

// Symbolic links followed at most this many times, as Linux's path resolution does (ELOOP after 40).
constexpr int kMostLinkHops = 40;

std::string errno_text(int error) { return std::generic_category().message(error); }

// What is at `path` without following a final symbolic link.
enum class Kind { absent, regular, directory, symlink, other, unreachable };

Kind kind_of(const std::string& path, int* error = nullptr) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) return Kind::absent;
    if (error) *error = errno;
    return Kind::unreachable;
  }
  if (S_ISREG(info.st_mode)) return Kind::regular;
  if (S_ISDIR(info.st_mode)) return Kind::directory;
  if (S_ISLNK(info.st_mode)) return Kind::symlink;
  return Kind::other;
}

std::string directory_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

// Why `target` cannot be written as a regular file, or "" when it can (absent or a regular file).
std::string target_problem(const std::string& target) {
  int error = 0;
  switch (kind_of(target, &error)) {
    case Kind::absent:
    case Kind::regular: return "";
    case Kind::directory: return "'" + target + "' is a directory, expected a file";
    case Kind::symlink: return "'" + target + "' is a chain of more than 40 symbolic links";
    case Kind::other:
      return "'" + target + "' is not a regular file (a FIFO, device or socket); refusing to replace it";
    case Kind::unreachable:
      if (error == ENOTDIR) return "'" + directory_of(target) + "' is not a directory";
      return "cannot examine '" + target + "' (" + errno_text(error) + ")";
  }
  return "";
}

// Creates the missing directories above and including `dir`, recording each one created (outermost first).
// Returns "" or why it could not.
std::string create_missing_directories(const std::string& dir, std::vector<std::string>& created) {
  std::vector<fs::path> missing;
  fs::path at = fs::path(dir);
  while (!at.empty()) {
    const Kind kind = kind_of(at.string());
    if (kind == Kind::directory) break;
    if (kind == Kind::symlink) {
      std::error_code error;
      if (fs::is_directory(at, error)) break;  // a link to a directory is as good as one
      return "'" + at.string() + "' is not a directory";
    }
    if (kind != Kind::absent) return "'" + at.string() + "' is not a directory";
    missing.push_back(at);
    at = at.parent_path();
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), 0777) != 0 && errno != EEXIST) {
      return "cannot create directory '" + it->string() + "' (" + errno_text(errno) + ")";
    }
    created.push_back(it->string());
  }
  return "";
}

void remove_directories(const std::vector<std::string>& created) {
  for (auto it = created.rbegin(); it != created.rend(); ++it) ::rmdir(it->c_str());  // only if empty
}

// The directory a new file or directory at `dir` would be created in: `dir` itself when it exists, otherwise its
// nearest existing ancestor. "" with `problem` set when that is not a directory.
std::string nearest_existing_directory(const std::string& dir, std::string& problem) {
  fs::path at = fs::path(dir);
  while (true) {
    const Kind kind = kind_of(at.string());
    std::error_code error;
    if (kind == Kind::directory || (kind == Kind::symlink && fs::is_directory(at, error))) return at.string();
    if (kind != Kind::absent) {
      problem = "'" + at.string() + "' is not a directory";
      return "";
    }
    if (!at.has_parent_path() || at.parent_path() == at) return ".";
    at = at.parent_path();
  }
}

// Creates and removes a file named after this process in `dir`: "" when the directory takes a new file (or a new
// directory: the same permission), the reason otherwise. Nothing is created that outlives the call.
std::string probe_directory(const std::string& dir) {
  const std::string probe = (fs::path(dir) / (".shardplan-probe.tmp." + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot create a file in '" + dir + "' (" + errno_text(errno) + ")";
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}

// Rule 1 for a directory that outputs go into: it exists or can be created. "" or the problem.
std::string output_directory_problem(const std::string& dir) {
  std::string problem;
  const std::string existing = nearest_existing_directory(dir, problem);
  return problem.empty() ? probe_directory(existing) : problem;
}

// Rule 1 for a file target: "" or the problem.
// Note [Output files], rule 1: a link is written through only to a file that exists. A dangling one made the write
// create the directories it pointed into (issue 37): a link names a file, it does not ask for one to be made.
std::string dangling_link_problem(const std::string& path, const std::string& target) {
  if (kind_of(path) != Kind::symlink || kind_of(target) != Kind::absent) return "";
  return "a symbolic link to '" + target + "', which does not exist (expected a link to an existing file)";
}

std::string output_file_problem(const std::string& path) {
  const std::string target = resolved_output_path(path);
  if (std::string problem = dangling_link_problem(path, target); !problem.empty()) return problem;
  if (std::string problem = target_problem(target); !problem.empty()) return problem;
  return output_directory_problem(directory_of(target));
}

bool write_all(int fd, const std::string& text) {
  std::size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    written += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

std::string temporary_path_for(const std::string& path) { return path + ".tmp." + std::to_string(::getpid()); }

std::string resolved_output_path(const std::string& path) {
  fs::path at(path);
  for (int hop = 0; hop < kMostLinkHops && kind_of(at.string()) == Kind::symlink; ++hop) {
    std::error_code error;
    const fs::path next = fs::read_symlink(at, error);
    if (error) return at.string();
    at = next.is_absolute() ? next : at.parent_path() / next;
  }
  return at.lexically_normal().string();
}

void remove_stale_temporaries(const std::string& path) {
  const std::string prefix = fs::path(path).filename().string() + ".tmp.";
  std::error_code error;
  for (fs::directory_iterator it(directory_of(path), error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(std::atol(digits.c_str()));
    // Only a temporary whose writer is gone: a live process (this one included) may still be writing it.
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) {
      std::error_code ignored;
      fs::remove(it->path(), ignored);
    }
  }
}

void check_output_file(const std::string& path, const std::string& flag) {
  if (path.empty()) throw InputError(flag + ": expected a file name, got ''");
  if (const std::string problem = output_file_problem(path); !problem.empty()) {
    throw InputError(flag + " '" + path + "': " + problem);
  }
  remove_stale_temporaries(resolved_output_path(path));
}

void check_output_directory(const std::string& path, const std::string& flag) {
  if (path.empty()) throw InputError(flag + ": expected a directory name, got ''");
  if (const std::string problem = output_directory_problem(path); !problem.empty()) {
    throw InputError(flag + " '" + path + "': " + problem);
  }
}

void check_distinct_outputs(const std::vector<std::pair<std::string, std::string>>& outputs) {
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (outputs[i].second.empty() || outputs[j].second.empty()) continue;
      if (resolved_output_path(outputs[i].second) == resolved_output_path(outputs[j].second)) {
        throw InputError(outputs[i].first + " '" + outputs[i].second + "': the same file as " + outputs[j].first +
                         " '" + outputs[j].second + "'");
      }
    }
  }
}

void write_output_files(const std::vector<OutputFile>& files) {
  std::vector<std::string> created, temporaries, targets;
  const auto fail = [&](const std::string& path, const std::string& reason) {
    for (const std::string& temporary : temporaries) ::unlink(temporary.c_str());
    remove_directories(created);
    throw InputError(path + ": cannot write (" + reason + ")");
  };
  for (const OutputFile& file : files) {
    if (file.path.empty()) fail("''", "no file name");
    const std::string target = resolved_output_path(file.path);
    if (std::find(targets.begin(), targets.end(), target) != targets.end()) {
      fail(file.path, "named by two outputs of this command");
    }
    if (std::string problem = dangling_link_problem(file.path, target); !problem.empty()) fail(file.path, problem);
    if (std::string problem = target_problem(target); !problem.empty()) fail(file.path, problem);
    if (std::string problem = create_missing_directories(directory_of(target), created); !problem.empty()) {
      fail(file.path, problem);
    }
    remove_stale_temporaries(target);
    const std::string temporary = temporary_path_for(target);
    const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);  // umask applies
    if (fd < 0) fail(file.path, errno_text(errno));
    temporaries.push_back(temporary);
    targets.push_back(target);
    if (!write_all(fd, file.text)) {
      const int error = errno;
      ::close(fd);
      fail(file.path, errno_text(error));
    }
    if (::close(fd) != 0) fail(file.path, errno_text(errno));
  }
  // Every file is complete on disk; only now does any target change.
  for (std::size_t i = 0; i < temporaries.size(); ++i) {
    if (::rename(temporaries[i].c_str(), targets[i].c_str()) != 0) {
      const int error = errno;
      temporaries.erase(temporaries.begin(), temporaries.begin() + static_cast<std::ptrdiff_t>(i));
      fail(files[i].path, errno_text(error));
    }
  }
}

void write_file_atomically(const std::string& path, const std::string& text) { write_output_files({{path, text}}); }

}  // namespace shardplan
