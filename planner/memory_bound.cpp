// The closed-form memory bound: each transient term of the lowered step at its largest, from unit_layout.h's sizes.
#include "memory_bound.h"

#include <algorithm>
#include <array>
#include <functional>
#include <vector>

#include "unit_layout.h"

namespace shardplan {

// Note [Closed-form bound]: memory_upper_bound charges, term by term, the most the lowering (lowering.cpp) can hold
// of each memory category at any instant, whatever the timing; the sum bounds the simulated peak of every plan, and
// it needs no schedule, so searches can prune with it and capacity can take it as a first cut. M is the plan's
// micro-batches, G a unit's gathered (or cast) copy, H its shard copied in from the host (offload).
//  - Model states and overhead: persistent_memory, what the schedule starts the step with. The lowering allocates
//    nothing else in those categories, so these terms equal the simulated peak's.
//  - Activations, exactly: compute ops run one at a time in issue order, a layer's forward allocates what it keeps
//    (and a workspace freed at its end), its backward frees that and its recompute working set and workspace. At
//    layer l's forward or backward the layers before it and l itself are alive, with l's forward workspace or its
//    recompute and backward workspace: max over l of (Σ_{l' <= l} kept(l') + max(fw(l), recomputed(l) + bw(l)))
//    (unit_layout.h's functions, which the lowering calls; Note [Workspaces]).
//  - Root unit: its G. A unit is gathered again only after its free, and a gather waits for the compute op issued
//    before it (lowering_gathers.cpp, emit_gather), so one copy of a unit at a time.
//  - Unsharded params: (a) every non-root unit kept gathered after forward (reshard_after_forward false) — all are
//    gathered when backward starts; (b) every partial copy (reshard_after_forward = k), alive from the unit's forward
//    free to the end of its backward all-gather, all of them at backward's start; (c) the copies in flight. Two copies
//    alive at one instant were both issued and not yet freed at some common point of the issue order (a gather issued
//    after a free starts after it ends), so the copies alive at once are open at one point of the order (intervals on
//    a line that meet pairwise share a point). At the start of a unit of a pass that open set is the unit and the
//    prefetch targets named by it or by units before it that have not started — we charge its largest sum over the
//    units of both passes. With FSDP1's rate limiter (max_inflight_all_gathers = L > 0; the lowering's counted gathers
//    are those of units resharded after forward) the all-gather stream starts gathers in issue order and gather n
//    waits for the free of gather n - L, so at most L counted copies are alive: we charge the L largest of the set.
//    That holds only while no gather is forced past the limiter (ensure_gathered), i.e. when prefetches request units
//    in the order the pass starts them and the root stays gathered (a resharded root holds a limiter slot all pass).
//  - Comm buffers: (a) the shard cast to the compute dtype that feeds an all-gather (FSDP1 MixedPrecision's
//    `_mp_shard`) lives while its gather runs, and the all-gather stream runs one at a time: the largest cast. (b) With
//    offload, the shard copied in from the host lives from its copy's start to its gather's end; its copy waits for
//    what its gather waits for, so the same open sets hold them, limited the same way except the kept units' forward
//    gathers, which the limiter does not count. (c) Reduce-scatter outputs: one holds its output until the next one
//    starts (Note [Reduction buffers] in schedule.h), so one at a time; HSDP's all-reduce holds it until the next
//    all-reduce starts, and with offload the copy to the host frees it. Those streams may fall behind backward without
//    limit, so for them we charge every unit's output.
//  - Unsharded grads, where the bound is loose: every unit's full-size gradient. A reduction releases it when the next
//    reduction on its stream starts, and backward never waits for earlier reductions (only a unit's next gradient,
//    a micro-batch later, waits for the unit's own last reduction, by which time that gradient was released), so a
//    slow reduce-scatter stream can leave every unit's gradient alive at once. FSDP2 holds at most two (its
//    post_backward makes the compute stream wait for the previous reduce-scatter); the lowering does not.
//  - A prefetch naming a unit that is not later in its pass gathers that unit again after it ran; in backward that
//    copy is never freed (the next micro-batch's forward starts with every unit marked not gathered), so such plans
//    are charged M copies of every unit's G and H.
namespace {

// The units a pass starts, in the order it starts them, and each unit's place in that order (-1: it owns no layer).
struct PassOrder {
  std::vector<int> units;
  std::vector<int> position;
};

// Forward starts a unit at its first layer, backward at its last (the lowering walks the layers down); layers no other
// unit covers belong to the root (lowering.cpp, owner_of).
PassOrder pass_order(const Plan& plan, const ModelSpec& model, bool backward) {
  std::vector<int> owner(model.layers.size(), 0);
  for (std::size_t unit = 1; unit < plan.units.size(); ++unit) {
    for (std::size_t layer = plan.units[unit].layers.begin; layer < plan.units[unit].layers.end; ++layer) {
      owner[layer] = static_cast<int>(unit);
    }
  }
  PassOrder order;
  order.position.assign(plan.units.size(), -1);
  for (std::size_t step = 0; step < model.layers.size(); ++step) {
    const int unit = owner[backward ? model.layers.size() - 1 - step : step];
    if (order.position[static_cast<std::size_t>(unit)] < 0) {
      order.position[static_cast<std::size_t>(unit)] = static_cast<int>(order.units.size());
      order.units.push_back(unit);
    }
  }
  return order;
}

const std::vector<int>& prefetch_list(const Plan& plan, int unit, bool backward) {
  const PlanUnit& spec = plan.units[static_cast<std::size_t>(unit)];
  return backward ? spec.backward_prefetch : spec.forward_prefetch;
}

// Whether every gathering prefetch target comes later in its pass than the unit naming it.
bool prefetches_forward_only(const Plan& plan, const std::vector<UnitLayout>& layouts, const PassOrder& order,
                             bool backward) {
  for (const int unit : order.units) {
    for (const int target : prefetch_list(plan, unit, backward)) {
      const auto at = [&](int id) { return order.position[static_cast<std::size_t>(id)]; };
      if (layouts[static_cast<std::size_t>(target)].gathers && at(target) <= at(unit)) return false;
    }
  }
  return true;
}

// Whether the pass requests the gathers the limiter counts (`counted`) in the order it starts their units: its first
// request of each, by the unit starting or by a prefetch, comes in increasing pass position.
bool requests_in_pass_order(const Plan& plan, const PassOrder& order, bool backward,
                            const std::function<bool(int)>& counted) {
  std::vector<bool> seen(plan.units.size(), false);
  int last = -1;
  const auto request = [&](int unit) {
    if (!counted(unit) || seen[static_cast<std::size_t>(unit)]) return true;
    seen[static_cast<std::size_t>(unit)] = true;
    const int position = order.position[static_cast<std::size_t>(unit)];
    if (position <= last) return false;
    last = position;
    return true;
  };
  for (const int unit : order.units) {
    if (!request(unit)) return false;
    for (const int target : prefetch_list(plan, unit, backward)) {
      if (!request(target)) return false;
    }
  }
  return true;
}

// The sum of the `limit` largest values (all of them when limit is 0).
std::int64_t largest_sum(std::vector<std::int64_t> values, int limit) {
  if (limit > 0 && values.size() > static_cast<std::size_t>(limit)) {
    std::nth_element(values.begin(), values.begin() + (limit - 1), values.end(), std::greater<>());
    values.resize(static_cast<std::size_t>(limit));
  }
  std::int64_t total = 0;
  for (const std::int64_t value : values) total += value;
  return total;
}

struct InFlight {
  std::int64_t copies_bytes = 0;       // non-root gathered or cast copies, kept units aside
  std::int64_t host_copies_bytes = 0;  // offloaded shards copied in for their all-gathers
};

struct UnitTraits {
  std::vector<bool> kept;                      // not resharded after forward: gathered from forward into backward
  std::vector<std::int64_t> host_copy_bytes;   // H: the offloaded shard an all-gather copies in (0 without offload)
};

// The largest open set of a pass (Note [Closed-form bound], unsharded params (c)); `limit` > 0 applies the limiter.
InFlight pass_in_flight(const Plan& plan, const std::vector<UnitLayout>& layouts, const UnitTraits& traits,
                        const PassOrder& order, bool backward, int limit) {
  InFlight peak;
  std::vector<bool> requested(plan.units.size(), false);
  for (std::size_t index = 0; index < order.units.size(); ++index) {
    const int current = order.units[index];
    for (const int target : prefetch_list(plan, current, backward)) requested[static_cast<std::size_t>(target)] = true;
    std::vector<std::int64_t> counted_copies, counted_host_copies;
    InFlight open;
    for (std::size_t unit = 0; unit < plan.units.size(); ++unit) {
      const bool is_current = static_cast<int>(unit) == current;
      if (!is_current && !(requested[unit] && order.position[unit] > static_cast<int>(index))) continue;
      const UnitLayout& layout = layouts[unit];
      const std::int64_t copy = unit == 0 || traits.kept[unit] ? 0 : layout.gathered_bytes;
      if (is_current && layout.casts_replicated) open.copies_bytes += copy;
      // Kept units are gathered once, in forward, outside the limiter; in backward they are still gathered.
      if (!layout.gathers || (backward && traits.kept[unit])) continue;
      if (traits.kept[unit]) {
        open.host_copies_bytes += traits.host_copy_bytes[unit];
      } else {
        counted_copies.push_back(copy);
        counted_host_copies.push_back(traits.host_copy_bytes[unit]);
      }
    }
    open.copies_bytes += largest_sum(std::move(counted_copies), limit);
    open.host_copies_bytes += largest_sum(std::move(counted_host_copies), limit);
    peak.copies_bytes = std::max(peak.copies_bytes, open.copies_bytes);
    peak.host_copies_bytes = std::max(peak.host_copies_bytes, open.host_copies_bytes);
  }
  return peak;
}

// Activations, exactly (Note [Closed-form bound]): the largest of the kept bytes up to a layer plus its workspace or
// its recompute.
std::int64_t activation_peak_bytes(const Plan& plan, const ModelSpec& model) {
  std::int64_t kept_so_far = 0, peak = 0;
  for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
    kept_so_far += kept_activation_bytes(model, plan.training, layer, layer_checkpointing_of(plan, model, layer));
    // Its forward's workspace beside what it and the layers before keep, or its backward's recompute and workspace
    // (Note [Workspaces] in unit_layout.h).
    peak = std::max(peak, kept_so_far + std::max(forward_workspace_bytes(plan, model, layer),
                                                 recomputed_activation_bytes(plan, model, layer) +
                                                     backward_workspace_bytes(plan, model, layer)));
  }
  return peak;
}

}  // namespace

