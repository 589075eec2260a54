// The wrap searches' transitions (Note [Wrap DP]): a unit's fragments placed onto a label, the close, the bounds of
// the rest from idle placements, and the memory floor (Note [Wrap floor]).
#include "wrap_context.h"

#include <algorithm>

namespace shardplan::wrap_internal {

unsigned busy_streams(const BoundaryState& state) {
  unsigned busy = 0;
  for (int stream = 0; stream < kStreamCount; ++stream) {
    if (state.stream_free_s[static_cast<std::size_t>(stream)] > 0) busy |= 1u << static_cast<unsigned>(stream);
  }
  return busy;
}

WrapContext::WrapContext(WrapFragments& fragments_in, int max_unit_blocks, std::int64_t cap_bytes,
                         bool per_unit_reshard, bool floor_for_any_prefetch_depth)
    : fragments(fragments_in), n(fragments_in.block_count()),
      m(std::min(n, static_cast<std::size_t>(std::max(1, max_unit_blocks)))),
      keep_choice(per_unit_reshard && fragments_in.keep_choice()), template_kept(fragments_in.template_kept()),
      memory_cap_bytes(cap_bytes), floor_for_any_depth_(floor_for_any_prefetch_depth),
      micro_batches_(fragments_in.micro_batches()),
      placer_(fragments_in.profile(), fragments_in.relaxation()) {
  // Note [Wrap floor]: placements are the simulator's timing only when collectives run at their own speed and every
  // micro-batch but the last ends idle (its reductions, if any, done): a one-block unit's close says which.
  regular_ = fragments.profile().overlap_collective_slowdown <= 1.0;
  const EdgeFragments& probe = fragments.edge({0, 1, template_kept});
  for (int micro = 0; micro + 1 < micro_batches_; ++micro) {
    regular_ = regular_ && probe.close_idle[static_cast<std::size_t>(micro)].end.idle();
  }
  const auto micros = static_cast<std::size_t>(micro_batches_);
  key_.assign((n + 1) * (m + 1) * 2, 0);
  for (std::size_t p = 0; p < n; ++p) {
    for (std::size_t b = 1; b <= m && p + b <= n; ++b) {
      for (bool kept : {false, true}) key_[state_index({p, b, kept})] = fragments.key_of({p, b, kept});
    }
  }
  least_persistent_.assign(n + 1, std::numeric_limits<std::int64_t>::max());
  least_span_.assign(n + 1, std::vector<std::int64_t>(micros, std::numeric_limits<std::int64_t>::max()));
  least_persistent_[0] = 0;
  std::vector<std::int64_t> least_optimizer_elements(n + 1, std::numeric_limits<std::int64_t>::max());
  // Note [Memory classes]: every edge and pair a search reads, for the micro-batch classes.
  std::vector<const EdgeFragments*> edges_read;
  std::vector<const PairFragments*> pairs_read;
  least_optimizer_elements[0] = 0;
  std::fill(least_span_[0].begin(), least_span_[0].end(), 0);
  for (std::size_t p = 1; p <= n; ++p) {
    for (std::size_t c = 1; c <= m && c <= p; ++c) {
      if (!fragments.may_share_unit(p - c, c)) continue;  // the floors of the wrappings the front end allows
      for (bool kept : kept_options()) {
        const EdgeFragments& edge = fragments.edge({p - c, c, kept}, key_[state_index({p - c, c, kept})]);
        edges_read.push_back(&edge);
        least_persistent_[p] = std::min(least_persistent_[p], least_persistent_[p - c] + edge.persistent_bytes);
        least_optimizer_elements[p] =
            std::min(least_optimizer_elements[p], least_optimizer_elements[p - c] + edge.optimizer_elements);
        for (std::size_t micro = 0; micro < micros; ++micro) {
          least_span_[p][micro] = std::min(least_span_[p][micro], least_span_[p - c][micro] + edge.span[micro]);
        }
      }
    }
  }
  // Every wrapping's optimizer step takes at least this long: its shards are those of some partition of the blocks.
  least_optimizer_s_ = fragments.optimizer_base_s(fragments.root_optimizer_elements() + least_optimizer_elements[n]);
  // Note [Wrap bounds]: reset_ and forward_rest_ by first block, from the close at p = 0 upwards: at p the unit's
  // backward with the unit below and the unit below's forward, then that unit's rest.
  const std::size_t states = (n + 1) * (m + 1) * 2;
  reset_.assign(states, kInf);
  forward_rest_.assign(states, kInf);
  own_work_.assign(states, {});
  left_work_.assign(n + 1, {});
  const auto sum_of = [](const std::vector<FragmentTiming>& timings, std::size_t count) {
    double total = 0;
    for (std::size_t at = 0; at < count; ++at) total += timings[at].duration_s;
    return total;
  };
  const std::size_t before_last = micros - 1;  // the micro-batches placed from the idle state in the backward too
  for (std::size_t p = 0; p < n; ++p) {
    for (std::size_t b = 1; b <= m && p + b <= n; ++b) {
      // Units the front end forbids are never placed (Note [Uniform requires_grad] in plan.h): no bounds for them.
      if (!fragments.may_share_unit(p, b)) continue;
      for (bool kept : kept_options()) {
        const UnitChoice unit{p, b, kept};
        const std::size_t state = state_index(unit);
        if (p == 0) {
          const EdgeFragments& edge = fragments.edge(unit, key_[state]);
          const double forward = sum_of(edge.start_idle, micros) + sum_of(edge.head_idle, micros) +
                                 sum_of(edge.close_idle, before_last);
          reset_[state] = forward + edge.close_idle.back().duration_s;
          forward_rest_[state] = forward;
          own_work_[state] = edge.close.back().stream_work_s;
          continue;
        }
        const UnitFragments& own = fragments.unit(unit);
        own_work_[state] = (own.backward.empty() ? own.backward_below_kept : own.backward).back().stream_work_s;
        for_each_left_neighbour(unit, [&](const UnitChoice& left) {
          const PairFragments& pair = fragments.pair(left, unit, key_[state_index(left)], key_[state]);
          pairs_read.push_back(&pair);
          double forward = forward_rest_[state_index(left)];
          for (std::size_t at = 0; at < micros; ++at) {
            forward += pair.micro[at].forward_left_idle.duration_s +
                       (at < before_last ? pair.micro[at].backward_right_idle.duration_s : 0.0);
          }
          forward_rest_[state] = std::min(forward_rest_[state], forward);
          reset_[state] = std::min(reset_[state], forward - forward_rest_[state_index(left)] +
                                                      pair.micro[before_last].backward_right_idle.duration_s +
                                                      reset_[state_index(left)]);
        });
      }
    }
  }
  classes_ = wrap_internal::memory_classes(micro_batches_, edges_read, pairs_read);
  for (std::size_t p = 1; p <= n; ++p) {
    left_work_[p].fill(kInf);
    for (std::size_t c = 1; c <= m && c <= p; ++c) {
      for (bool kept : kept_options()) {
        const auto& work = own_work_[state_index({p - c, c, kept})];
        for (int stream = 0; stream < kStreamCount; ++stream) {
          auto& least = left_work_[p][static_cast<std::size_t>(stream)];
          least = std::min(least, left_work_[p - c][static_cast<std::size_t>(stream)] + work[static_cast<std::size_t>(stream)]);
        }
      }
    }
  }
}

std::span<const bool> WrapContext::kept_options() const {
  // Static storage: the searches ask for these in their inner loops (a vector<bool> each time was a heap block).
  static constexpr bool kBoth[] = {false, true}, kResharded[] = {false}, kKept[] = {true};
  if (keep_choice) return kBoth;
  return template_kept ? std::span<const bool>(kKept) : std::span<const bool>(kResharded);
}

std::int64_t WrapContext::memory_term(std::int64_t certain_peak_bytes, const FragmentTiming& idle,
                                      const FragmentTiming* placed, unsigned busy_at_start) const {
  if (!regular_ || floor_for_any_depth_) return certain_peak_bytes;
  if (placed != nullptr) return placed->exact ? placed->peak_bytes : certain_peak_bytes;
  // From a state whose busy streams carry no op the fragment starts before its end, the ops before its end run in
  // the idle placement's order: its live bytes are the same (Note [Wrap floor]).
  if (idle.exact && (busy_at_start & idle.early_streams) == 0) return idle.peak_bytes;
  return certain_peak_bytes;
}

void WrapContext::add_term(Label& label, int micro, std::int64_t bytes) const {
  auto& most = label.most_live(classes_.class_of[static_cast<std::size_t>(micro)]);
  most = std::max(most, bytes);
}

Label WrapContext::last_unit(const UnitChoice& unit) {
  const EdgeFragments& edge = fragments.edge(unit);
  Label label;
  label.memory.assign(3 * classes_.count(), 0);
  for (int micro = 0; micro < micro_batches_; ++micro) {
    const auto at = static_cast<std::size_t>(micro);
    const FragmentTiming& forward = edge.last_forward_idle[at];
    const FragmentTiming& turn = edge.turn_idle[at];
    label.cost_s += forward.duration_s + turn.duration_s;
    // Both are placed from the idle state; the turn's start is the forward's end, and the turn's end is the start
    // of this micro-batch's backward — placed from the idle state too, except the last micro-batch's chain.
    label.exact = label.exact && forward.exact && forward.end.idle() && turn.exact &&
                  (micro + 1 == micro_batches_ || turn.end.idle());
    if (!classes_.represents(micro)) continue;  // Note [Memory classes]: its class's first micro-batch holds its terms
    add_term(label, micro, memory_term(edge.last_forward[at].certain_peak_bytes, forward, nullptr, 0));
    add_term(label, micro, memory_term(edge.turn[at].certain_peak_bytes, turn, nullptr, 0));
  }
  label.state = edge.turn_idle.back().end;
  label.busy = busy_streams(label.state);
  label.optimizer_elements = edge.optimizer_elements;
  label.persistent_bytes = edge.persistent_bytes;
  return label;
}

Label WrapContext::extend(const Label& label, const UnitChoice& unit, const UnitChoice& left,
                          std::int64_t held_above_bytes, bool exact_memory) {
  return extend(label, transition(unit, left), held_above_bytes, exact_memory);
}

Label WrapContext::extend(const Label& label, const Transition& step, std::int64_t held_above_bytes,
                          bool exact_memory) {
  const EdgeFragments& below = step.below;
  const PairFragments& pair = step.pair;
  Label next = label;
  // Every micro-batch's forward of the left unit and, but the last's, backward of the unit above, from the idle
  // state, added in time order (PairFragments::idle_durations_s); the last backward is placed below.
  for (const double duration_s : pair.idle_durations_s) next.cost_s += duration_s;
  next.exact = next.exact && pair.idle_exact;
  // Note [Memory classes]: each class's terms from its first micro-batch's figures.
  for (std::size_t memory_class = 0; memory_class < classes_.count(); ++memory_class) {
    const int micro = classes_.first_micro[memory_class];
    const auto at = static_cast<std::size_t>(micro);
    const PairFragments::Micro& figures = pair.micro[at];
    // Note [Wrap floor]: the unit below holds its span beside every fragment placed so far.
    next.most_live(memory_class) += below.span[at];
    add_term(next, micro,
             memory_term(figures.forward_left_certain, figures.forward_left_idle, nullptr, 0) +
                 label.before_sum(memory_class));
    if (micro + 1 < micro_batches_) {
      add_term(next, micro,
               memory_term(figures.backward_right_certain, figures.backward_right_idle, nullptr, 0) +
                   label.after_sum(memory_class));
    } else {
      // From the idle state without held bytes, the placement is the pair's own.
      const bool from_idle = label.busy == 0 && label.state.comm_busy.empty() && held_above_bytes == 0;
      const FragmentTiming placed =
          from_idle ? figures.backward_right_idle
                    : pair.place_backward_right(micro, label.state, placer_, held_above_bytes, exact_memory);
      next.cost_s += placed.duration_s;
      next.exact = next.exact && placed.exact;
      next.state = placed.end;
      next.busy = busy_streams(next.state);
      add_term(next, micro,
               memory_term(figures.backward_right_certain, figures.backward_right_idle,
                           exact_memory ? &placed : nullptr, label.busy) +
                   label.after_sum(memory_class));
    }
    next.before_sum(memory_class) += step.leftmost.before[at];
    next.after_sum(memory_class) += step.leftmost.after[at];
  }
  next.optimizer_elements += below.optimizer_elements;
  next.persistent_bytes += below.persistent_bytes;
  return next;
}

WrapContext::Closed WrapContext::close(const Label& label, const UnitChoice& first, std::int64_t held_above_bytes,
                                       bool exact_memory) {
  const EdgeFragments& edge = fragments.edge(first);
  Closed closed;
  closed.step_s = label.cost_s;
  closed.exact = label.exact;
  const std::size_t classes = classes_.count();
  InlineVector<std::int64_t, 3> most;
  for (std::size_t memory_class = 0; memory_class < classes; ++memory_class) {
    most.push_back(label.most_live(memory_class));
  }

  for (int micro = 0; micro < micro_batches_; ++micro) {
    const auto at = static_cast<std::size_t>(micro);
    // Note [Memory classes]: only a class's first micro-batch adds the class's terms.
    const bool represents = classes_.represents(micro);
    const std::size_t memory_class = classes_.class_of[at];
    const auto add = [&](std::int64_t bytes) { most[memory_class] = std::max(most[memory_class], bytes); };
    for (const auto& [fragment, timing] : {std::pair{&edge.start[at], &edge.start_idle[at]},
                                           std::pair{&edge.head[at], &edge.head_idle[at]}}) {
      closed.step_s += timing->duration_s;
      closed.exact = closed.exact && timing->exact && timing->end.idle();
      if (represents) add(memory_term(fragment->certain_peak_bytes, *timing, nullptr, 0) + label.before_sum(memory_class));
    }
    if (micro + 1 < micro_batches_) {
      const FragmentTiming& timing = edge.close_idle[at];
      closed.step_s += timing.duration_s;
      closed.exact = closed.exact && timing.exact && timing.end.idle();
      if (represents) add(memory_term(edge.close[at].certain_peak_bytes, timing, nullptr, 0) + label.after_sum(memory_class));
      continue;
    }
    const double optimizer_s =
        fragments.optimizer_base_s(label.optimizer_elements + fragments.root_optimizer_elements());
    FragmentInputs inputs;
    inputs.held_bytes = held_above_bytes;
    inputs.optimizer_base_s = optimizer_s;
    inputs.with_peak = exact_memory;
    const FragmentTiming placed = placer_.place(edge.close[at], label.state, inputs);
    // The step ends with the optimizer step, which waits for every reduction; anything still running would end it.
    closed.step_s += placed.duration_s +
                     *std::max_element(placed.end.stream_free_s.begin(), placed.end.stream_free_s.end());
    closed.exact = closed.exact && placed.exact;
    add(memory_term(edge.close[at].certain_peak_bytes, edge.close_idle[at], exact_memory ? &placed : nullptr,
                    label.busy) +
        label.after_sum(memory_class));
  }
  closed.floor_bytes = fragments.constant_bytes() + label.persistent_bytes + *std::max_element(most.begin(), most.end());
  return closed;
}

double WrapContext::lower_bound(const UnitChoice& unit, const Label& label) const {
  // Note [Wrap bounds]: each fragment from the idle state; or the forward part, then every communication stream's
  // queued work, the leftmost unit's and the least of the units left of it — followed, on the streams the reductions
  // run on, by the optimizer step, which waits for every reduction.
  const std::size_t state = state_index(unit);
  const double optimizer_s = least_optimizer_s_;
  double serial = optimizer_s;  // the step's last op, after the boundary
  for (int stream = 0; stream < kStreamCount; ++stream) {
    if (stream == static_cast<int>(StreamKind::compute)) continue;
    // Free all-gathers (a relaxation) take none of their stream's time.
    if (stream == static_cast<int>(StreamKind::all_gather) && fragments.relaxation().free_all_gathers) continue;
    const auto at = static_cast<std::size_t>(stream);
    // Every op on a reduction stream (the offload copy to the host included) ends before the optimizer step starts.
    const bool reduces = stream == static_cast<int>(StreamKind::reduce_scatter) ||
                         stream == static_cast<int>(StreamKind::all_reduce) ||
                         stream == static_cast<int>(StreamKind::device_to_host);
    serial = std::max(serial, label.state.stream_free_s[at] + own_work_[state][at] + left_work_[unit.first_block][at] +
                                  (reduces ? optimizer_s : 0.0));
  }
  return std::max(reset_[state], forward_rest_[state] + serial);
}

std::int64_t WrapContext::floor_bytes(const UnitChoice& unit, const Label& label) const {
  std::int64_t most = 0;
  for (std::size_t memory_class = 0; memory_class < classes_.count(); ++memory_class) {
    const auto micro = static_cast<std::size_t>(classes_.first_micro[memory_class]);
    most = std::max(most, label.most_live(memory_class) + least_span_[unit.first_block][micro]);
  }
  return fragments.constant_bytes() + label.persistent_bytes + least_persistent_[unit.first_block] + most;
}

}  // namespace shardplan::wrap_internal
