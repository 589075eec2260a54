// WrapFragments (Note [Wrap fragments]): windows of the plan template lowered, split at their fragment marks, placed
// once from the idle state, with the bytes each unit holds; cached by the window's blocks in a FragmentCache.
#include "wrap_fragments.h"

#include <algorithm>
#include <cstring>

#include "errors.h"
#include "lowering.h"
#include "memory_certainty.h"
#include "unit_layout.h"

namespace shardplan {

namespace {

// A lowered window: its schedule, each op's base duration, what is certainly live in it.
struct Window {
  StepSchedule schedule;
  std::vector<double> base_s;
  MemoryCertainty certainty;  // every unit's buffers but the excluded units'
  unsigned excluded = 0;      // bit u: window unit u's buffers are accounted outside the window (its neighbours)

  // The mark of (micro-batch, pass, unit) and the fragment from it to the next mark (or the schedule's end).
  std::size_t mark(int micro, FragmentPass pass, int unit) const {
    for (std::size_t index = 0; index < schedule.fragments.size(); ++index) {
      const FragmentMark& at = schedule.fragments[index];
      if (at.micro_batch == micro && at.pass == pass && (pass == FragmentPass::step || at.unit == unit)) return index;
    }
    throw InternalError("wrap fragments: a window has no mark for micro-batch " + std::to_string(micro));
  }
  int begin(std::size_t mark) const { return schedule.fragments[mark].first_op; }
  int end(std::size_t mark) const {
    return mark + 1 < schedule.fragments.size() ? schedule.fragments[mark + 1].first_op
                                                : static_cast<int>(schedule.ops.size());
  }
  // Where micro-batch `micro` ends: the next one's start mark, or the schedule's end.
  int micro_end(int micro) const {
    for (const FragmentMark& at : schedule.fragments) {
      if (at.micro_batch == micro + 1 && at.pass == FragmentPass::step) return at.first_op;
    }
    return static_cast<int>(schedule.ops.size());
  }
  Fragment fragment(int micro, FragmentPass pass, int unit, int slot = -1) const {
    const std::size_t at = mark(micro, pass, unit);
    return extract_fragment(schedule, begin(at), end(at), base_s, certainty, slot, excluded);
  }
};

// The fields of a layer the lowering reads (its name aside): two blocks that agree on them lower alike.
bool lowers_alike(const LayerSpec& a, const LayerSpec& b) {
  const auto& x = a.activations;
  const auto& y = b.activations;
  return a.kind == b.kind && a.param_count() == b.param_count() && a.tied_to_layer == b.tied_to_layer &&
         a.flops.matmul_flops_per_token == b.flops.matmul_flops_per_token &&
         a.flops.attention_flops_per_token_per_position == b.flops.attention_flops_per_token_per_position &&
         x.elements_per_token == y.elements_per_token && x.mask_bytes_per_token == y.mask_bytes_per_token &&
         x.score_elements_per_token_per_position == y.score_elements_per_token_per_position &&
         x.score_mask_bytes_per_token_per_position == y.score_mask_bytes_per_token_per_position &&
         x.flash_stat_bytes_per_token == y.flash_stat_bytes_per_token && x.fp32_bytes_per_token == y.fp32_bytes_per_token &&
         x.checkpoint_elements_per_token == y.checkpoint_elements_per_token;
}

std::int64_t total_bytes(const MemoryByCategory& bytes) {
  std::int64_t total = 0;
  for (auto value : bytes) total += value;
  return total;
}

// A window layer with what the lowering reads of it: its parameters as one tensor (a layer's tensors matter only by
// their count), no name.
LayerSpec lean_layer(const LayerSpec& layer) {
  LayerSpec lean;
  lean.kind = layer.kind;
  lean.tied_to_layer = layer.tied_to_layer;
  lean.flops = layer.flops;
  lean.activations = layer.activations;
  if (const std::int64_t params = layer.param_count(); params > 0) lean.tensors.push_back({"", {params}});
  return lean;
}

constexpr int kCheckpointingModes = 3;  // ActivationCheckpointing: none, selective, full

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
         x.flash_attention == y.flash_attention && x.no_sync_accumulation == y.no_sync_accumulation;
}

}  // namespace

