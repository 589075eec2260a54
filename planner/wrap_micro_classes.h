// MicroClasses: the micro-batches whose memory terms agree in every fragment a wrap search reads (Note [Memory
// classes]), so that a label keeps one memory term per class instead of one per micro-batch. Internal to planner/.
#pragma once

#include <cstddef>
#include <vector>

#include "wrap_fragments.h"

namespace shardplan::wrap_internal {

// Note [Memory classes]: a label's memory terms (Note [Wrap floor]) are per micro-batch, and every update of the term
// of micro-batch i reads only the i-th entry of the fragments' per-micro-batch figures (certainly live peaks, the idle
// placements' peaks, exactness and early streams, the units' before/span/after bytes) — except the last micro-batch,
// whose backward is placed from the label's own state. Two micro-batches other than the last whose figures are equal in
// every edge and pair a search reads therefore hold equal terms in every label (by induction over last_unit, extend
// and close), so one term per class is the same floor and the same dominance order, bit for bit. With gradient
// accumulation the middle micro-batches of a step are alike: a fixed global batch over few ranks (llama2-7b, 4M tokens
// on 8 GPUs: 128 micro-batches) keeps three terms where it kept 128, in every label the DP copies and compares.
struct MicroClasses {
  std::vector<std::size_t> class_of;  // per micro-batch
  std::vector<int> first_micro;       // per class: its first micro-batch (the one whose figures are read)
  std::size_t count() const { return first_micro.size(); }
  bool represents(int micro) const {
    return first_micro[class_of[static_cast<std::size_t>(micro)]] == micro;
  }
};

// The classes of `micro_batches` over the edges and pairs a search reads; the last micro-batch is a class of its own.
MicroClasses memory_classes(int micro_batches, const std::vector<const EdgeFragments*>& edges,
                            const std::vector<const PairFragments*>& pairs);

}  // namespace shardplan::wrap_internal
