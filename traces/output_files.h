// Output files of a command: targets checked before the work, then written together through temporaries and renames.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace shardplan {

// Note [Output files]: a command's outputs obey three rules.
// 1. Checked before the work starts (check_output_file, check_output_directory): a name is given; the target is a
//    regular file or absent — a directory, FIFO, device or socket is refused (as root, replacing /dev/null by a
//    regular file would break the machine), a symbolic link is followed to the file it names (the link stays), which must exist (a dangling link
//    is refused, not made to create the directories it points into); its
//    directory exists or can be created, and a probe file can really be created there or, when it is missing, in
//    its nearest existing ancestor (a read-only file system or /proc fails here, not after minutes of training).
//    The checks create nothing that outlives them, so several ranks may check one directory at once.
// 2. Written at the end, all together (write_output_files): every file first to "<target>.tmp.<pid>" beside its
//    target (missing directories created), then each renamed over its target. A failure removes every temporary and
//    every directory it created, so a failing command leaves none of its outputs, and old ones intact.
// 3. Temporaries left by a process that was killed mid-write ("<name>.tmp.<pid>" whose pid no longer runs) are
//    removed when the same target is checked or written again (remove_stale_temporaries).

// InputError "<flag> '<path>': ..." when `path` cannot be an output file (rule 1).
void check_output_file(const std::string& path, const std::string& flag);

// InputError "<flag> '<path>': ..." when `path` cannot hold output files: not a directory, or cannot be created or
// written (rule 1).
void check_output_directory(const std::string& path, const std::string& flag);

// InputError when two of a command's outputs ({flag, path}, empty paths skipped) are the same file.
void check_distinct_outputs(const std::vector<std::pair<std::string, std::string>>& outputs);

struct OutputFile {
  std::string path;
  std::string text;
};

// Rule 2; InputError "<path>: cannot write (<reason>)" on failure, having removed everything it wrote.
void write_output_files(const std::vector<OutputFile>& files);
// One file by rule 2.
void write_file_atomically(const std::string& path, const std::string& text);

// The file a target really is: a symbolic link's final target, otherwise `path` itself.
std::string resolved_output_path(const std::string& path);

// Rule 3: removes "<file name of path>.tmp.<pid>" files beside `path` whose process is gone. Best effort.
void remove_stale_temporaries(const std::string& path);

// "<path>.tmp.<this process's pid>": the temporary this process writes `path` through.
std::string temporary_path_for(const std::string& path);

}  // namespace shardplan