class FragmentCache {
 public:
  FragmentCache(const ModelSpec& model, const Plan& plan_template, const HardwareProfile& profile, int world_size,
                int gpus_per_node);

  bool serves(const Plan& plan_template, int world_size, int gpus_per_node) const {
    return world_size == world_size_ && gpus_per_node == gpus_per_node_ && same_knobs(template_, plan_template);
  }
  int signature(std::size_t block, ActivationCheckpointing mode) const {
    return shape_class_[block] * kCheckpointingModes + static_cast<int>(mode);
  }
  std::uint64_t run(const std::vector<int>& signatures) {
    return runs_.emplace(signatures, runs_.size()).first->second;
  }
  const EdgeFragments& edge(std::uint64_t key, unsigned relaxation_code, const TimingRelaxation& relaxation,
                            const UnitChoice& unit, const std::vector<int>& signatures);
  const UnitFragments& unit(std::uint64_t key, const UnitChoice& unit, const std::vector<int>& signatures);
  static std::uint64_t pair_key(std::uint64_t left_key, std::uint64_t right_key, unsigned relaxation_code) {
    return (left_key << 32 | right_key << 3) | relaxation_code;  // keys are numbered densely from 0, far below 2^29
  }
  const PairFragments* find_pair(std::uint64_t key) const {
    const auto found = pairs_.find(key);
    return found == pairs_.end() ? nullptr : found->second.get();
  }
  const PairFragments& pair(std::uint64_t left_key, std::uint64_t right_key, unsigned relaxation_code,
                            const TimingRelaxation& relaxation, const EdgeFragments& below,
                            const EdgeFragments& above, const UnitFragments& left_unit,
                            const UnitFragments& right_unit, bool left_kept);
  double optimizer_base_s(std::int64_t shard_elements) const {
    return base_duration_s(optimizer_step_op(shard_elements, template_),
                           template_.training.precision.param_compute_bytes, profile_);
  }

  const ModelSpec& model_;
  Plan template_;
  HardwareProfile profile_;
  int world_size_, gpus_per_node_;
  int micro_batches_ = 1;
  std::vector<std::size_t> blocks_;       // model layer of each block
  std::vector<int> shape_class_;          // equal for blocks whose layers lower alike
  std::vector<std::size_t> before_blocks_, after_blocks_;  // the root's layers
  std::int64_t constant_bytes_ = 0;
  std::int64_t root_optimizer_elements_ = 0;
  bool keep_choice_ = false, template_kept_ = false;

 private:
  // The window of `units` with the views' checkpointing of their blocks (`signatures`: per block).
  Window lower_window(const std::vector<UnitChoice>& units, const std::vector<int>& signatures,
                      unsigned excluded) const;

  std::map<std::vector<int>, std::uint64_t> runs_;  // runs of block signatures, interned
  std::unordered_map<std::uint64_t, std::unique_ptr<EdgeFragments>> edges_;  // by (key, relaxation)
  std::unordered_map<std::uint64_t, std::unique_ptr<UnitFragments>> units_;  // by key
  std::unordered_map<std::uint64_t, std::unique_ptr<PairFragments>> pairs_;  // by (keys, relaxation)
};

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
  micro_batches_ = std::max(1, template_.grad_accumulation_steps);
  const PlanUnit& unit = template_.units[1];
  const ShardingLayout layout = resolve_sharding(unit.strategy, world_size, gpus_per_node);
  keep_choice_ = layout.params_sharded() && unit.reshard_after_forward.enabled &&
                 !unit.reshard_after_forward.keeps_partial_copy();
  template_kept_ = !unit.reshard_after_forward.enabled;
  std::int64_t root_params = 0;
  for (auto layer : before_blocks_) root_params += model.layers[layer].param_count();
  for (auto layer : after_blocks_) root_params += model.layers[layer].param_count();
  const UnitLayout root = unit_layout(template_.units.front(), root_params, template_.training.precision, world_size,
                                      gpus_per_node);
  constant_bytes_ = total_bytes(persistent_memory({root}, template_, profile.context_overhead_bytes));
  root_optimizer_elements_ = root.optimizer_shard_elements;
}

