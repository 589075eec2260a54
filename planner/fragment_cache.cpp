// FragmentCache: windows of the plan template lowered, split at their fragment marks, placed once from the idle
// state, with the bytes each unit holds.
#include "fragment_cache.h"

#include <algorithm>

#include "errors.h"
#include "lowering.h"
#include "op_durations.h"
#include "unit_layout.h"

namespace shardplan {

namespace {

// Fragment `at` of a pass placed from the idle state — or, where it equals the micro-batch's before it (the middle
// micro-batches of a step with gradient accumulation), that one's placement: equal fragments place alike from equal
// states (Fragment::operator==), and the comparison costs a fraction of a placement.
FragmentTiming placed_from_idle(FragmentPlacer& placer, const std::vector<Fragment>& fragments,
                                const std::vector<FragmentTiming>& timings, std::size_t at) {
  if (at > 0 && fragments[at] == fragments[at - 1]) return timings[at - 1];
  return placer.place(fragments[at], BoundaryState{});
}

std::int64_t total_bytes(const MemoryByCategory& bytes) {
  std::int64_t total = 0;
  for (auto value : bytes) total += value;
  return total;
}

// A window layer with what the lowering reads of it: the whole layer copied, so a field added to LayerSpec reaches
// the windows without an edit here, less its name and with its parameters as one tensor (a layer's tensors matter
// only by their count, and fine-tuning's split of them by its LayerFinetune).
LayerSpec lean_layer(const LayerSpec& layer) {
  LayerSpec lean = layer;
  lean.name.clear();
  lean.tensors.clear();
  if (const std::int64_t params = layer.param_count(); params > 0) lean.tensors.push_back({"", {params}});
  return lean;
}

// Two blocks lower alike when their lean layers are equal: every field of LayerSpec keys the cache, so blocks of one
// model may differ in anything (Swin's stages, a vision tower beside a language model, a causal or not attention).
bool lowers_alike(const LayerSpec& a, const LayerSpec& b) { return lean_layer(a) == lean_layer(b); }

// Whether two templates lower alike but for their per-layer checkpointing (what a FragmentCache may serve).
bool same_knobs(const Plan& a, const Plan& b) {
  const auto same_unit = [](const PlanUnit& x, const PlanUnit& y) {
    return x.strategy.kind == y.strategy.kind && x.strategy.shard_group_size == y.strategy.shard_group_size &&
           x.reshard_after_forward.enabled == y.reshard_after_forward.enabled &&
           x.reshard_after_forward.group_size == y.reshard_after_forward.group_size;
  };
  const TrainingConfig& x = a.training;
  const TrainingConfig& y = b.training;
  return same_unit(a.units.at(0), b.units.at(0)) && same_unit(a.units.at(1), b.units.at(1)) &&
         a.grad_accumulation_steps == b.grad_accumulation_steps &&
         a.max_inflight_all_gathers == b.max_inflight_all_gathers && a.offload.params == b.offload.params &&
         a.offload.optimizer == b.offload.optimizer && x.seq_len == y.seq_len && x.micro_batch == y.micro_batch &&
         x.precision.name == y.precision.name && x.optimizer == y.optimizer &&
         x.flash_attention == y.flash_attention && x.attention_kernel == y.attention_kernel &&
         x.no_sync_accumulation == y.no_sync_accumulation && x.finetune == y.finetune &&
         x.expert_parallel_degree == y.expert_parallel_degree && x.torch_compile == y.torch_compile &&
         x.optimizer_in_backward == y.optimizer_in_backward;
}

}  // namespace

bool FragmentCache::serves(const Plan& plan_template, int world_size, int gpus_per_node) const {
  return world_size == world_size_ && gpus_per_node == gpus_per_node_ && same_knobs(template_, plan_template);
}

FragmentCache::FragmentCache(const ModelSpec& model, const Plan& plan_template, const HardwareProfile& profile,
                             int world_size, int gpus_per_node)
    : model_(model), template_(plan_template), profile_(profile), world_size_(world_size),
      gpus_per_node_(gpus_per_node) {
  // Only the root and the unit template matter to the windows (plan_with_units rebuilds every unit from them).
  SHARDPLAN_CHECK(template_.units.size() >= 2 && template_.units.front().is_root, "a template with a root and a unit");
  template_.units.resize(2);
  for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
    if (model.layers[layer].kind == LayerKind::transformer_block) blocks_.push_back(layer);
  }
  if (blocks_.empty()) throw InputError("plan search: the model has no transformer blocks to wrap");
  for (std::size_t i = 1; i < blocks_.size(); ++i) {
    if (blocks_[i] != blocks_[i - 1] + 1) throw InputError("plan search: transformer blocks must be consecutive");
  }
  for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
    if (layer < blocks_.front()) before_blocks_.push_back(layer);
    if (layer > blocks_.back()) after_blocks_.push_back(layer);
  }
  for (std::size_t b = 0; b < blocks_.size(); ++b) {
    int shape = static_cast<int>(b);
    for (std::size_t earlier = 0; earlier < b; ++earlier) {
      if (shape_class_[earlier] == static_cast<int>(earlier) &&
          lowers_alike(model.layers[blocks_[earlier]], model.layers[blocks_[b]])) {
        shape = static_cast<int>(earlier);
        break;
      }
    }
    shape_class_.push_back(shape);
  }
  const bool uniform = template_.training.finetune.fsdp.uniform_requires_grad();
  const auto trains = [&](std::size_t b) {
    const auto& finetune = model.layers[blocks_[b]].finetune;
    return !finetune || finetune->trainable_elements > 0;
  };
  for (std::size_t b = 0; b < blocks_.size(); ++b) {
    shareable_from_.push_back(b > 0 && (!uniform || trains(b) == trains(b - 1)) ? shareable_from_.back() : b);
  }
  micro_batches_ = std::max(1, template_.grad_accumulation_steps);
  const PlanUnit& unit = template_.units[1];
  const ShardingLayout layout = resolve_sharding(unit.strategy, world_size, gpus_per_node);
  keep_choice_ = layout.params_sharded() && unit.reshard_after_forward.enabled &&
                 !unit.reshard_after_forward.keeps_partial_copy();
  template_kept_ = !unit.reshard_after_forward.enabled;
  std::vector<std::size_t> root_layers = before_blocks_;
  root_layers.insert(root_layers.end(), after_blocks_.begin(), after_blocks_.end());
  const UnitLayout root = unit_layout(template_.units.front(), unit_params(model, root_layers), template_.training,
                                      world_size, gpus_per_node);
  constant_bytes_ = total_bytes(persistent_memory({root}, template_, profile.context_overhead_bytes));
  root_optimizer_elements_ = root.optimizer_shard_elements;
}

