// The pipeline search tests' case: llama3-8b on 16 H100s at 2,048 tokens, and the grid options they search.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "search_fixtures.h"
#include "search_pipeline.h"

namespace shardplan::testing {

struct PipelineSearchCase : SearchCase {
  PipelineSearchCase() : SearchCase("llama3-8b", "2x8xH100-80GB", 2048) {}
  // The grid at these pipeline degrees, TP 1, 2 and 4, the whole GPU usable.
  PipelineSearchOptions options(std::vector<int> degrees, std::size_t threads = 1) const {
    PipelineSearchOptions searched;
    searched.pipeline_degrees = std::move(degrees);
    searched.tensor_parallel_degrees = {1, 2, 4};
    searched.usable_bytes = cluster.gpu.memory_bytes;
    searched.threads = threads;
    return searched;
  }
};

}  // namespace shardplan::testing
