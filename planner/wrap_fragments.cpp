// WrapFragments (Note [Wrap fragments]): a search's view of the FragmentCache (fragment_cache.h) under its timing
// relaxation and block checkpointing, and the pair fragments' state-keyed timing memo.
#include "wrap_fragments.h"

#include <cstring>

#include "errors.h"
#include "fragment_cache.h"

namespace shardplan {

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
bool WrapFragments::may_share_unit(std::size_t first_block, std::size_t length) const {
  return length > 0 && cache_->shareable_from_[first_block + length - 1] <= first_block;
}

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