Window FragmentCache::lower_window(const std::vector<UnitChoice>& units, const std::vector<int>& signatures,
                                   unsigned excluded, int micro_batches) const {
  // The window model: the root's layers around the units' blocks, ties remapped to the window's layer indices.
  ModelSpec window;
  window.name = model_.name;
  window.hidden_size = model_.hidden_size;
  window.vocab_size = model_.vocab_size;
  window.num_heads = model_.num_heads;
  window.default_seq_len = model_.default_seq_len;
  window.finetune = model_.finetune;
  window.architecture = model_.architecture;  // a CP rank's ring reads its K/V heads (layer_ring_attention)
  std::vector<std::size_t> full_layers = before_blocks_;
  std::vector<ActivationCheckpointing> modes(before_blocks_.size(), ActivationCheckpointing::none);
  std::vector<LayerRange> ranges;
  for (const UnitChoice& unit : units) {
    SHARDPLAN_CHECK(unit.length > 0 && unit.first_block + unit.length <= blocks_.size(), "a unit outside the blocks");
    const std::size_t begin = full_layers.size();
    for (std::size_t b = unit.first_block; b < unit.first_block + unit.length; ++b) {
      full_layers.push_back(blocks_[b]);
      modes.push_back(static_cast<ActivationCheckpointing>(signatures[b] % kCheckpointingModes));
    }
    ranges.push_back({begin, full_layers.size()});
  }
  full_layers.insert(full_layers.end(), after_blocks_.begin(), after_blocks_.end());
  modes.resize(full_layers.size(), ActivationCheckpointing::none);
  window.layers.reserve(full_layers.size());
  for (std::size_t index = 0; index < full_layers.size(); ++index) {
    LayerSpec layer = lean_layer(model_.layers[full_layers[index]]);
    if (layer.tied_to_layer) {
      const auto found = std::find(full_layers.begin(), full_layers.end(), *layer.tied_to_layer);
      if (found == full_layers.end()) throw InputError("plan search: a layer is tied to a transformer block");
      layer.tied_to_layer = static_cast<std::size_t>(found - full_layers.begin());
    }
    window.layers.push_back(std::move(layer));
  }
  // The template's knobs on the window: its root, its unit template and the window's layers' checkpointing.
  Plan window_template = template_;
  window_template.layer_checkpointing = std::move(modes);
  // The modes are the whole model's, block by block (--ac-every k counted over all its blocks); the window's few
  // blocks must not be checked against k (validate_training: k at most the model's blocks).
  window_template.training.checkpoint_every_blocks = 1;
  window_template.grad_accumulation_steps = micro_batches;  // Note [Folded windows]
  // A window of dense blocks only (DeepSeek's first_k_dense_replace layers before its MoE ones): expert parallelism
  // changes nothing there (Note [Expert parallelism] in unit_layout.h: only routed experts are split, only MoE blocks
  // exchange tokens), while validate_plan refuses a degree above 1 for a model without experts; it lowers at 1.
  if (std::none_of(window.layers.begin(), window.layers.end(), [](const LayerSpec& layer) { return layer.moe.has_value(); })) {
    window_template.training.expert_parallel_degree = 1;
  }
  std::vector<bool> kept;
  for (const UnitChoice& unit : units) kept.push_back(unit.kept);
  const Plan plan = plan_with_units(window, window_template, ranges, kept);
  LoweringOptions options;
  options.world_size = world_size_;
  options.gpus_per_node = gpus_per_node_;
  options.flatten_memory_effects = false;  // fragments are placed from the ops (fragment.h), never walk_memory'd
  StepSchedule schedule = lower_plan(plan, window, options);
  OpDurations durations = op_durations(schedule, profile_);  // Note [Durations by shape]
  MemoryCertainty certainty(schedule, -1, excluded);
  return Window{std::move(schedule), std::move(durations), std::move(certainty), excluded};
}

