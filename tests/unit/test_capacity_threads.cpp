// Tests of the capacity sweep's threads (Note [Parallel sweep] in planner/capacity.cpp): the same table for any count.
#include <doctest/doctest.h>

#include <atomic>
#include <string>

#include "llama_blocks.h"
#include "capacity.h"
#include "decoder_builder.h"
#include "errors.h"
#include "model_presets.h"

using namespace shardplan;
using namespace shardplan::testing;

namespace {

// The sweep's JSON less its wall time, which is the only field a thread count may change.
nlohmann::json sweep_json(const ModelSpec& model, const TrainingConfig& training, CapacityOptions options,
                          std::size_t threads) {
  options.threads = threads;
  std::atomic<std::size_t> calls{0};
  options.progress = [&](std::size_t done, std::size_t total) {
    CHECK(done <= total);
    ++calls;
  };
  nlohmann::json document = to_json(capacity_sweep(model, HardwareCatalog::builtin(), training, options));
  CHECK(calls == document.at("points").size());  // one progress call per point, whatever the threads
  document.erase("seconds");
  return document;
}

}  // namespace

TEST_CASE("capacity sweep: 1, 2 and 5 threads give the same points, fixed global batch and weak scaling") {
  const ModelSpec model = llama_blocks(4);
  TrainingConfig training;
  training.seq_len = 1024;
  CapacityOptions options;
  options.gpus = {"A100-40GB", "H100-80GB", "L40S"};
  options.min_gpus = 1;
  options.max_gpus = 64;
  for (const std::int64_t global_batch_tokens : {std::int64_t{0}, std::int64_t{64} * 1024}) {
    CAPTURE(global_batch_tokens);
    options.global_batch_tokens = global_batch_tokens;
    const nlohmann::json one = sweep_json(model, training, options, 1);
    REQUIRE(one.at("points").size() == 3 * 7);  // 1..64 GPUs per type
    CHECK(sweep_json(model, training, options, 2) == one);
    CHECK(sweep_json(model, training, options, 5) == one);
  }
}

TEST_CASE("capacity sweep: a point's error on a worker thread reaches the caller as the sequential sweep's error") {
  const ModelSpec model = llama_blocks(2);
  TrainingConfig training;
  training.seq_len = 1024;
  CapacityOptions options;
  options.gpus = {"A100-40GB"};
  options.max_gpus = 16;
  // A profile for the swept GPU with a field the profile schema lacks: every point applying it raises InputError
  // (inside the worker threads; uncaught there it would end the process).
  options.profiles.emplace_back(nlohmann::json{{"schema", "shardplan.profile/v1"}, {"device", "A100-40GB"},
                                               {"not_a_profile_field", 1}},
                                "bad-profile.json");
  std::string sequential;
  options.threads = 1;
  try {
    (void)capacity_sweep(model, HardwareCatalog::builtin(), training, options);
  } catch (const InputError& error) {
    sequential = error.what();
  }
  REQUIRE(sequential.find("not_a_profile_field") != std::string::npos);
  options.threads = 4;
  CHECK_THROWS_WITH_AS((void)capacity_sweep(model, HardwareCatalog::builtin(), training, options), sequential.c_str(),
                       InputError);
}
