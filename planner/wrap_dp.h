// Wrap-boundary search: the fastest partition of the transformer blocks into contiguous units for one setting of
// every other knob (a DP over the simulator's step recurrences, Note [Wrap DP]), and the fastest one that fits a
// memory cap (Note [Wrap search]).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "hardware_profile.h"
#include "model_spec.h"
#include "plan.h"

namespace shardplan {

// Note [Wrap DP]:
// With one-ahead prefetch and one micro-batch, the simulator's step obeys recurrences over consecutive units.
// Forward: s(k+1) = s(k) + max(E_f(k | G(k+1)), G(k+1)) + o·[k+1 prefetches]: unit k+1's all-gather, issued after
// unit k's wait, starts with unit k's compute and unit k's ops run E_f, each op stretched by the overlap slowdown for
// the part of its base interval that overlaps a busy communication stream, plus the per-op dispatch overhead; o is
// the host's collective issue overhead (0 in the catalog), paid where the schedule issues a collective. Backward,
// going down from the end of unit k's wait, with D'(k) seconds of gradient reductions still queued (unit k+1's and
// any behind which it waits): the host issues unit k−1's all-gather (o when it has one, P = o·[G(k−1) > 0]), then
// unit k's ops start with that gather and with D(k) = max(0, D'(k) − P) queued. Both windows start where the ops
// start, and the simulator stretches by the busiest stream, so the ops run E_b = E(k | max(G(k−1), D(k))); the host
// issues unit k's reduction when they end (o more: I = E_b + o), s(k−1) = s(k) + P + max(I, G(k−1)), and the
// reduction leaves D'(k−1) = max(0, max(I, D(k)) + R(k) − max(I, G(k−1))) queued at the unit below's wait. (Issuing a
// prefetch after the wait, as FSDP does, is what keeps P outside the max: it depends on the unit below only through
// its gather, which the DP's transition knows.)
// The tail (first unit, embedding, root reduction, optimizer) closes with D(1); head and turn terms involve only the
// first and last unit. This is the simulator's timing exactly, whether reductions queue or not (test_wrap_dp.cpp
// compares every partition of several models).
// Accumulation with no_sync: the earlier micro-batches reduce nothing, so every stream is idle when one ends and the
// next starts from the root's all-gather; the step is M forward passes, M − 1 backward passes without reductions
// (each unit's from its wait: P + max(E_b(k | G(k−1)), G(k−1))) and the last one as above: per-unit terms again,
// exact. Micro-batches that all reduce do strictly more (reductions, and the next micro-batch's backward waits for
// them): the same terms are a lower bound (the simulator never shortens when ops or dependencies are added, for a
// slowdown ≤ 2, by the argument below).
// HSDP: each reduce-scatter is followed by an all-reduce across replicas on a second stream, issued right after it
// (o more). The labels carry that stream's end A as a second backlog: unit k's all-reduce starts at
// max(its reduce-scatter's end, its issue, A) — exact — but the compute stretch it causes is left out (the
// simulator stretches by the busiest stream; the model sees the gather and reduce-scatter streams only), so the model
// is a lower bound there, 98-99% of the simulated time in the tests. An A no later than D + the least reduce-scatter
// cannot delay the next all-reduce and is stored as 0, so such labels merge.
// CPU offload adds host copies before each all-gather and after each reduction, which the model leaves out: a lower
// bound again (86-94% of the simulated time in the tests).
// Where the model is a lower bound the searches are still exact, by branch and bound on the simulator (Note [Wrap
// search]); and every plan the plan search returns is re-simulated, so reported numbers are always the simulator's.
// The DP runs from the last unit down: a state is (first block of the leftmost placed unit, its length) with a set
// of labels (cost so far, backlog D). A label with no more cost and no more backlog than another is dropped: the rest
// of the step is nondecreasing in D when the slowdown s ≤ 2 (an op's end moves by at most 1·δ and by at least
// (2 − s)·δ ≥ 0 when its start or the window end moves by δ, so longer windows never shorten anything; D(k−1)
// grows with D(k) for the same reason), and in A always (it delays only all-reduces and the optimizer behind
// them). Above 2 only equal backlogs merge. Labels are also dropped by bound: a lower
// bound of the rest (the same terms with the backlog reset to 0, and separately the reduction stream's remaining
// work) added to the cost exceeds the exact time of a known partition. Both prunings keep the minimum exact.
struct WrapDpOptions {
  int max_unit_blocks = 8;  // units span at most this many blocks (bounds the state; the memory bound uses it too)
};

struct WrapDpResult {
  std::vector<LayerRange> units;  // non-root units, in layer order
  double modelled_step_s = 0;     // the DP's objective for them
  bool found = false;
};

// `plan_template` gives every knob but the units (its units and checkpointing are read for the root and per layer).
WrapDpResult best_wrapping(const ModelSpec& model, const Plan& plan_template, const HardwareProfile& profile,
                           int world_size, int gpus_per_node, const WrapDpOptions& options);

// The DP's objective for a given partition (tests compare it with the simulator and with the DP's minimum).
// `kept_gathered` (empty: as the template says): per unit, reshard_after_forward = false.
double modelled_step_time_s(const ModelSpec& model, const Plan& plan_template, const HardwareProfile& profile,
                            int world_size, int gpus_per_node, const std::vector<LayerRange>& units,
                            const std::vector<bool>& kept_gathered = {});

// Note [Wrap search]: the fastest wrapping that fits a memory cap. The simulated peak is not a sum of local terms
// (it depends on how long buffers wait for collectives), so the cap is checked by the simulator itself: wrappings
// come out of a best-first search in nondecreasing modelled step time (partial wrappings from the right end keyed by
// cost + the DP's lower bound of the rest; complete ones by their exact time), and each is checked until one fits.
// Where the step model is exact (wrap_model_is_exact), the first that fits is the fastest fitting wrapping among
// all with units of at most `max_unit_blocks` blocks. What keeps the search short under a tight cap is a sound floor
// of the simulated peak, checked on every partial wrapping: the constant part (root, overhead), the least shards the
// unplaced blocks can hold, the placed units' shards, and the largest transient seen — in a unit's last forward op
// (activations so far + it + the next unit gathered), at the turn (every activation + the root's gradient + the last
// unit when kept gathered) and in a unit's first backward op (activations so far + it + the unit below gathered + its
// gradient + the reduce-scatter input the unit above still holds, Note [Reduction buffers]; in the best-first search,
// which knows the units above and the reduction backlog, also the inputs of reduce-scatters still queued when the
// unit's ops end). Every term is allocated at that moment in the lowering, so a wrapping whose floor exceeds the cap
// cannot fit. (The turn and held terms took the search's give-ups in the tests from 2 of 50 to none, and the plan
// search's fallbacks in test_search.cpp from 6 knob settings to none.) With no_sync accumulation every unit's
// full-size gradient lives from its first backward to its reduction in the last micro-batch: the forward and turn
// terms hold all of them, a unit's backward term those of the units below it and the root's.
// Where the model is only a lower bound of the simulated time (WrapCheck below), the search goes on past the first
// wrapping that fits, keeping the fastest simulated one, until the next key is no faster: branch and bound, exact
// for the same reason.
// Where the step model is only a lower bound of the simulated time (HSDP, micro-batches that all reduce:
// wrap_model_is_lower_bound), the same search is exact by branch and bound: it keeps the fastest simulated wrapping
// that fits and stops when the next key is no faster, since every wrapping not yet simulated is modelled, so
// simulated, at least that slow.
struct WrapCheck {
  bool fits = false;
  double step_s = 0;  // simulated
  std::int64_t peak_bytes = 0;
};
struct WrapSearchOptions {
  int max_unit_blocks = 8;
  std::int64_t memory_cap_bytes = 0;
  // The simulator's verdict on a wrapping: its units and, per unit, whether it stays gathered after forward.
  std::function<WrapCheck(const std::vector<LayerRange>&, const std::vector<bool>&)> check;
  // The step model is the simulator's time (wrap_model_is_exact); otherwise a lower bound of it.
  bool model_is_exact = true;
  // Each unit chooses reshard_after_forward (FSDP2's per-module setting): keeping a unit gathered from forward to
  // backward saves its backward all-gather and costs its parameters' memory over that time.
  bool per_unit_reshard = true;
  std::size_t max_checks = 48;  // give up after this many wrappings fail `check` (are checked, with a lower bound)
  // The memory floor counts the neighbouring unit a one-ahead prefetch holds gathered; false for a search whose
  // `check` also tries other prefetch depths (none ahead holds no neighbour).
  bool floor_holds_neighbours = true;
  double stop_above_s = std::numeric_limits<double>::infinity();  // an incumbent: nothing slower is wanted
};

struct WrapSearchResult {
  std::vector<LayerRange> units;  // non-root units, in layer order
  std::vector<bool> kept_gathered;  // per unit: reshard_after_forward = false
  double modelled_step_s = 0;
  double simulated_step_s = 0;  // the simulator's time of the answer
  bool found = false;
  bool exhausted = false;   // no wrapping fits (or none is faster than stop_above_s)
  bool gave_up = false;     // max_checks wrappings failed `check`, or the search outgrew its node budget: fall back
  bool per_unit_reshard = false;        // which last units stay gathered was searched too
  bool reshard_choice_dropped = false;  // it was asked for, but its labels grew too many: partitions only
  std::size_t checked = 0;  // wrappings given to `fits`
  std::size_t pruned_by_memory = 0;
};

WrapSearchResult fastest_fitting_wrapping(const ModelSpec& model, const Plan& plan_template,
                                          const HardwareProfile& profile, int world_size, int gpus_per_node,
                                          const WrapSearchOptions& options);

// Note [Least peak]: `--objective memory` wants the least simulated peak, then the fastest plan at it. The least
// peak comes from a branch and bound on the memory floor (Note [Wrap search]): partial wrappings from the right,
// keyed by a floor of every completion — the constant part, the placed units' shards, the least shards the unplaced
// blocks can hold and the largest transient term so far — each complete wrapping simulated, until no key is below
// the least peak found (with the last units kept gathered too, when options.per_unit_reshard: keeping a unit gathered
// adds memory, but the simulated peak also depends on timing, and a kept unit's earlier backward can free buffers
// sooner — measured in test_search.cpp). The fastest wrapping at that peak is then fastest_fitting_wrapping with the
// peak as the cap, so the pair is exact for (peak, then time).
struct LeastPeakResult {
  std::vector<LayerRange> units;
  std::int64_t peak_bytes = 0;
  bool found = false;    // false also when no wrapping can be at or below `stop_above_bytes`
  bool gave_up = false;  // max_checks simulations or the node budget ran out
  std::size_t checked = 0;
};
LeastPeakResult least_peak_wrapping(const ModelSpec& model, const Plan& plan_template, const HardwareProfile& profile,
                                    int world_size, int gpus_per_node, const WrapSearchOptions& options,
                                    std::int64_t stop_above_bytes = std::numeric_limits<std::int64_t>::max());

// The memory floor of Note [Wrap search] for a complete wrapping: never above its simulated peak (tests check it).
// `neighbours_gathered` = false: the floor for any prefetch depth (WrapSearchOptions::floor_holds_neighbours).
std::int64_t memory_floor_bytes(const ModelSpec& model, const Plan& plan_template, const HardwareProfile& profile,
                                int world_size, int gpus_per_node, const std::vector<LayerRange>& units,
                                const std::vector<bool>& kept_gathered = {}, bool neighbours_gathered = true);

// Whether the step model (Note [Wrap DP]) is the simulator's timing for plans built from this template: no offload,
// no HSDP replicas, gradient accumulation only with no_sync, the template's one-ahead prefetch lists, and a profile
// whose collectives do not slow down beside compute (its dispatch and collective issue overheads are in the model;
// a collective slowdown, Note [Collective slowdown] in simulator.cpp, is not: it only lengthens collectives, so the
// model stays a lower bound).
bool wrap_model_is_exact(const Plan& plan_template, int world_size, int gpus_per_node, const HardwareProfile& profile);
// Whether it is a lower bound of the simulator's step time for every wrapping (Note [Wrap DP]): everything but
// partially resharded units (CPU offload included: its host copies, left out, only add work).
bool wrap_model_is_lower_bound(const Plan& plan_template);

// A plan with these units and the template's knobs: default one-ahead prefetch lists, root kept gathered.
// `kept_gathered` (empty: as the template says): per unit, true sets reshard_after_forward = false.
Plan plan_with_units(const ModelSpec& model, const Plan& plan_template, const std::vector<LayerRange>& units,
                     const std::vector<bool>& kept_gathered = {});

}  // namespace shardplan