Window FragmentCache::lower_window(const std::vector<UnitChoice>& units, const std::vector<int>& signatures,
                                   unsigned excluded) const {
  // The window model: the root's layers around the units' blocks, ties remapped to the window's layer indices.
  ModelSpec window;
  window.name = model_.name;
  window.hidden_size = model_.hidden_size;
  window.vocab_size = model_.vocab_size;
  window.num_heads = model_.num_heads;
  window.default_seq_len = model_.default_seq_len;
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
  std::vector<bool> kept;
  for (const UnitChoice& unit : units) kept.push_back(unit.kept);
  const Plan plan = plan_with_units(window, window_template, ranges, kept);
  LoweringOptions options;
  options.world_size = world_size_;
  options.gpus_per_node = gpus_per_node_;
  StepSchedule schedule = lower_plan(plan, window, options);
  std::vector<double> base_s;
  base_s.reserve(schedule.ops.size());
  for (const Op& op : schedule.ops) base_s.push_back(base_duration_s(op, schedule.compute_element_bytes, profile_));
  MemoryCertainty certainty(schedule, -1, excluded);
  return Window{std::move(schedule), std::move(base_s), std::move(certainty), excluded};
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
    for (std::size_t micro = 0; micro < edge->start.size(); ++micro) {
      edge->start_idle[micro] = placer.place(edge->start[micro], idle);
      edge->head_idle[micro] = placer.place(edge->head[micro], idle);
      edge->last_forward_idle[micro] = placer.place(edge->last_forward[micro], idle);
      edge->turn_idle[micro] = placer.place(edge->turn[micro], idle);
      edge->close_idle[micro] = placer.place(edge->close[micro], idle);
    }
    return *edges_.emplace(at_key, std::move(edge)).first->second;
  }
  const Window window = lower_window({unit}, signatures, 0);
  const MemoryCertainty unit_bytes(window.schedule, 1);
  auto edge = std::make_unique<EdgeFragments>();
  FragmentPlacer placer(profile_);
  for (int micro = 0; micro < micro_batches_; ++micro) {
    const auto add = [&](std::vector<Fragment>& fragments, std::vector<FragmentTiming>& timings, FragmentPass pass,
                         int at_unit, int slot) {
      fragments.push_back(window.fragment(micro, pass, at_unit, slot));
      timings.push_back(placer.place(fragments.back(), idle));
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
  std::int64_t params = 0;
  for (std::size_t b = unit.first_block; b < unit.first_block + unit.length; ++b) {
    params += model_.layers[blocks_[b]].param_count();
  }
  PlanUnit spec = template_.units[1];
  if (unit.kept) spec.reshard_after_forward.enabled = false;
  const UnitLayout layout = unit_layout(spec, params, template_.training.precision, world_size_, gpus_per_node_);
  edge->persistent_bytes = total_bytes(persistent_memory({layout}, template_, 0));
  edge->optimizer_elements = layout.optimizer_shard_elements;
  return *edges_.emplace(at_key, std::move(edge)).first->second;
}

const UnitFragments& FragmentCache::unit(std::uint64_t key, const UnitChoice& unit,
                                         const std::vector<int>& signatures) {
  if (const auto found = units_.find(key); found != units_.end()) return *found->second;
  auto fragments = std::make_unique<UnitFragments>();
  // Units of the same blocks share the entry wherever they stand, so both neighbours are lowered even where one
  // cannot exist (the last unit's forward is edge's): any block serves as the one-block neighbour, whose own ops and
  // bytes the slot and the certainty leave out.
  const std::size_t after = unit.first_block + unit.length < blocks_.size() ? unit.first_block + unit.length : 0;
  const std::size_t before = unit.first_block > 0 ? unit.first_block - 1 : blocks_.size() - 1;
  // One window lowers both: a one-block unit below, the unit, a one-block unit after it. The unit's forward issues
  // the gather of the unit after it, and its backward the gather of the unit below (its slot each time); the unit
  // below reshards or, for a kept unit, is kept too (Note [Wrap search]: kept units form a suffix) — a second window.
  const EdgeFragments& own = edge(key, 0, {}, unit, signatures);
  for (bool below_kept : {false, true}) {
    // A unit below a resharded one reshards (the suffix rule); with no choice every unit is as the template says.
    if (below_kept ? !unit.kept : unit.kept && !keep_choice_) continue;
    const bool with_forward = fragments->forward.empty();
    // Both neighbours' buffers are accounted outside: the one below by its span, the one after by its `before` or,
    // in the unit's backward, by what its reduction holds and keeps (Note [Wrap fragments]).
    const Window window = lower_window({{before, 1, below_kept}, unit, {after, 1, false}}, signatures, 0b1010u);
    auto& target = below_kept ? fragments->backward_below_kept : fragments->backward;
    const MemoryCertainty unit_bytes(window.schedule, 2);
    for (int micro = 0; micro < micro_batches_; ++micro) {
      if (with_forward) fragments->forward.push_back(window.fragment(micro, FragmentPass::forward, 2, 3));
      target.push_back(window.fragment(micro, FragmentPass::backward, 2, 1));
      if (fragments->held_at_end.size() > static_cast<std::size_t>(micro)) continue;  // from the first variant
      // What its reductions still hold once the unit below starts its backward, beyond what it keeps after them.
      const std::int64_t at_below = unit_bytes.before(window.begin(window.mark(micro, FragmentPass::backward, 1)));
      fragments->held_at_end.push_back(std::max<std::int64_t>(0, at_below - own.after[static_cast<std::size_t>(micro)]));
    }
  }
  return *units_.emplace(key, std::move(fragments)).first->second;
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
  for (std::size_t at = 0; at < micros; ++at) {
    PairFragments::Micro each;
    // left's forward issues right's gather; right was not yet in its forward: it holds its `before`.
    FragmentInputs forward{&above.forward_gather[at], above.before[at]};
    const Fragment& forward_left = left_unit.forward[at];
    each.forward_left_idle = placer.place(forward_left, idle, forward);
    each.forward_left_certain = forward_left.certain_peak_bytes + above.before[at];
    // right's backward issues left's backward gather (none when left stays gathered); left holds its span.
    const Fragment& backward_right = left_kept ? right_unit.backward_below_kept[at] : right_unit.backward[at];
    each.backward_inputs = {left_kept ? nullptr : &below.backward_gather[at], below.span[at]};
    each.backward_right_idle = placer.place(backward_right, idle, each.backward_inputs);
    each.backward_right_certain = backward_right.certain_peak_bytes + below.span[at];
    each.backward_fragment = &backward_right;
    each.right_held = right_unit.held_at_end[at];
    pair->micro.push_back(each);
  }
  return *pairs_.emplace(key, std::move(pair)).first->second;
}

std::size_t PairFragments::StateHash::operator()(const BoundaryState& state) const {
  // The times' bit patterns (equal states have equal bits: no rounding is involved), multiplied in.
  std::uint64_t hash = state.comm_busy.size();
  const auto mix = [&](double value) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    hash = (hash ^ bits) * 0x100000001b3ull;  // FNV-1a's prime
  };
  for (double free_s : state.stream_free_s) mix(free_s);
  for (const TimeInterval& busy : state.comm_busy) {
    mix(busy.start_s);
    mix(busy.end_s);
  }
  return static_cast<std::size_t>(hash ^ (hash >> 29));
}

