// Folded windows (Note [Folded windows]): the wrap search's windows lowered with four micro-batches and their
// per-micro-batch fragments unfolded to the step's count where the two middle ones agree.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "wrap_fragments.h"

namespace shardplan {

// Note [Folded windows]: with gradient accumulation a step's micro-batches are a first, k − 2 middle ones and a last
// (the lowering emits each from the state the one before it leaves; only the first starts from the step's start and
// only the last synchronises and steps, without no_sync every one reduces). The wrap search's windows
// (fragment_cache.h) are therefore lowered with four: first, two middle, last. Where the two middle micro-batches
// give equal fragments and memory figures — the second middle one follows a middle one and precedes the last, the
// first follows the first and precedes a middle one, so neither neighbour changes them — every middle micro-batch
// of the step gives them too (each is lowered from the state the one before leaves, which is the same state), and
// the last follows a middle one in both lowerings. The fragments are then unfolded: first, the middle one k − 2
// times, last. Where they differ the window is lowered again with all k micro-batches (nothing is assumed).
// Measured on `capacity -m llama2-7b` at 8 GPUs (64 micro-batches per step): the windows were lowered, cut and
// placed 64 times per unit choice.
inline constexpr int kFoldedMicroBatches = 4;

namespace fragment_folding {

// The middle micro-batches (1 and 2) of per-micro-batch values agree.
template <class T>
bool middles_equal(const std::vector<T>& per_micro) {
  return per_micro.size() == static_cast<std::size_t>(kFoldedMicroBatches) && per_micro[1] == per_micro[2];
}

// [first, middle, middle, last] → first, the middle one micro_batches − 2 times, last.
template <class T>
void unfold(std::vector<T>& per_micro, int micro_batches) {
  std::vector<T> unfolded;
  unfolded.reserve(static_cast<std::size_t>(micro_batches));
  unfolded.push_back(std::move(per_micro.front()));
  for (int micro = 1; micro + 1 < micro_batches; ++micro) unfolded.push_back(per_micro[1]);
  unfolded.push_back(std::move(per_micro.back()));
  per_micro = std::move(unfolded);
}

}  // namespace fragment_folding

// The idle timings follow from the fragments (placed from one state), the gathers from the head's and turn's slots.
inline bool middles_alike(const EdgeFragments& edge) {
  using fragment_folding::middles_equal;
  return middles_equal(edge.start) && middles_equal(edge.head) && middles_equal(edge.last_forward) &&
         middles_equal(edge.turn) && middles_equal(edge.close) && middles_equal(edge.before) &&
         middles_equal(edge.span) && middles_equal(edge.after);
}

inline bool middles_alike(const UnitFragments& unit) {
  using fragment_folding::middles_equal;
  return middles_equal(unit.forward) && middles_equal(unit.backward) &&
         (unit.backward_below_kept.empty() || middles_equal(unit.backward_below_kept)) &&
         middles_equal(unit.held_at_end);
}

inline void unfold(EdgeFragments& edge, int micro_batches) {
  using fragment_folding::unfold;
  for (auto* fragments : {&edge.start, &edge.head, &edge.last_forward, &edge.turn, &edge.close}) {
    unfold(*fragments, micro_batches);
  }
  for (auto* timings : {&edge.start_idle, &edge.head_idle, &edge.last_forward_idle, &edge.turn_idle,
                        &edge.close_idle}) {
    unfold(*timings, micro_batches);
  }
  for (auto* bytes : {&edge.before, &edge.span, &edge.after}) unfold(*bytes, micro_batches);
  unfold(edge.forward_gather, micro_batches);
  unfold(edge.backward_gather, micro_batches);
}

inline void unfold(UnitFragments& unit, int micro_batches) {
  using fragment_folding::unfold;
  unfold(unit.forward, micro_batches);
  unfold(unit.backward, micro_batches);
  if (!unit.backward_below_kept.empty()) unfold(unit.backward_below_kept, micro_batches);
  unfold(unit.held_at_end, micro_batches);
}

}  // namespace shardplan
