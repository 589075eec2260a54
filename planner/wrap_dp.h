// Wrap-boundary dynamic programme: the fastest partition of the transformer blocks into contiguous units for one
// setting of every other knob, under the step-time recurrences of the default (one-ahead prefetch) schedule.
#pragma once

#include <cstdint>
#include <vector>

#include "hardware_profile.h"
#include "model_spec.h"
#include "plan.h"

namespace shardplan {

// Note [Wrap DP]:
// With one-ahead prefetch, the simulator's forward obeys s(k+1) = s(k) + max(E_f(k | G(k+1)), G(k+1)): unit k+1's
// all-gather starts with unit k's compute (its issue point), and unit k's ops run E_f, stretched by the overlap
// slowdown for the part of each op that overlaps that all-gather. Backward mirrors it going down, where unit k's ops
// also overlap unit k+1's reduce-scatter: s(k−1) = s(k) + max(E_b(k | G(k−1), R(k+1)), G(k−1)). So the step time is
// a sum of terms over windows of three consecutive units (plus root and tail terms that involve only the first and
// last unit), and a DP whose state is (blocks placed, length of the last unit, length of the one before) finds the
// exact minimum of that sum. The recurrences assume the reduce-scatter stream keeps up (each R(k+1) ≤ the backward
// increment after it); the search re-simulates every plan it returns, so the reported numbers are the simulator's.
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
double modelled_step_time_s(const ModelSpec& model, const Plan& plan_template, const HardwareProfile& profile,
                            int world_size, int gpus_per_node, const std::vector<LayerRange>& units);

// A plan with these units and the template's knobs: default one-ahead prefetch lists, root kept gathered.
Plan plan_with_units(const ModelSpec& model, const Plan& plan_template, const std::vector<LayerRange>& units);

}  // namespace shardplan
