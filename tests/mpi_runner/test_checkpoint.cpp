// Sharded checkpoints under mpirun: resume is bit-identical, damaged or incomplete checkpoints are refused on all ranks.
#include <doctest/doctest.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <unistd.h>
#include <vector>

#include "checkpoint.h"
#include "errors.h"
#include "mpi_communicator.h"
#include "runner.h"
#include "runner_fixtures.h"

namespace shardplan::runner::testing {

namespace {

namespace fs = std::filesystem;

constexpr int kMicroBatch = 2, kSeqLen = 16;

// A directory unique to this test and this job: rank 0 creates it (mkdtemp) and broadcasts the name, so concurrent
// test runs never share checkpoints; rank 0 removes it once every rank is done with it.
class SharedTempDir {
 public:
  SharedTempDir() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    std::array<char, 4096> name{};
    if (rank_ == 0) {
      const std::string pattern = (fs::temp_directory_path() / "shardplan-ckpt-XXXXXX").string();
      if (pattern.size() < name.size()) {
        std::copy(pattern.begin(), pattern.end(), name.begin());
        if (::mkdtemp(name.data()) == nullptr) name.fill('\0');
      }
    }
    MPI_Bcast(name.data(), static_cast<int>(name.size()), MPI_CHAR, 0, MPI_COMM_WORLD);
    path_ = name.data();
  }
  ~SharedTempDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    std::error_code ignored;
    if (rank_ == 0 && !path_.empty()) fs::remove_all(path_, ignored);
  }
  SharedTempDir(const SharedTempDir&) = delete;
  SharedTempDir& operator=(const SharedTempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  int rank_ = 0;
  std::string path_;
};

Plan test_plan(const ModelSpec& model, const std::string& strategy, int size) {
  return strategy_plan(model, fp32_training(kSeqLen, kMicroBatch), strategy, size);
}

// Steps [from, from + count) on the shared data stream (Note [Data-parallel batches]); the agreed losses.
std::vector<double> train(Runner& runner, const runtime::ByteTextDataset& data, comm::Communicator& world, int from,
                          int count) {
  std::vector<double> losses;
  const int k = runner.schedule().micro_batches;
  for (int step = from; step < from + count; ++step) {
    losses.push_back(runner.step(rank_micro_batches(data, step, k, world.size(), world.rank())).loss);
  }
  return losses;
}

// The dataset position a run saves: the first batch index of the next step.
std::uint64_t position_after(const Runner& runner, int steps, int size) {
  return static_cast<std::uint64_t>(steps) * static_cast<std::uint64_t>(runner.schedule().micro_batches) *
         static_cast<std::uint64_t>(size);
}

// Every unit's shard, m and v concatenated: what a resumed run must reproduce bit for bit.
std::vector<float> shard_state(Runner& runner) {
  std::vector<float> state;
  for (FlatParam* param : runner.flat_params()) {
    for (std::span<float> part : {param->shard(), param->exp_avg(), param->exp_avg_sq()}) {
      state.insert(state.end(), part.begin(), part.end());
    }
  }
  return state;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// load_checkpoint must throw InputError on every rank, each with the failing rank's message containing all of `words`
// and naming `bad_rank` (unless every rank failed: -1). Returning at all proves no rank hung.
void expect_refused(Runner& runner, comm::Communicator& world, const std::string& dir, int bad_rank,
                    const std::vector<std::string>& words, const CheckpointData& data = {}) {
  std::string message;
  bool input_error = false;
  try {
    (void)load_checkpoint(runner, world, dir, data);
  } catch (const InputError& error) {
    input_error = true;
    message = error.what();
  }
  INFO("rank ", world.rank(), ": ", message);
  REQUIRE(input_error);
  for (const std::string& word : words) CHECK(message.find(word) != std::string::npos);
  if (bad_rank >= 0 && world.size() > 1) {
    CHECK(message.find("(rank " + std::to_string(bad_rank) + ")") != std::string::npos);
  }
}

// A 2-step checkpoint of a full_shard run in `dir`; returns the runner that wrote it.
std::unique_ptr<Runner> checkpointed_run(const ModelSpec& model, comm::Communicator& world, const std::string& dir) {
  RunnerOptions options;
  options.seed = 11;
  auto runner = std::make_unique<Runner>(model, test_plan(model, "full_shard", world.size()), world, options);
  const auto data = test_data(kMicroBatch, kSeqLen);
  (void)train(*runner, data, world, 0, 2);
  (void)save_checkpoint(*runner, world, dir, position_after(*runner, 2, world.size()));
  return runner;
}

std::string rank_file(const std::string& dir, int rank) {
  return (fs::path(dir) / "step-2" / ("rank-" + std::to_string(rank) + ".bin")).string();
}

}  // namespace

TEST_CASE("checkpoint: resuming is bit-identical to not stopping") {
  comm::MpiCommunicator world(MPI_COMM_WORLD);
  const ModelSpec model = small_llama();
  const auto data = test_data(kMicroBatch, kSeqLen);
  // no_shard too: there every rank holds (and saves) whole replicated units rather than shards.
  for (const std::string strategy : {"full_shard", "no_shard"}) {
    SharedTempDir dir;
    REQUIRE(!dir.path().empty());
    const Plan plan = test_plan(model, strategy, world.size());
    RunnerOptions options;
    options.seed = 11;
    Runner uninterrupted(model, plan, world, options);
    (void)train(uninterrupted, data, world, 0, 2);
    const CheckpointInfo saved = save_checkpoint(uninterrupted, world, dir.path(), position_after(uninterrupted, 2, world.size()));
    const std::vector<double> expected_losses = train(uninterrupted, data, world, 2, 2);

    // A fresh runner with another init seed: everything it trains with must come from the checkpoint.
    options.seed = 99;
    Runner resumed(model, plan, world, options);
    const CheckpointInfo loaded = load_checkpoint(resumed, world, dir.path());
    CHECK(loaded.step == 2);
    CHECK(loaded.step == saved.step);
    CHECK(loaded.data_position == saved.data_position);
    CHECK(resumed.optimizer_steps() == 2);
    const std::vector<double> losses = train(resumed, data, world, static_cast<int>(loaded.step), 2);
    INFO("strategy ", strategy, ", world ", world.size(), ", rank ", world.rank());
    REQUIRE(losses.size() == expected_losses.size());
    CHECK(std::memcmp(losses.data(), expected_losses.data(), losses.size() * sizeof(double)) == 0);
    CHECK(bitwise_equal(shard_state(resumed), shard_state(uninterrupted)));
  }
}

TEST_CASE("checkpoint: a truncated rank file is reported by its rank and refused by all") {
  comm::MpiCommunicator world(MPI_COMM_WORLD);
  const ModelSpec model = small_llama();
  SharedTempDir dir;
  REQUIRE(!dir.path().empty());
  auto runner = checkpointed_run(model, world, dir.path());
  const int bad = world.size() - 1;
  const std::string file = rank_file(dir.path(), bad);
  if (world.rank() == bad) fs::resize_file(file, fs::file_size(file) - 5);
  world.barrier();
  const std::vector<float> before = shard_state(*runner);
  expect_refused(*runner, world, dir.path(), bad, {file, "truncated (expected "});
  CHECK(bitwise_equal(shard_state(*runner), before));  // nothing was loaded on any rank
}

TEST_CASE("checkpoint: a flipped byte is a checksum mismatch") {
  comm::MpiCommunicator world(MPI_COMM_WORLD);
  const ModelSpec model = small_llama();
  SharedTempDir dir;
  REQUIRE(!dir.path().empty());
  auto runner = checkpointed_run(model, world, dir.path());
  const std::string file = rank_file(dir.path(), 0);
  if (world.rank() == 0) {
    std::fstream stream(file, std::ios::in | std::ios::out | std::ios::binary);
    const auto middle = static_cast<std::streamoff>(fs::file_size(file) / 2);
    stream.seekg(middle);
    char byte = 0;
    stream.get(byte);
    stream.seekp(middle);
    stream.put(static_cast<char>(byte ^ 0x10));
    REQUIRE(stream.good());
  }
  world.barrier();
  expect_refused(*runner, world, dir.path(), 0, {file, "checksum mismatch"});
}

TEST_CASE("checkpoint: a missing manifest or latest is a clear error on every rank") {
  comm::MpiCommunicator world(MPI_COMM_WORLD);
  const ModelSpec model = small_llama();
  SharedTempDir dir;
  REQUIRE(!dir.path().empty());
  auto runner = checkpointed_run(model, world, dir.path());
  const std::string manifest = (fs::path(dir.path()) / "step-2" / "manifest.json").string();
  world.barrier();
  if (world.rank() == 0) fs::remove(manifest);
  world.barrier();
  expect_refused(*runner, world, dir.path(), -1, {manifest, "missing"});
  world.barrier();
  if (world.rank() == 0) fs::remove(fs::path(dir.path()) / "latest");
  world.barrier();
  expect_refused(*runner, world, dir.path(), -1, {"no checkpoint to resume from", "latest is missing"});
  // Issue 37: a job killed during its first commit (a complete step, `latest` not yet renamed) leaves its temporary;
  // the resume says to start over and removes it. Reverted (message only "latest is missing"): no way forward named.
  const fs::path stale = fs::path(dir.path()) / "latest.tmp.999999999";  // a pid that never runs
  world.barrier();
  if (world.rank() == 0) std::ofstream(stale) << "step-2";
  world.barrier();
  expect_refused(*runner, world, dir.path(), -1, {"no save was committed", "start without --resume"});
  world.barrier();
  CHECK_FALSE(fs::exists(stale));
}

TEST_CASE("checkpoint: a checkpoint still being written is not picked up") {
  comm::MpiCommunicator world(MPI_COMM_WORLD);
  const ModelSpec model = small_llama();
  SharedTempDir dir;
  REQUIRE(!dir.path().empty());
  auto runner = checkpointed_run(model, world, dir.path());
  const std::vector<float> at_step_2 = shard_state(*runner);
  (void)train(*runner, test_data(kMicroBatch, kSeqLen), world, 2, 2);
  // What a crash in the middle of saving step 4 leaves: temporaries and finished rank files, no manifest, old latest.
  const fs::path step_4 = fs::path(dir.path()) / "step-4";
  fs::create_directories(step_4);
  const std::string name = "rank-" + std::to_string(world.rank()) + ".bin";
  std::ofstream(step_4 / (name + ".tmp.12345"), std::ios::binary) << "half a shard";
  std::ofstream(step_4 / name, std::ios::binary) << "a finished shard whose manifest never came";
  world.barrier();

  RunnerOptions options;
  options.seed = 99;
  Runner resumed(model, runner->plan(), world, options);
  const CheckpointInfo loaded = load_checkpoint(resumed, world, dir.path());
  CHECK(loaded.step == 2);
  CHECK(bitwise_equal(shard_state(resumed), at_step_2));
}

TEST_CASE("checkpoint: a resume that does not match says which setting differs, the same message on every rank") {
  comm::MpiCommunicator world(MPI_COMM_WORLD);
  const ModelSpec model = small_llama();
  SharedTempDir dir;
  REQUIRE(!dir.path().empty());
  RunnerOptions options;
  options.seed = 11;
  Runner written(model, test_plan(model, "full_shard", world.size()), world, options);
  const CheckpointData data{"a.txt", 100, 0x1234};
  (void)train(written, test_data(kMicroBatch, kSeqLen), world, 0, 1);
  (void)save_checkpoint(written, world, dir.path(), position_after(written, 1, world.size()), data);
  const std::string manifest = (fs::path(dir.path()) / "step-1" / "manifest.json").string();
  const auto resume_with = [&](const TrainingConfig& training, const std::string& strategy,
                               const CheckpointData& with, const std::vector<std::string>& words) {
    Runner resumed(model, strategy_plan(model, training, strategy, world.size()), world, options);
    std::vector<std::string> expected = words;
    expected.push_back(manifest);
    expect_refused(resumed, world, dir.path(), -1, expected, with);
  };
  // Reverted (one fingerprint for the whole plan): each said "model 'small-llama', plan 'default' differ from this
  // run's model 'small-llama', plan 'default'", and another --data was accepted silently.
  resume_with(fp32_training(kSeqLen, 1), "full_shard", data,
              {"written with --micro-batch 2, this run has --micro-batch 1"});
  resume_with(fp32_training(8, kMicroBatch), "full_shard", data,
              {"written with --seq-len 16, this run has --seq-len 8"});
  resume_with(fp32_training(kSeqLen, kMicroBatch), "full_shard", {"b.txt", 100, 0x9999},
              {"written from data file 'a.txt' (100 bytes, fnv1a64 0000000000001234), this run reads 'b.txt' (100 "
               "bytes, fnv1a64 0000000000009999) (--data)"});
  if (world.size() > 1) {
    resume_with(fp32_training(kSeqLen, kMicroBatch), "shard_grad_op", data, {"the plan differs at /units/"});
  }
  // The same bytes under another name are the same stream: the resume goes ahead.
  Runner same(model, test_plan(model, "full_shard", world.size()), world, options);
  CHECK(load_checkpoint(same, world, dir.path(), {"copy-of-a.txt", 100, 0x1234}).step == 1);
}

TEST_CASE("checkpoint: temporaries of a save killed before its renames are removed by the next resume") {
  comm::MpiCommunicator world(MPI_COMM_WORLD);
  const ModelSpec model = small_llama();
  SharedTempDir dir;
  REQUIRE(!dir.path().empty());
  auto runner = checkpointed_run(model, world, dir.path());
  // pid 999999999 is past any pid_max: a writer that is gone. This process's own temporaries are left alone.
  const std::string stale = rank_file(dir.path(), world.rank()) + ".tmp.999999999";
  const std::string live = rank_file(dir.path(), world.rank()) + ".tmp." + std::to_string(::getpid());
  const std::string latest = (fs::path(dir.path()) / "latest.tmp.999999999").string();
  std::ofstream(stale) << "half";
  std::ofstream(live) << "mine";
  if (world.rank() == 0) std::ofstream(latest) << "step-";
  world.barrier();
  // Reverted (no clean-up): the .tmp files of a killed save stayed forever.
  (void)load_checkpoint(*runner, world, dir.path());
  CHECK_FALSE(fs::exists(stale));
  CHECK(fs::exists(live));
  if (world.rank() == 0) CHECK_FALSE(fs::exists(latest));
  fs::remove(live);
  world.barrier();
}

}  // namespace shardplan::runner::testing
