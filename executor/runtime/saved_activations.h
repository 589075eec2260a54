// SavedActivations: what one layer's forward keeps for its backward, with its byte size for memory accounting.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model_spec.h"

namespace shardplan::runtime {

// Every layer keeps its input (hidden states and/or the token ids it read); under full checkpointing that is all it
// keeps, and backward recomputes the rest (LayerKernel::recompute). Tensors are named so a kernel's forward and
// backward agree on them without a per-kernel struct, and so tests can see what was kept.
class SavedActivations {
 public:
  int micro_batch = 0;
  int seq_len = 0;
  ActivationCheckpointing checkpointing = ActivationCheckpointing::none;
  std::vector<float> input;         // the layer's hidden-state input, [tokens × width]; empty for the embedding
  std::vector<std::int32_t> ids;    // token ids (embedding) or targets (loss); empty for other layers

  // Stores `values` under `name` (replacing an older tensor of that name) and returns the stored vector; the
  // reference stays valid while this object lives (a deque never moves its elements on push_back).
  std::vector<float>& put(std::string name, std::vector<float> values);
  // The tensor called `name`; InternalError when forward did not keep it.
  const std::vector<float>& get(std::string_view name) const;
  bool has(std::string_view name) const;
  // Drops every named tensor, keeping input and ids: what full activation checkpointing keeps.
  void keep_only_inputs() { tensors_.clear(); }
  std::vector<std::string> names() const;

  // Bytes held: input, ids and every named tensor (what a tracking allocator would see for this layer).
  std::int64_t bytes() const;

 private:
  std::deque<std::pair<std::string, std::vector<float>>> tensors_;
};

}  // namespace shardplan::runtime
