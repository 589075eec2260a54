// Tests of Note [Output files]: all-or-nothing writes, refused special targets, symlinks written through.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "errors.h"
#include "json_input.h"
#include "output_files.h"
#include "test_support.h"

namespace {

namespace fs = std::filesystem;
using shardplan::testing::input_error_message;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class Scratch {
 public:
  Scratch() : path_(fs::temp_directory_path() / ("shardplan-output-files-" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~Scratch() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::set<std::string> entries() const {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(path_)) names.insert(entry.path().filename().string());
    return names;
  }

 private:
  fs::path path_;
};

}  // namespace

TEST_CASE("output files: when one file cannot be written, none is, and created directories go again") {
  Scratch dir;
  { std::ofstream(dir.file("old.json")) << "old"; }
  fs::create_directory(dir.file("taken"));
  // Reverted (each file written and renamed in turn): old.json held "new" and new-dir/ stayed after the failure.
  const std::string message = input_error_message([&] {
    shardplan::write_output_files({{dir.file("old.json"), "new"}, {dir.file("new-dir/x.json"), "x"},
                                   {dir.file("taken"), "x"}});
  });
  CHECK(contains(message, dir.file("taken") + ": cannot write ('" + dir.file("taken") + "' is a directory"));
  CHECK(shardplan::read_text_file(dir.file("old.json")) == "old");
  CHECK(dir.entries() == std::set<std::string>{"old.json", "taken"});
  shardplan::write_output_files({{dir.file("old.json"), "new"}, {dir.file("new-dir/x.json"), "x"}});
  CHECK(shardplan::read_text_file(dir.file("old.json")) == "new");
  CHECK(shardplan::read_text_file(dir.file("new-dir/x.json")) == "x");
  CHECK(dir.entries() == std::set<std::string>{"new-dir", "old.json", "taken"});
}

TEST_CASE("output files: checks refuse special files and create nothing that stays") {
  Scratch dir;
  CHECK(contains(input_error_message([] { shardplan::check_output_file("/dev/null", "--out"); }),
                 "--out '/dev/null': '/dev/null' is not a regular file"));
  CHECK(contains(input_error_message([] { shardplan::check_output_file("", "--out"); }), "expected a file name"));
  REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0600) == 0);
  CHECK_THROWS_AS(shardplan::check_output_file(dir.file("fifo"), "--trace"), shardplan::InputError);
  // A missing directory is fine for a file (it will be created on writing); the check leaves nothing behind.
  shardplan::check_output_file(dir.file("x/y/z.json"), "--out");
  shardplan::check_output_directory(dir.file("d/e"), "--out-dir");
  CHECK(dir.entries() == std::set<std::string>{"fifo"});
  CHECK(contains(input_error_message([] { shardplan::check_output_directory("/proc/x/y", "--checkpoint-dir"); }),
                 "--checkpoint-dir '/proc/x/y': cannot create a file in '/proc'"));
  CHECK(dir.entries() == std::set<std::string>{"fifo"});
}

TEST_CASE("output files: a symbolic link is written through, and the link stays") {
  Scratch dir;
  { std::ofstream(dir.file("target.json")) << "old"; }
  fs::create_symlink("target.json", dir.file("link.json"));  // relative to the link's directory
  shardplan::write_output_files({{dir.file("link.json"), "through"}});
  CHECK(fs::is_symlink(dir.file("link.json")));
  CHECK(shardplan::read_text_file(dir.file("target.json")) == "through");
  CHECK(shardplan::resolved_output_path(dir.file("link.json")) == dir.file("target.json"));
}

TEST_CASE("output files: a dangling symbolic link is refused, checked and written, and nothing is created") {
  // Reverted (links always followed): the write created missing/ and missing/out.json where the link pointed.
  Scratch dir;
  fs::create_symlink("missing/out.json", dir.file("link.json"));
  const std::string checked = input_error_message([&] { shardplan::check_output_file(dir.file("link.json"), "--out"); });
  CHECK(contains(checked, "--out '" + dir.file("link.json") + "': a symbolic link to '" + dir.file("missing/out.json") +
                              "', which does not exist"));
  const std::string written =
      input_error_message([&] { shardplan::write_output_files({{dir.file("link.json"), "x"}}); });
  CHECK(contains(written, "which does not exist"));
  CHECK(dir.entries() == std::set<std::string>{"link.json"});
}