// The edge fragments of `unit` from its window lowered with `micro_batches` micro-batches, one entry per micro-batch.
std::unique_ptr<EdgeFragments> FragmentCache::edge_from_window(const UnitChoice& unit, const std::vector<int>& signatures,
                                                               int micro_batches) const {
  const BoundaryState idle;
  const Window window = lower_window({unit}, signatures, 0, micro_batches);
  const MemoryCertainty unit_bytes(window.schedule, 1);
  auto edge = std::make_unique<EdgeFragments>();
  FragmentPlacer placer(profile_);
  for (int micro = 0; micro < micro_batches; ++micro) {
    const auto add = [&](std::vector<Fragment>& fragments, std::vector<FragmentTiming>& timings, FragmentPass pass,
                         int at_unit, int slot) {
      fragments.push_back(window.fragment(micro, pass, at_unit, slot));
      timings.push_back(placed_from_idle(placer, fragments, timings, fragments.size() - 1));
    };
    add(edge->start, edge->start_idle, FragmentPass::step, -1, -1);
    add(edge->head, edge->head_idle, FragmentPass::forward, 0, 1);  // its slot: the unit's gather
    add(edge->last_forward, edge->last_forward_idle, FragmentPass::forward, 1, -1);
    add(edge->turn, edge->turn_idle, FragmentPass::backward, 0, 1);
    add(edge->close, edge->close_idle, FragmentPass::backward, 1, -1);
    const auto gather_ops = [](const Fragment& fragment) {
      std::vector<FragmentOp> ops;
      for (int at : fragment.slot) ops.push_back(fragment.ops[static_cast<std::size_t>(at)]);
      return ops;
    };
    edge->forward_gather.push_back(gather_ops(edge->head.back()));
    edge->backward_gather.push_back(gather_ops(edge->turn.back()));
    edge->before.push_back(unit_bytes.before(window.begin(window.mark(micro, FragmentPass::step, -1))));
    edge->span.push_back(unit_bytes.before(window.begin(window.mark(micro, FragmentPass::backward, 0))));
    edge->after.push_back(unit_bytes.before(window.micro_end(micro)));
  }
  return edge;
}