MemoryBreakdown memory_upper_bound(const Plan& plan, const ModelSpec& model, int world_size, int gpus_per_node,
                                   std::int64_t context_overhead_bytes) {
  validate_plan(plan, model, world_size, gpus_per_node);
  const std::vector<UnitLayout> layouts = unit_layouts(plan, model, world_size, gpus_per_node);
  const auto& precision = plan.training.precision;
  MemoryByCategory bytes = persistent_memory(layouts, plan, context_overhead_bytes);
  const auto add = [&](MemoryCategory category, std::int64_t amount) {
    bytes[static_cast<std::size_t>(category)] += amount;
  };

  UnitTraits traits;
  std::int64_t padding_elements = 0, every_copy = 0, every_host_copy = 0, kept_copies = 0, partial_copies = 0;
  std::int64_t largest_cast = 0;
  std::int64_t grads = 0, held_output = 0, lagging_outputs = 0;
  for (std::size_t unit = 0; unit < layouts.size(); ++unit) {
    const UnitLayout& layout = layouts[unit];
    const bool kept = !plan.units[unit].reshard_after_forward.enabled;
    traits.kept.push_back(kept);
    // emit_gather: the host-to-device copy of an offloaded shard, and the shard's cast to the compute dtype.
    const std::int64_t host_copy = layout.gathers && plan.offload.params ? layout.shard_bytes : 0;
    traits.host_copy_bytes.push_back(host_copy);
    every_host_copy += host_copy;
    if (layout.gathers) largest_cast = std::max(largest_cast, layout.cast_shard_bytes);
    padding_elements += layout.padded_elements - layout.param_count;
    partial_copies += layout.partial_copy_bytes;
    const std::int64_t copy = layout.gathers || layout.casts_replicated ? layout.gathered_bytes : 0;
    if (unit > 0) every_copy += copy;
    if (unit > 0 && kept) kept_copies += copy;
    if (layout.grad_copies) grads += layout.grad_copy_bytes;
    if (layout.grad_elements > 0 && layout.grad_group > 1) {
      // Lowerer::reduce: the reduce-scatter's output shard in the reduction dtype.
      const std::int64_t output = layout.grad_shard_elements * precision.reduce_bytes;
      if (plan.offload.params || layout.replicas > 1) {
        lagging_outputs += output;
      } else {
        held_output = std::max(held_output, output);
      }
    }
  }
  const std::int64_t root_copy = layouts[0].gathers || layouts[0].casts_replicated ? layouts[0].gathered_bytes : 0;

  // The limiter bounds the counted gathers only when none is forced past it (Note [Closed-form bound]).
  const std::array<PassOrder, 2> orders = {pass_order(plan, model, false), pass_order(plan, model, true)};
  const auto counted = [&](int unit) {
    return layouts[static_cast<std::size_t>(unit)].gathers && !traits.kept[static_cast<std::size_t>(unit)];
  };
  bool forward_only = true;
  bool limited = plan.max_inflight_all_gathers > 0 && !counted(0);
  for (const bool backward : {false, true}) {
    const PassOrder& order = orders[backward ? 1 : 0];
    forward_only = forward_only && prefetches_forward_only(plan, layouts, order, backward);
    limited = limited && requests_in_pass_order(plan, order, backward, counted);
  }
  InFlight in_flight;
  for (const bool backward : {false, true}) {
    const InFlight pass = pass_in_flight(plan, layouts, traits, orders[backward ? 1 : 0], backward,
                                         limited ? plan.max_inflight_all_gathers : 0);
    in_flight.copies_bytes = std::max(in_flight.copies_bytes, pass.copies_bytes);
    in_flight.host_copies_bytes = std::max(in_flight.host_copies_bytes, pass.host_copies_bytes);
  }

  const std::int64_t micro_batches = plan.grad_accumulation_steps;
  if (forward_only) {
    add(MemoryCategory::root_unit, root_copy);
    add(MemoryCategory::unsharded_params, kept_copies + partial_copies + in_flight.copies_bytes);
    add(MemoryCategory::comm_buffers, in_flight.host_copies_bytes);
  } else {
    add(MemoryCategory::root_unit, micro_batches * root_copy);
    add(MemoryCategory::unsharded_params, micro_batches * every_copy + partial_copies);
    add(MemoryCategory::comm_buffers, micro_batches * every_host_copy);
  }
  add(MemoryCategory::comm_buffers, largest_cast + held_output + lagging_outputs);
  add(MemoryCategory::unsharded_grads, grads);
  add(MemoryCategory::activations, activation_peak_bytes(plan, model));
  return breakdown_from_categories(bytes, padding_elements);
}

}  // namespace shardplan
