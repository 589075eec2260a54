// ByteTextDataset: reads the GPL-3 text, deterministic batches, next-token targets, seek/position round trip.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "byte_text_dataset.h"
#include "case_skip.h"
#include "errors.h"

using namespace shardplan;
using namespace shardplan::runtime;

namespace {

ByteTextDatasetOptions gpl_options() {
  ByteTextDatasetOptions options;
  options.micro_batch = 3;
  options.seq_len = 16;
  options.seed = 7;
  return options;
}

}  // namespace

TEST_CASE("ByteTextDataset: windows of the real GPL-3 text, deterministic and seekable"
          * doctest::test_suite("gpl-text")) {
  const ByteTextDatasetOptions options = gpl_options();
  if (!std::filesystem::exists(options.path)) SKIP_CASE(options.path + " is missing (Debian's base-files has it)");
  ByteTextDataset dataset(options);
  CHECK(dataset.size_bytes() > 30'000);
  std::ifstream file(options.path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  REQUIRE(text.size() == dataset.size_bytes());

  const Batch first = dataset.next();
  CHECK(first.micro_batch == 3);
  CHECK(first.seq_len == 16);
  REQUIRE(first.tokens.size() == 48);
  REQUIRE(first.targets.size() == 48);
  for (int row = 0; row < 3; ++row) {
    std::string window;
    for (int s = 0; s < 16; ++s) {
      const auto i = static_cast<std::size_t>(row * 16 + s);
      CHECK(first.tokens[i] >= 0);
      CHECK(first.tokens[i] <= 255);
      if (s + 1 < 16) CHECK(first.targets[i] == first.tokens[i + 1]);  // next-token targets
      window.push_back(static_cast<char>(first.tokens[i]));
    }
    window.push_back(static_cast<char>(first.targets[static_cast<std::size_t>(row * 16 + 15)]));
    CHECK(text.find(window) != std::string::npos);  // a real window of the file
  }

  // Determinism: a second dataset with the same options yields the same stream.
  ByteTextDataset twin(options);
  CHECK(twin.next().tokens == first.tokens);
  CHECK(dataset.batch_at(0).tokens == first.tokens);

  // Seek / position round trip, as a checkpoint resume would do it.
  dataset.next();
  const std::uint64_t saved_position = dataset.position();
  CHECK(saved_position == 2);
  const Batch third = dataset.next();
  dataset.next();
  dataset.seek(saved_position);
  CHECK(dataset.position() == saved_position);
  const Batch resumed = dataset.next();
  CHECK(resumed.tokens == third.tokens);
  CHECK(resumed.targets == third.targets);
  CHECK(third.tokens != first.tokens);

  // Another seed gives another stream.
  ByteTextDatasetOptions other = options;
  other.seed = 8;
  CHECK(ByteTextDataset(other).batch_at(0).tokens != first.tokens);
}

TEST_CASE("ByteTextDataset refuses a missing file and impossible shapes with InputError") {
  ByteTextDatasetOptions options = gpl_options();
  options.path = "/nonexistent/shardplan-test.txt";
  CHECK_THROWS_WITH_AS(ByteTextDataset{options}, doctest::Contains("/nonexistent/shardplan-test.txt"), InputError);
  options = gpl_options();
  options.seq_len = 0;
  CHECK_THROWS_AS(ByteTextDataset{options}, InputError);
  options = gpl_options();
  if (std::filesystem::exists(options.path)) {
    options.seq_len = 10'000'000;  // longer than the file
    CHECK_THROWS_AS(ByteTextDataset{options}, InputError);
  }
}