const EdgeFragments& FragmentCache::edge(std::uint64_t key, unsigned relaxation_code,
                                         const TimingRelaxation& relaxation, const UnitChoice& unit,
                                         const std::vector<int>& signatures) {
  const std::uint64_t at_key = key << 3 | relaxation_code;
  if (const auto found = edges_.find(at_key); found != edges_.end()) return *found->second;
  const BoundaryState idle;
  // Another relaxation's edge has the same fragments: only their placements differ.
  if (relaxation_code != 0) {
    auto edge = std::make_unique<EdgeFragments>(this->edge(key, 0, {}, unit, signatures));
    FragmentPlacer placer(profile_, relaxation);
    const auto place = [&](const std::vector<Fragment>& fragments, std::vector<FragmentTiming>& timings) {
      for (std::size_t micro = 0; micro < fragments.size(); ++micro) {
        timings[micro] = placed_from_idle(placer, fragments, timings, micro);
      }
    };
    place(edge->start, edge->start_idle);
    place(edge->head, edge->head_idle);
    place(edge->last_forward, edge->last_forward_idle);
    place(edge->turn, edge->turn_idle);
    place(edge->close, edge->close_idle);
    return *edges_.emplace(at_key, std::move(edge)).first->second;
  }
  // Note [Folded windows]: the first, two middle and the last micro-batch, unfolded where the middle two agree.
  std::unique_ptr<EdgeFragments> edge = edge_from_window(unit, signatures, folded_micro_batches());
  if (edge->start.size() < static_cast<std::size_t>(micro_batches_)) {
    if (middles_alike(*edge)) {
      unfold(*edge, micro_batches_);
    } else {
      edge = edge_from_window(unit, signatures, micro_batches_);
    }
  }
  std::vector<std::size_t> unit_layers;
  for (std::size_t b = unit.first_block; b < unit.first_block + unit.length; ++b) unit_layers.push_back(blocks_[b]);
  PlanUnit spec = template_.units[1];
  if (unit.kept) spec.reshard_after_forward.enabled = false;
  const UnitLayout layout =
      unit_layout(spec, unit_params(model_, unit_layers), template_.training, world_size_, gpus_per_node_);
  edge->persistent_bytes = total_bytes(persistent_memory({layout}, template_, 0));
  edge->optimizer_elements = layout.optimizer_shard_elements;
  return *edges_.emplace(at_key, std::move(edge)).first->second;
}

const UnitFragments& FragmentCache::unit(std::uint64_t key, const UnitChoice& unit,
                                         const std::vector<int>& signatures) {
  if (const auto found = units_.find(key); found != units_.end()) return *found->second;
  const EdgeFragments& own = edge(key, 0, {}, unit, signatures);
  // Note [Folded windows]: the first, two middle and the last micro-batch, unfolded where the middle two agree.
  std::unique_ptr<UnitFragments> fragments = unit_from_windows(unit, signatures, own, folded_micro_batches());
  if (fragments->forward.size() < static_cast<std::size_t>(micro_batches_)) {
    if (middles_alike(*fragments)) {
      unfold(*fragments, micro_batches_);
    } else {
      fragments = unit_from_windows(unit, signatures, own, micro_batches_);
    }
  }
  return *units_.emplace(key, std::move(fragments)).first->second;
}

// The unit fragments of `unit` from its windows lowered with `micro_batches` micro-batches, one entry per micro-batch;
// `own`: its edge fragments (one entry per micro-batch of the step).
std::unique_ptr<UnitFragments> FragmentCache::unit_from_windows(const UnitChoice& unit,
                                                                const std::vector<int>& signatures,
                                                                const EdgeFragments& own, int micro_batches) const {
  auto fragments = std::make_unique<UnitFragments>();
  // Units of the same blocks share the entry wherever they stand, so both neighbours are lowered even where one
  // cannot exist (the last unit's forward is edge's): any block serves as the one-block neighbour, whose own ops and
  // bytes the slot and the certainty leave out.
  const std::size_t after = unit.first_block + unit.length < blocks_.size() ? unit.first_block + unit.length : 0;
  const std::size_t before = unit.first_block > 0 ? unit.first_block - 1 : blocks_.size() - 1;
  // One window lowers both: a one-block unit below, the unit, a one-block unit after it. The unit's forward issues
  // the gather of the unit after it, and its backward the gather of the unit below (its slot each time); the unit
  // below reshards or, for a kept unit, is kept too (Note [Wrap search]: kept units form a suffix) — a second window.
  for (bool below_kept : {false, true}) {
    // A unit below a resharded one reshards (the suffix rule); with no choice every unit is as the template says.
    if (below_kept ? !unit.kept : unit.kept && !keep_choice_) continue;
    const bool with_forward = fragments->forward.empty();
    // Both neighbours' buffers are accounted outside: the one below by its span, the one after by its `before` or,
    // in the unit's backward, by what its reduction holds and keeps (Note [Wrap fragments]).
    const Window window =
        lower_window({{before, 1, below_kept}, unit, {after, 1, false}}, signatures, 0b1010u, micro_batches);
    auto& target = below_kept ? fragments->backward_below_kept : fragments->backward;
    const MemoryCertainty unit_bytes(window.schedule, 2);
    for (int micro = 0; micro < micro_batches; ++micro) {
      if (with_forward) fragments->forward.push_back(window.fragment(micro, FragmentPass::forward, 2, 3));
      target.push_back(window.fragment(micro, FragmentPass::backward, 2, 1));
      if (fragments->held_at_end.size() > static_cast<std::size_t>(micro)) continue;  // from the first variant
      // What its reductions still hold once the unit below starts its backward, beyond what it keeps after them
      // (`own` has the step's micro-batches: a folded window's last is the step's last).
      const std::int64_t at_below = unit_bytes.before(window.begin(window.mark(micro, FragmentPass::backward, 1)));
      const std::size_t step_micro =
          micro + 1 == micro_batches ? own.after.size() - 1 : static_cast<std::size_t>(micro);
      fragments->held_at_end.push_back(std::max<std::int64_t>(0, at_below - own.after[step_micro]));
    }
  }
  return fragments;
}