FragmentTiming PairFragments::place_backward_right(int micro, const BoundaryState& state, FragmentPlacer& placer,
                                                   std::int64_t held_bytes, bool with_peak) const {
  const auto at = static_cast<std::size_t>(micro);
  const bool remembered = !with_peak && held_bytes == 0 && at + 1 == this->micro.size();
  if (remembered) {
    if (const auto found = timing_by_state_.find(state); found != timing_by_state_.end()) return found->second;
  }
  FragmentInputs inputs = this->micro[at].backward_inputs;
  inputs.held_bytes = held_bytes;
  inputs.with_peak = with_peak;
  FragmentTiming timing = placer.place(*this->micro[at].backward_fragment, state, inputs);
  if (remembered) timing_by_state_.emplace(state, timing);
  return timing;
}

WrapFragments::WrapFragments(const ModelSpec& model, const Plan& plan_template, const HardwareProfile& profile,
                             int world_size, int gpus_per_node, const TimingRelaxation& relaxation,
                             std::shared_ptr<FragmentCache> shared)
    : cache_(std::move(shared)), relaxation_(relaxation) {
  if (cache_ == nullptr || !cache_->serves(plan_template, world_size, gpus_per_node)) {
    cache_ = std::make_shared<FragmentCache>(model, plan_template, profile, world_size, gpus_per_node);
  }
  relaxation_code_ = (relaxation.free_all_gathers ? 1u : 0u) | (relaxation.free_collective_issue ? 2u : 0u) |
                     (relaxation.free_layer_compute ? 4u : 0u);
  SHARDPLAN_CHECK(plan_template.layer_checkpointing.size() == model.layers.size(), "checkpointing per layer");
  for (std::size_t b = 0; b < cache_->blocks_.size(); ++b) {
    block_signature_.push_back(cache_->signature(b, plan_template.layer_checkpointing[cache_->blocks_[b]]));
  }
}

