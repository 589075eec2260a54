// Sharded checkpoints: durable temp+rename writes, the rank file format, the manifest, and the verified resume.
#include "checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint_manifest.h"
#include "errors.h"
#include "json_input.h"
#include "output_files.h"
#include "plan_json.h"

namespace shardplan::runner {

namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'S', 'P', 'C', 'K', 'P', 'T', '0', '1'};
constexpr std::uint32_t kFormatVersion = 1;

std::string errno_text() { return errno != 0 ? std::generic_category().message(errno) : "unknown error"; }

// write + fsync + rename, so the name only ever refers to a complete file (a crash leaves at most a stray temporary).
void write_durably(const std::string& path, const std::string& bytes, int rank) {
  remove_stale_temporaries(path);  // Note [Output files]: what a writer killed mid-save left of this file
  const std::string temporary = temporary_path_for(path);
  const auto fail = [&](const std::string& reason) {
    ::unlink(temporary.c_str());
    throw InputError(path + ": cannot write (" + reason + ")", std::source_location::current(), rank);
  };
  errno = 0;
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(errno_text());
  std::size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string reason = errno_text();
      ::close(fd);
      fail(reason);
    }
    written += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const std::string reason = errno_text();
    ::close(fd);
    fail(reason);
  }
  if (::close(fd) != 0) fail(errno_text());
  if (::rename(temporary.c_str(), path.c_str()) != 0) fail(errno_text());
}

// Makes the renames inside `dir` durable too (best effort: some file systems refuse fsync on a directory).
void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

