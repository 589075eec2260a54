// Tests of closest-name suggestions: edit distance, closest_names ranking and cut-off, did_you_mean wording.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "errors.h"
#include "hardware_catalog.h"
#include "model_presets.h"
#include "name_suggest.h"

namespace {

using shardplan::closest_names;
using shardplan::did_you_mean;
using shardplan::edit_distance;

using Names = std::vector<std::string>;

const Names kStrategies = {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2",
                           "zero1",      "zero2",         "zero3"};

}  // namespace

TEST_CASE("edit_distance: textbook Levenshtein values") {
  CHECK(edit_distance("kitten", "sitting") == 3);  // 2 substitutions + 1 insertion
  CHECK(edit_distance("sitting", "kitten") == 3);  // symmetric
  CHECK(edit_distance("flaw", "lawn") == 2);       // 1 deletion + 1 insertion
  CHECK(edit_distance("Saturday", "Sunday") == 3);
  CHECK(edit_distance("gpt2", "gpt3") == 1);
  CHECK(edit_distance("abc", "abc") == 0);
}

TEST_CASE("edit_distance: empty strings cost one edit per character") {
  CHECK(edit_distance("", "") == 0);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("abcd", "") == 4);
}

TEST_CASE("edit_distance ignores letter case but not other characters") {
  CHECK(edit_distance("H100-80GB", "h100-80gb") == 0);
  CHECK(edit_distance("LLAMA3-8B", "llama3-8b") == 0);
  CHECK(edit_distance("ABC", "abd") == 1);
  CHECK(edit_distance("a-b", "a_b") == 1);   // '-' and '_' differ
  CHECK(edit_distance("llama3-8 ", "llama3-8") == 1);  // a trailing space is a character
}

TEST_CASE("closest_names picks llama3-8b first for 'llama3-8' among the presets") {
  const auto names = closest_names("llama3-8", shardplan::model_preset_names());
  // Distances: llama3-8b 1; llama2-7b and llama3-70b 3 (within a third of 9 characters); llama2-13b 4 is out.
  // Ties keep the order of the known list.
  CHECK(names == Names{"llama3-8b", "llama2-7b", "llama3-70b"});
  // A trailing space (as pasted from a shell) changes nothing in the ranking.
  CHECK(closest_names("llama3-8 ", shardplan::model_preset_names()).front() == "llama3-8b");
}

TEST_CASE("closest_names: best first, at most three, only those within a third of the longer length") {
  CHECK(closest_names("ful_shard", kStrategies) == Names{"full_shard", "no_shard"});
  CHECK(closest_names("fulll", {"none", "full", "selective"}) == Names{"full"});
  CHECK(closest_names("hiden_size", {"vocab_size", "hidden_size", "num_layers"}) == Names{"hidden_size"});
  // Exact (case-insensitive) match ranks first.
  CHECK(closest_names("h100-80gb", {"A100-80GB", "H100-80GB"}).front() == "H100-80GB");
  // Four names at distance 1 from "ab": only three are kept, in the known list's order.
  CHECK(closest_names("ab", {"abc", "abd", "abe", "abf"}) == Names{"abc", "abd", "abe"});
}

TEST_CASE("closest_names falls back to the single closest name when none is close") {
  CHECK(closest_names("zzzzzzzz", {"gpt2", "llama2-7b"}) == Names{"gpt2"});  // 8 vs 9 edits
  const auto gpus = shardplan::HardwareCatalog::builtin().gpu_names();
  CHECK(closest_names("H100-80G", gpus).front() == "H100-80GB");
}

TEST_CASE("closest_names: names that begin with the wanted text come first, however short it is") {
  // Plain edit distance misses a shortened name: "h100" is 2 edits from B200 but 5 from H100-80GB, and "bf16" is
  // 3 from fp32 but 6 from bf16-mixed. Mutation tried: without the prefix rule every check below fails (CHECK( B200
  // != B200 )).
  const auto gpus = shardplan::HardwareCatalog::builtin().gpu_names();
  const auto h100 = closest_names("h100", gpus);
  REQUIRE(!h100.empty());
  CHECK(h100.front().starts_with("H100"));
  for (const auto& name : h100) CHECK(name != "B200");
  CHECK(closest_names("bf16", {"fp32", "bf16-mixed", "bf16-mixed-fp32-reduce", "pure-bf16", "zero-fp16"}) ==
        Names{"bf16-mixed", "bf16-mixed-fp32-reduce"});
  // An empty text begins every name; it is scored by edit distance like any other.
  CHECK(closest_names("", {"ab", "abc"}) == Names{"ab"});
}

TEST_CASE("closest_names of an empty list is empty") {
  CHECK(closest_names("anything", {}).empty());
  CHECK(closest_names("", {}).empty());
}

TEST_CASE("the catalog suggests H100-80GB for a shortened 'h100'") {
  const auto catalog = shardplan::HardwareCatalog::builtin();
  std::string message;
  try {
    catalog.gpu("h100");
  } catch (const shardplan::InputError& error) {
    message = error.what();
  }
  CHECK(message.find("unknown GPU 'h100'") != std::string::npos);
  CHECK(message.find("'H100-80GB'") != std::string::npos);
  CHECK(message.find("B200") == std::string::npos);
}

TEST_CASE("did_you_mean wording for one, two and three names and for an empty list") {
  CHECK(did_you_mean("fulll", {"none", "full", "selective"}) == " (did you mean 'full'?)");
  CHECK(did_you_mean("ful_shard", kStrategies) == " (did you mean 'full_shard' or 'no_shard'?)");
  CHECK(did_you_mean("llama3-8", shardplan::model_preset_names()) ==
        " (did you mean 'llama3-8b', 'llama2-7b' or 'llama3-70b'?)");
  CHECK(did_you_mean("anything", {}) == "");
}