WrapFragments::~WrapFragments() = default;

std::size_t WrapFragments::block_count() const { return cache_->blocks_.size(); }
std::size_t WrapFragments::first_layer_of_block(std::size_t block) const { return cache_->blocks_[block]; }
int WrapFragments::micro_batches() const { return cache_->micro_batches_; }
const HardwareProfile& WrapFragments::profile() const { return cache_->profile_; }
std::int64_t WrapFragments::constant_bytes() const { return cache_->constant_bytes_; }
std::int64_t WrapFragments::root_optimizer_elements() const { return cache_->root_optimizer_elements_; }
bool WrapFragments::keep_choice() const { return cache_->keep_choice_; }
bool WrapFragments::template_kept() const { return cache_->template_kept_; }
double WrapFragments::optimizer_base_s(std::int64_t shard_elements) const {
  return cache_->optimizer_base_s(shard_elements);
}

std::uint64_t WrapFragments::key_of(const UnitChoice& unit) {
  const bool short_unit = unit.length >= 1 && unit.length <= kShortUnit;
  const std::size_t short_at = unit.first_block * kShortUnit + unit.length - 1;
  if (short_unit && short_at < short_run_at_.size() && short_run_at_[short_at] >= 0) {
    return static_cast<std::uint64_t>(short_run_at_[short_at]) * 2 + (unit.kept ? 1 : 0);
  }
  const std::vector<int> signatures(block_signature_.begin() + static_cast<std::ptrdiff_t>(unit.first_block),
                                    block_signature_.begin() + static_cast<std::ptrdiff_t>(unit.first_block + unit.length));
  const std::uint64_t run = cache_->run(signatures);
  if (short_unit) {
    if (short_run_at_.size() <= short_at) short_run_at_.resize(block_signature_.size() * kShortUnit, -1);
    short_run_at_[short_at] = static_cast<std::int64_t>(run);
  }
  return run * 2 + (unit.kept ? 1 : 0);
}

const EdgeFragments& WrapFragments::edge(const UnitChoice& unit) { return edge(unit, key_of(unit)); }

const EdgeFragments& WrapFragments::edge(const UnitChoice& unit, std::uint64_t key) {
  return cache_->edge(key, relaxation_code_, relaxation_, unit, block_signature_);
}

const UnitFragments& WrapFragments::unit(const UnitChoice& unit) {
  return cache_->unit(key_of(unit), unit, block_signature_);
}

const PairFragments& WrapFragments::pair(const UnitChoice& left, const UnitChoice& right) {
  return pair(left, right, key_of(left), key_of(right));
}

std::int64_t WrapFragments::held_by_reduction_above(const UnitChoice& unit, const UnitChoice& above) {
  return pair(unit, above).micro[static_cast<std::size_t>(micro_batches() - 1)].right_held;
}

const PairFragments& WrapFragments::pair(const UnitChoice& left, const UnitChoice& right, std::uint64_t left_key,
                                         std::uint64_t right_key) {
  SHARDPLAN_CHECK(left.first_block + left.length == right.first_block, "a pair of neighbouring units");
  const std::uint64_t key = FragmentCache::pair_key(left_key, right_key, relaxation_code_);
  RecentPair& recent = recent_pairs_[(key ^ key >> 17) % recent_pairs_.size()];
  if (recent.key == key) return *recent.pair;
  const PairFragments* found = cache_->find_pair(key);
  if (found == nullptr) {
    found = &cache_->pair(left_key, right_key, relaxation_code_, relaxation_, edge(left, left_key),
                          edge(right, right_key), cache_->unit(left_key, left, block_signature_),
                          cache_->unit(right_key, right, block_signature_), left.kept);
  }
  recent = {key, found};
  return *found;
}

}  // namespace shardplan