// The whole file, or false when it does not exist or cannot be opened. Something else in its place (a directory) is
// an InputError naming it: reading one threw "basic_filebuf::underflow error reading the file", without the name.
bool read_whole_file(const std::string& path, std::string& bytes, int rank) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (fs::exists(status) && !fs::is_regular_file(status)) {
    throw InputError(path + ": " + (fs::is_directory(status) ? "a directory" : "not a regular file") +
                         ", expected a checkpoint file",
                     std::source_location::current(), rank);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

template <typename T>
void put(std::string& out, const T& value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

void put_floats(std::string& out, std::span<const float> values) {
  out.append(reinterpret_cast<const char*>(values.data()), values.size_bytes());
}

// Reads the rank file's fields in order; running off the end is a format error naming the file.
struct Cursor {
  const std::string& bytes;
  const std::string& path;
  int rank;
  std::size_t at = 0;

  void take(void* destination, std::size_t count) {
    if (bytes.size() - at < count) {
      throw InputError(path + ": ends inside its data (" + std::to_string(bytes.size()) + " bytes)",
                       std::source_location::current(), rank);
    }
    std::memcpy(destination, bytes.data() + at, count);
    at += count;
  }
  template <typename T>
  T get() {
    T value{};
    take(&value, sizeof value);
    return value;
  }
};

std::string rank_file_name(int rank) { return "rank-" + std::to_string(rank) + ".bin"; }

std::string serialize(Runner& runner, int rank, int world, std::uint64_t data_position) {
  const std::vector<FlatParam*> params = runner.flat_params();
  std::string out;
  out.append(kMagic, sizeof kMagic);
  put(out, kFormatVersion);
  put(out, static_cast<std::uint32_t>(rank));
  put(out, static_cast<std::uint32_t>(world));
  put(out, static_cast<std::uint32_t>(params.size()));
  put(out, runner.optimizer_steps());
  put(out, data_position);
  for (FlatParam* param : params) put(out, static_cast<std::uint64_t>(param->shard().size()));
  for (FlatParam* param : params) {
    put_floats(out, param->shard());
    put_floats(out, param->exp_avg());
    put_floats(out, param->exp_avg_sq());
  }
  return out;
}

// Every rank learns whether any rank failed and, from the first failing rank, why: every rank then throws that one
// message (so rank 0 alone can print it, and it names the file), and an error on one rank never leaves the rest
// waiting in the next collective. The Communicator moves floats only, so the message travels as one float per byte
// (exact), at most kSharedMessageBytes of it.
constexpr std::size_t kSharedMessageBytes = 1000;

void agree(comm::Communicator& world, int rank, const std::string& local_error, const std::string& what) {
  std::vector<float> failed(static_cast<std::size_t>(world.size()), 0.0f);
  if (!local_error.empty()) failed[static_cast<std::size_t>(world.rank())] = 1.0f;
  world.all_reduce(failed.data(), failed.size(), comm::ReduceOp::sum).wait();
  int first = -1;
  std::string failing;
  for (std::size_t r = 0; r < failed.size(); ++r) {
    if (failed[r] == 0.0f) continue;
    if (first < 0) first = static_cast<int>(r);
    failing += (failing.empty() ? "" : ", ") + std::to_string(r);
  }
  if (first < 0) return;
  std::vector<float> text(1 + kSharedMessageBytes, 0.0f);
  if (world.rank() == first) {
    const std::size_t length = std::min(local_error.size(), kSharedMessageBytes);
    text[0] = static_cast<float>(length);
    for (std::size_t i = 0; i < length; ++i) text[1 + i] = static_cast<unsigned char>(local_error[i]);
  }
  world.broadcast(text.data(), text.size(), first).wait();
  std::string message;
  for (std::size_t i = 0; i < static_cast<std::size_t>(text[0]); ++i) {
    message += static_cast<char>(static_cast<unsigned char>(text[1 + i]));
  }
  // Which ranks found a problem, unless all did (another world size, model or plan fails everywhere alike).
  const bool all = std::count(failed.begin(), failed.end(), 1.0f) == static_cast<std::ptrdiff_t>(failed.size());
  const bool one = failing.find(',') == std::string::npos;
  throw InputError(what + ": " + message + (all ? "" : one ? " (rank " + failing + ")" : " (ranks " + failing + ")"),
                   std::source_location::current(), rank);
}

// Rank r's (size, checksum) as eight 16-bit pieces, each exact in a float: the Communicator moves floats only.
std::vector<float> encode(std::uint64_t size, std::uint64_t checksum) {
  std::vector<float> out;
  for (const std::uint64_t value : {size, checksum}) {
    for (int piece = 0; piece < 4; ++piece) out.push_back(static_cast<float>((value >> (16 * piece)) & 0xffffu));
  }
  return out;
}

std::uint64_t decode(const float* pieces) {
  std::uint64_t value = 0;
  for (int piece = 0; piece < 4; ++piece) value |= static_cast<std::uint64_t>(pieces[piece]) << (16 * piece);
  return value;
}

}  // namespace

std::uint64_t fnv1a64(std::string_view bytes) {
  std::uint64_t hash = 14695981039346656037ull;
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

CheckpointInfo save_checkpoint(Runner& runner, comm::Communicator& world, const std::string& dir,
                               std::uint64_t data_position, const CheckpointData& data) {
  const int rank = runner.rank();
  const int index = world.rank(), size = world.size();
  CheckpointInfo info;
  info.step = runner.optimizer_steps();
  info.data_position = data_position;
  const std::string step_name = "step-" + std::to_string(info.step);
  info.step_dir = (fs::path(dir) / step_name).string();

  std::string error;
  std::uint64_t bytes = 0, checksum = 0;
  try {
    std::error_code ec;
    fs::create_directories(info.step_dir, ec);
    // Every rank creates the directory; losing that race to another rank is fine.
    if (ec && !fs::is_directory(info.step_dir)) {
      throw InputError(info.step_dir + ": cannot create (" + ec.message() + ")", std::source_location::current(), rank);
    }
    const std::string blob = serialize(runner, index, size, data_position);
    write_durably((fs::path(info.step_dir) / rank_file_name(index)).string(), blob, rank);
    bytes = blob.size();
    checksum = fnv1a64(blob);
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree(world, rank, error, "checkpoint " + info.step_dir);

  // Every rank file is on disk; rank 0 learns their sizes and checksums and publishes the manifest, then `latest`.
  const std::vector<float> mine = encode(bytes, checksum);
  std::vector<float> all(mine.size() * static_cast<std::size_t>(size));
  world.all_gather(mine.data(), mine.size(), all.data()).wait();
  error.clear();
  if (index == 0) {
    try {
      nlohmann::json ranks = nlohmann::json::array();
      for (int r = 0; r < size; ++r) {
        const float* entry = all.data() + mine.size() * static_cast<std::size_t>(r);
        ranks.push_back({{"rank", r}, {"file", rank_file_name(r)}, {"bytes", decode(entry)},
                         {"fnv1a64", hex64(decode(entry + 4))}});
      }
      nlohmann::json manifest = run_record(size, runner.model(), runner.plan(), data);
      manifest.update({{"schema", kCheckpointSchema}, {"step", info.step}, {"data_position", data_position},
                       {"checksum", "fnv1a64"}, {"ranks", ranks}});
      write_durably((fs::path(info.step_dir) / "manifest.json").string(), manifest.dump(2) + "\n", rank);
      sync_directory(info.step_dir);
      write_durably((fs::path(dir) / "latest").string(), step_name + "\n", rank);
      sync_directory(dir);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree(world, rank, error, "checkpoint " + info.step_dir);
  return info;
}

namespace {

// One rank's verified, parsed state, staged before anything in the runner changes.
struct Staged {
  CheckpointInfo info;
  std::vector<std::vector<float>> params, exp_avg, exp_avg_sq;
};

Staged read_and_verify(Runner& runner, int index, int size, const std::string& dir, const CheckpointData& data) {
  const int rank = runner.rank();
  const auto input_error = [rank](const std::string& message) {
    return InputError(message, std::source_location::current(), rank);
  };
  Staged staged;
  const std::string latest_path = (fs::path(dir) / "latest").string();
  std::string latest;
  if (!read_whole_file(latest_path, latest, rank)) {
    // A job killed during its first save leaves step directories but no committed `latest` (and its temporary,
    // removed by load_checkpoint): nothing is known to be complete, so the run starts over.
    throw input_error(dir + ": no checkpoint to resume from (" + latest_path +
                      " is missing: no save was committed); start without --resume");
  }
  while (!latest.empty() && std::isspace(static_cast<unsigned char>(latest.back()))) latest.pop_back();
  if (latest.rfind("step-", 0) != 0 || latest.size() == 5 ||
      latest.find_first_not_of("0123456789", 5) != std::string::npos) {
    throw input_error(latest_path + ": names '" + latest + "', expected step-<N>");
  }
  staged.info.step_dir = (fs::path(dir) / latest).string();
  const std::string manifest_path = (fs::path(staged.info.step_dir) / "manifest.json").string();
  std::string text;
  if (!read_whole_file(manifest_path, text, rank)) {
    throw input_error(manifest_path + ": missing (the checkpoint is incomplete or was removed)");
  }
  std::string file_path;
  std::uint64_t expected_bytes = 0;
  std::string expected_sum;
  try {
    const nlohmann::json manifest = parse_json_text(text, manifest_path);
    if (manifest.at("schema").get<std::string>() != kCheckpointSchema) {
      throw input_error(manifest_path + ": schema '" + manifest.at("schema").get<std::string>() + "', expected " +
                        kCheckpointSchema);
    }
    if (const auto mismatch = resume_mismatch(manifest, size, runner.model(), runner.plan(), data)) {
      throw input_error(manifest_path + ": " + *mismatch);
    }
    staged.info.step = manifest.at("step").get<std::int64_t>();
    staged.info.data_position = manifest.at("data_position").get<std::uint64_t>();
    const auto& entry = manifest.at("ranks").at(static_cast<std::size_t>(index));
    file_path = (fs::path(staged.info.step_dir) / entry.at("file").get<std::string>()).string();
    expected_bytes = entry.at("bytes").get<std::uint64_t>();
    expected_sum = entry.at("fnv1a64").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw input_error(manifest_path + ": not a valid checkpoint manifest (" + e.what() + ")");
  }

  // Size and checksum first: not one byte of a damaged file reaches the runner.
  remove_stale_temporaries(file_path);  // a save of this step killed before its rename
  std::string bytes;
  if (!read_whole_file(file_path, bytes, rank)) throw input_error(file_path + ": missing");
  if (bytes.size() < expected_bytes) {
    throw input_error(file_path + ": truncated (expected " + std::to_string(expected_bytes) + " bytes, found " +
                      std::to_string(bytes.size()) + ")");
  }
  if (bytes.size() > expected_bytes) {
    throw input_error(file_path + ": has " + std::to_string(bytes.size()) + " bytes, the manifest says " +
                      std::to_string(expected_bytes));
  }
  const std::string actual_sum = hex64(fnv1a64(bytes));
  if (actual_sum != expected_sum) {
    throw input_error(file_path + ": checksum mismatch (manifest fnv1a64 " + expected_sum + ", file " + actual_sum + ")");
  }

  Cursor cursor{bytes, file_path, rank};
  char magic[sizeof kMagic];
  cursor.take(magic, sizeof magic);
  if (std::memcmp(magic, kMagic, sizeof kMagic) != 0) throw input_error(file_path + ": not a shardplan rank file");
  const auto version = cursor.get<std::uint32_t>();
  if (version != kFormatVersion) throw input_error(file_path + ": format version " + std::to_string(version));
  const auto file_rank = cursor.get<std::uint32_t>();
  const auto file_world = cursor.get<std::uint32_t>();
  const auto units = cursor.get<std::uint32_t>();
  const auto step = cursor.get<std::int64_t>();
  const auto position = cursor.get<std::uint64_t>();
  const std::vector<FlatParam*> params = runner.flat_params();
  if (file_rank != static_cast<std::uint32_t>(index) || file_world != static_cast<std::uint32_t>(size) ||
      units != params.size() || step != staged.info.step || position != staged.info.data_position) {
    throw input_error(file_path + ": header (rank " + std::to_string(file_rank) + " of " + std::to_string(file_world) +
                      ", " + std::to_string(units) + " units, step " + std::to_string(step) +
                      ") does not match the manifest and this run");
  }
  for (std::size_t unit = 0; unit < params.size(); ++unit) {
    const auto elements = cursor.get<std::uint64_t>();
    if (elements != params[unit]->shard().size()) {
      throw input_error(file_path + ": unit " + std::to_string(unit) + " has " + std::to_string(elements) +
                        " elements, this run's shard has " + std::to_string(params[unit]->shard().size()));
    }
  }
  for (FlatParam* param : params) {
    for (auto* target : {&staged.params, &staged.exp_avg, &staged.exp_avg_sq}) {
      target->emplace_back(param->shard().size());
      cursor.take(target->back().data(), target->back().size() * sizeof(float));
    }
  }
  if (cursor.at != bytes.size()) throw input_error(file_path + ": trailing bytes after the last unit");
  return staged;
}

}  // namespace

CheckpointInfo load_checkpoint(Runner& runner, comm::Communicator& world, const std::string& dir,
                               const CheckpointData& data) {
  Staged staged;
  std::string error;
  try {
    if (world.rank() == 0) remove_stale_temporaries((fs::path(dir) / "latest").string());
    staged = read_and_verify(runner, world.rank(), world.size(), dir, data);
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree(world, runner.rank(), error, "resume from " + dir);
  const std::vector<FlatParam*> params = runner.flat_params();
  for (std::size_t unit = 0; unit < params.size(); ++unit) {
    FlatParam& param = *params[unit];
    std::copy(staged.params[unit].begin(), staged.params[unit].end(), param.shard().begin());
    std::copy(staged.exp_avg[unit].begin(), staged.exp_avg[unit].end(), param.exp_avg().begin());
    std::copy(staged.exp_avg_sq[unit].begin(), staged.exp_avg_sq[unit].end(), param.exp_avg_sq().begin());
    // Gradients are zero after every optimizer step (Runner's optimizer_step), so a saved step implies zero here.
    std::fill(param.shard_grad().begin(), param.shard_grad().end(), 0.0f);
  }
  runner.set_optimizer_steps(staged.info.step);
  return staged.info;
}

}  // namespace shardplan::runner