const PairFragments& FragmentCache::pair(std::uint64_t left_key, std::uint64_t right_key, unsigned relaxation_code,
                                         const TimingRelaxation& relaxation, const EdgeFragments& below,
                                         const EdgeFragments& above, const UnitFragments& left_unit,
                                         const UnitFragments& right_unit, bool left_kept) {
  const std::uint64_t key = pair_key(left_key, right_key, relaxation_code);
  if (const auto found = pairs_.find(key); found != pairs_.end()) return *found->second;
  auto pair = std::make_unique<PairFragments>();
  FragmentPlacer placer(profile_, relaxation);
  const BoundaryState idle;
  const auto micros = static_cast<std::size_t>(micro_batches_);
  SHARDPLAN_CHECK(left_unit.forward.size() == micros &&
                      (left_kept ? right_unit.backward_below_kept : right_unit.backward).size() == micros &&
                      right_unit.held_at_end.size() == micros,
                  "a pair's units have their fragments");
  const auto& right_backward = left_kept ? right_unit.backward_below_kept : right_unit.backward;
  // Whether micro-batch `at` places exactly as the one before it: the same fragments with the same inputs (the
  // middle micro-batches of a step with gradient accumulation), so its idle placements are that one's.
  const auto places_as_previous = [&](std::size_t at) {
    return at > 0 && left_unit.forward[at] == left_unit.forward[at - 1] &&
           above.forward_gather[at] == above.forward_gather[at - 1] && above.before[at] == above.before[at - 1] &&
           right_backward[at] == right_backward[at - 1] && below.span[at] == below.span[at - 1] &&
           (left_kept || below.backward_gather[at] == below.backward_gather[at - 1]);
  };
  for (std::size_t at = 0; at < micros; ++at) {
    PairFragments::Micro each;
    // left's forward issues right's gather; right was not yet in its forward: it holds its `before`.
    FragmentInputs forward{&above.forward_gather[at], above.before[at]};
    const Fragment& forward_left = left_unit.forward[at];
    // right's backward issues left's backward gather (none when left stays gathered); left holds its span.
    const Fragment& backward_right = right_backward[at];
    each.backward_inputs = {left_kept ? nullptr : &below.backward_gather[at], below.span[at]};
    if (places_as_previous(at)) {
      each.forward_left_idle = pair->micro[at - 1].forward_left_idle;
      each.backward_right_idle = pair->micro[at - 1].backward_right_idle;
    } else {
      each.forward_left_idle = placer.place(forward_left, idle, forward);
      each.backward_right_idle = placer.place(backward_right, idle, each.backward_inputs);
    }
    each.forward_left_certain = forward_left.certain_peak_bytes + above.before[at];
    each.backward_right_certain = backward_right.certain_peak_bytes + below.span[at];
    each.backward_fragment = &backward_right;
    each.right_held = right_unit.held_at_end[at];
    pair->idle_durations_s.push_back(each.forward_left_idle.duration_s);
    pair->idle_exact = pair->idle_exact && each.forward_left_idle.exact && each.forward_left_idle.end.idle();
    if (at + 1 < micros) {
      pair->idle_durations_s.push_back(each.backward_right_idle.duration_s);
      pair->idle_exact = pair->idle_exact && each.backward_right_idle.exact && each.backward_right_idle.end.idle();
    }
    pair->micro.push_back(each);
  }
  return *pairs_.emplace(key, std::move(pair)).first->second;
}

}  // namespace shardplan
