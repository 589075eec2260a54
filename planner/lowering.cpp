// Lowering of a Plan into a StepSchedule: where every all-gather, compute op, free and reduction goes, with memory.
#include "lowering.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>

#include "compute_cost.h"
#include "errors.h"
#include "reduction_handover.h"
#include "tensor_parallel_view.h"
#include "unit_layout.h"

namespace shardplan {
namespace {  // Note [Lowering] in lowering.h
// An op of `kind` on `stream` for `unit` in micro-batch `micro`; the caller fills the rest.
Op make_op(OpKind kind, StreamKind stream, int unit, int micro) {
  Op op;
  op.kind = kind;
  op.stream = stream;
  op.unit = unit;
  op.micro_batch = micro;
  return op;
}

struct Segment {
  int unit;
  std::size_t first_layer;
  std::size_t last_layer;  // inclusive
};

class Lowerer {
 public:
  Lowerer(const Plan& plan, const ModelSpec& model, const LoweringOptions& options)
      : plan_(plan), model_(model), options_(options),
        layouts_(unit_layouts(plan, model, options.world_size, options.gpus_per_node)) {
    for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
      const int unit = owner_of(layer);
      if (segments_.empty() || segments_.back().unit != unit) {
        segments_.push_back({unit, layer, layer});
      } else {
        segments_.back().last_layer = layer;
      }
    }
  }

  StepSchedule run() {
    schedule_.world_size = options_.world_size;
    schedule_.gpus_per_node = options_.gpus_per_node;
    schedule_.micro_batches = plan_.grad_accumulation_steps;
    schedule_.seq_len = plan_.training.seq_len;
    schedule_.sequences_per_micro_batch = plan_.training.micro_batch;
    schedule_.compute_element_bytes = plan_.training.precision.param_compute_bytes;
    schedule_.tokens_per_step = static_cast<std::int64_t>(plan_.grad_accumulation_steps) *
                                plan_.training.tokens_per_micro_batch() * options_.world_size;
    for (const auto& layout : layouts_) schedule_.unit_names.push_back(layout.name);
    schedule_.persistent = persistent_memory(layouts_, plan_, options_.context_overhead_bytes);
    grads_allocated_.assign(layouts_.size(), false);
    last_reduction_.assign(layouts_.size(), -1);
    std::vector<int> reductions;
    for (int micro = 0; micro < plan_.grad_accumulation_steps; ++micro) {
      const bool synchronise = micro + 1 == plan_.grad_accumulation_steps || !plan_.training.no_sync_accumulation;
      forward_pass(micro);
      reductions = backward_pass(micro, synchronise);
    }
    optimizer_step(reductions);
    return std::move(schedule_);
  }

 private:
  int owner_of(std::size_t layer) const {
    for (std::size_t unit = 1; unit < plan_.units.size(); ++unit) {
      const auto& range = plan_.units[unit].layers;
      if (layer >= range.begin && layer < range.end) return static_cast<int>(unit);
    }
    return 0;
  }

  int emit(Op op) {
    op.id = static_cast<int>(schedule_.ops.size());
    if (op.stream == StreamKind::compute && compute_waits_for_ >= 0) {
      op.deps.push_back(compute_waits_for_);  // Note [Expert parallelism]: the tokens are back from their experts
      compute_waits_for_ = -1;
    }
    if (op.stream == StreamKind::compute) last_compute_ = op.id;
    schedule_.ops.push_back(std::move(op));
    return schedule_.ops.back().id;
  }

  // --- all-gathers and the rate limiter -------------------------------------------------------------------------

  bool counts_toward_limit(int unit, bool backward) const {
    // Units that stay gathered for the rest of the pass never issue a free the limiter could wait on.
    return backward || plan_.units[static_cast<std::size_t>(unit)].reshard_after_forward.enabled;
  }

  // The limiter's condition for the next counted gather: the gather `limit` places earlier has been freed.
  bool limiter_allows() const {
    const int limit = plan_.max_inflight_all_gathers;
    const std::size_t next = limiter_sequence_.size();
    return limit == 0 || next < static_cast<std::size_t>(limit) ||
           limiter_sequence_[next - static_cast<std::size_t>(limit)].free_op >= 0;
  }

  int limiter_dependency() const {
    const int limit = plan_.max_inflight_all_gathers;
    const std::size_t next = limiter_sequence_.size();
    if (limit == 0 || next < static_cast<std::size_t>(limit)) return -1;
    return limiter_sequence_[next - static_cast<std::size_t>(limit)].free_op;
  }

  void request_gather(int unit, int micro, bool backward) {
    const auto& layout = layouts_[static_cast<std::size_t>(unit)];
    if (!layout.gathers || gathered_[unit] || std::find(pending_.begin(), pending_.end(), unit) != pending_.end()) {
      return;
    }
    if (counts_toward_limit(unit, backward) && (!pending_.empty() || !limiter_allows())) {
      pending_.push_back(unit);
      return;
    }
    emit_gather(unit, micro, backward, counts_toward_limit(unit, backward) ? limiter_dependency() : -1);
  }

  void emit_gather(int unit, int micro, bool backward, int limiter_dep) {
    const auto& layout = layouts_[static_cast<std::size_t>(unit)];
    const auto& precision = plan_.training.precision;
    Op gather = make_op(OpKind::all_gather, StreamKind::all_gather, unit, micro);
    gather.bytes = layout.gathered_bytes;  // QLoRA: the packed 4-bit codes, as stored (Note [Frozen parameters in FSDP])
    gather.element_bytes = precision.param_compute_bytes;
    const bool from_partial = partial_copy_[unit];
    gather.group = from_partial ? GroupKind::partial_reshard : GroupKind::shard;
    gather.group_size = from_partial ? layout.partial_group : layout.param_group;
    gather.group_spans_nodes = gather.group_size > options_.gpus_per_node;
    gather.group_ranks_per_node = std::min(gather.group_size, options_.gpus_per_node);
    if (limiter_dep >= 0) gather.deps.push_back(limiter_dep);
    // Issue point: the all-gather stream waits for the compute stream where the gather was issued (FSDP2's copy-in
    // waits on the current stream), so a prefetch overlaps the compute issued after it, not earlier work.
    if (last_compute_ >= 0) gather.deps.push_back(last_compute_);
    gather.allocates.push_back({layout.gathered_category, gather.bytes});
    if (plan_.offload.params) {
      // The shard comes in from host memory when the unshard is issued, before the all-gather (FSDP1's CPUOffload
      // copies it to the device in _unshard; FSDP2's offload policy in its all-gather copy-in): the copy waits for
      // what the gather waits for, so the shard is on the device from the gather's issue point to its end.
      Op copy = make_op(OpKind::host_to_device, StreamKind::host_to_device, unit, micro);
      copy.bytes = layout.shard_bytes;
      copy.element_bytes = precision.param_storage_bytes;
      copy.deps = gather.deps;
      copy.allocates.push_back({MemoryCategory::comm_buffers, copy.bytes});
      gather.deps.push_back(emit(std::move(copy)));
      gather.frees.push_back({MemoryCategory::comm_buffers, layout.shard_bytes});
    }
    if (layout.cast_shard_bytes > 0) {
      // The low-precision copy of the shard that feeds the all-gather (FSDP1 MixedPrecision `_mp_shard`).
      const std::int64_t cast_bytes = layout.cast_shard_bytes;
      gather.allocates.push_back({MemoryCategory::comm_buffers, cast_bytes});
      gather.frees.push_back({MemoryCategory::comm_buffers, cast_bytes});
    }
    if (from_partial) {
      gather.frees.push_back({MemoryCategory::unsharded_params, layout.partial_copy_bytes});
      partial_copy_[unit] = false;
    }
    gather_op_[unit] = emit(std::move(gather));
    gathered_[unit] = true;
    waited_[unit] = false;
    if (counts_toward_limit(unit, backward)) limiter_sequence_.push_back({unit, -1});
  }

  // The unit must be gathered now: a pending request is issued even if the limiter is full (FSDP would block the
  // CPU until an earlier free completes; the latest free is the closest event we have).
  void ensure_gathered(int unit, int micro, bool backward) {
    const auto& layout = layouts_[static_cast<std::size_t>(unit)];
    if (!layout.gathers) return;
    const auto position = std::find(pending_.begin(), pending_.end(), unit);
    if (position != pending_.end()) {
      pending_.erase(position);
      emit_gather(unit, micro, backward, limiter_allows() ? limiter_dependency() : last_free_);
    } else if (!gathered_[unit]) {
      request_gather(unit, micro, backward);
      if (!gathered_[unit]) ensure_gathered(unit, micro, backward);
    }
  }

  void emit_wait(int unit, int micro) {
    if (gather_op_[unit] < 0 || waited_[unit]) return;
    Op wait = make_op(OpKind::wait, StreamKind::compute, unit, micro);
    wait.deps.push_back(gather_op_[unit]);
    emit(std::move(wait));
    waited_[unit] = true;
  }

  void emit_free(int unit, int micro, bool backward) {
    const auto& layout = layouts_[static_cast<std::size_t>(unit)];
    Op free_op = make_op(OpKind::free_unsharded, StreamKind::compute, unit, micro);
    free_op.frees.push_back({layout.gathered_category, layout.gathered_bytes});
    const bool partial = !backward && plan_.units[static_cast<std::size_t>(unit)].reshard_after_forward.keeps_partial_copy();
    if (partial) free_op.allocates.push_back({MemoryCategory::unsharded_params, layout.partial_copy_bytes});
    last_free_ = emit(std::move(free_op));
    gathered_[unit] = false;
    gather_op_[unit] = -1;
    partial_copy_[unit] = partial;
    for (auto entry = limiter_sequence_.rbegin(); entry != limiter_sequence_.rend(); ++entry) {
      if (entry->unit == unit && entry->free_op < 0) {
        entry->free_op = last_free_;
        break;
      }
    }
    while (!pending_.empty() && limiter_allows()) {
      const int next = pending_.front();
      pending_.pop_front();
      emit_gather(next, micro, backward, limiter_dependency());
    }
  }

  void start_pass() {
    const std::size_t count = layouts_.size();
    gathered_.assign(count, false);
    waited_.assign(count, false);
    gather_op_.assign(count, -1);
    if (partial_copy_.size() != count) partial_copy_.assign(count, false);
    pending_.clear();
  }

  // --- compute ----------------------------------------------------------------------------------------------------

  // The layer's activation bytes and checkpointing come from unit_layout.h, which the closed-form bound shares.
  std::int64_t kept_bytes(std::size_t layer) const {
    return kept_activation_bytes(model_, plan_.training, layer, checkpointing(layer));
  }

  ActivationCheckpointing checkpointing(std::size_t layer) const {
    return layer_checkpointing_of(plan_, model_, layer);
  }

  // The pass's kernels, built once per layer, pass and checkpointing mode of this lowering and shared by its ops.
  std::shared_ptr<const PassKernels> kernels_of(std::size_t layer, ComputePass pass, ActivationCheckpointing mode) {
    auto& slot = kernel_cache_[static_cast<std::size_t>(pass) * kCheckpointingModes + static_cast<std::size_t>(mode)];
    if (slot.empty()) slot.resize(model_.layers.size());
    auto& kernels = slot[layer];
    if (!kernels) kernels = std::make_shared<const PassKernels>(pass_kernels(model_, layer, plan_.training, pass, mode));
    return kernels;
  }

  int emit_compute(OpKind kind, std::size_t layer, int unit, int micro, ComputePass pass) {
    Op op;
    op.kind = kind;
    op.unit = unit;
    op.layer = static_cast<int>(layer);
    op.micro_batch = micro;
    op.checkpointing = checkpointing(layer);
    op.kernels = kernels_of(layer, pass, op.checkpointing);
    op.flops = op.kernels->flops();
    schedule_.hardware_flops_per_rank += op.flops;
    if (pass != ComputePass::recompute) {
      // Model FLOPs (MFU's numerator, Korthikanti et al. 2022 App. A): forward once and backward twice the forward's
      // FLOPs, whatever the kernels do beyond that (a flash backward's recompute, activation recompute).
      // Frozen weights skip their weight gradients (LayerSpec::backward_flops_per_token).
      const LayerSpec& spec = model_.layers[layer];
      const auto tokens = static_cast<double>(plan_.training.tokens_per_micro_batch(spec));
      const std::int64_t seq = plan_.training.seq_len;
      const bool causal = plan_.training.flash_attention;
      schedule_.model_flops_per_rank +=
          tokens * (pass == ComputePass::forward ? spec.forward_flops_per_token(seq, causal)
                                                 : spec.backward_flops_per_token(seq, causal));
    }
    if (kind == OpKind::forward) {
      // Note [Workspaces] (unit_layout.h): what the op materialises beyond what it keeps is freed at its end.
      const std::int64_t workspace = forward_workspace_bytes(plan_, model_, layer);
      op.allocates.push_back({MemoryCategory::activations, kept_bytes(layer) + workspace});
      if (workspace > 0) op.frees.push_back({MemoryCategory::activations, workspace});
    }
    const int id = emit(std::move(op));
    // torchtitan's selective-op policy saves the all-to-alls' outputs (its _save_list holds all_to_all_single), and
    // attention-core recompute does not reach the MLP: only full recompute exchanges the tokens again.
    if (pass != ComputePass::recompute || checkpointing(layer) == ActivationCheckpointing::full) {
      emit_all_to_alls(layer, unit, micro, id);
    }
    return id;
  }

  // Note [Expert parallelism] (unit_layout.h): an MoE block's dispatch and combine over its EP group, after the
  // block's compute op `after`; the next compute op waits for the combine.
  void emit_all_to_alls(std::size_t layer, int unit, int micro, int after) {
    const LayerSpec& spec = model_.layers[layer];
    const int degree = plan_.training.expert_parallel_degree;
    if (!spec.moe || degree <= 1) return;
    const MoeLayerRouting& routing = *spec.moe;
    const double slots = static_cast<double>(plan_.training.tokens_per_micro_batch(spec)) *
                         static_cast<double>(routing.experts_per_token) * routing.capacity_factor;
    const int element_bytes = plan_.training.precision.param_compute_bytes;
    const auto bytes = static_cast<std::int64_t>(std::llround(slots * static_cast<double>(routing.hidden_size))) *
                       element_bytes;
    int previous = after;
    for (int leg = 0; leg < 2; ++leg) {  // dispatch, then combine
      Op exchange = make_op(OpKind::all_to_all, StreamKind::all_to_all, unit, micro);
      exchange.layer = static_cast<int>(layer);
      exchange.bytes = bytes;
      exchange.element_bytes = element_bytes;
      exchange.group = GroupKind::expert;
      exchange.group_size = degree;
      exchange.group_spans_nodes = degree > options_.gpus_per_node;
      exchange.group_ranks_per_node = std::min(degree, options_.gpus_per_node);
      exchange.deps.push_back(previous);
      previous = emit(std::move(exchange));
    }
    compute_waits_for_ = previous;
  }

  // Note [Fragments] (schedule.h): the next op begins a fragment.
  void mark(int micro, FragmentPass pass, int unit) {
    schedule_.fragments.push_back({static_cast<int>(schedule_.ops.size()), micro, pass, unit});
  }

  void forward_pass(int micro) {
    start_pass();
    mark(micro, FragmentPass::step, -1);
    std::vector<bool> started(layouts_.size(), false);
    for (std::size_t index = 0; index < segments_.size(); ++index) {
      const Segment& segment = segments_[index];
      const int unit = segment.unit;
      const auto& spec = plan_.units[static_cast<std::size_t>(unit)];
      const auto& layout = layouts_[static_cast<std::size_t>(unit)];
      if (!started[unit]) {
        started[unit] = true;
        ensure_gathered(unit, micro, false);
        emit_wait(unit, micro);
        mark(micro, FragmentPass::forward, unit);
        for (int target : spec.forward_prefetch) request_gather(target, micro, false);
      }
      for (std::size_t layer = segment.first_layer; layer <= segment.last_layer; ++layer) {
        const int id = emit_compute(OpKind::forward, layer, unit, micro, ComputePass::forward);
        if (layout.casts_replicated && !gathered_[unit]) {
          // Replicated parameters in another dtype: the compute copy appears with the unit's first forward op.
          schedule_.ops[static_cast<std::size_t>(id)].allocates.push_back({layout.gathered_category, layout.gathered_bytes});
          gathered_[unit] = true;
        }
      }
      if (last_segment_of(unit, index, true) && gathered_[unit] && spec.reshard_after_forward.enabled) {
        emit_free(unit, micro, false);
      }
    }
  }

  std::vector<int> backward_pass(int micro, bool synchronise) {
    std::vector<int> reductions;
    // Units kept gathered from forward stay so; every other unit is gathered again (the pass state carries over).
    pending_.clear();
    for (std::size_t unit = 0; unit < layouts_.size(); ++unit) {
      waited_[unit] = gathered_[unit];  // nothing to wait for on a unit still gathered since forward
    }
    std::vector<bool> started(layouts_.size(), false);
    grads_produced_.assign(layouts_.size(), false);
    for (std::size_t back = segments_.size(); back-- > 0;) {
      const Segment& segment = segments_[back];
      const int unit = segment.unit;
      const auto& spec = plan_.units[static_cast<std::size_t>(unit)];
      const auto& layout = layouts_[static_cast<std::size_t>(unit)];
      if (!started[unit]) {
        started[unit] = true;
        ensure_gathered(unit, micro, true);
        emit_wait(unit, micro);
        mark(micro, FragmentPass::backward, unit);
        for (int target : spec.backward_prefetch) request_gather(target, micro, true);
        if (layout.casts_replicated && !gathered_[unit]) {
          pending_alloc_ = {layout.gathered_category, layout.gathered_bytes};
          gathered_[unit] = true;
        }
      }
      for (std::size_t layer = segment.last_layer + 1; layer-- > segment.first_layer;) {
        const std::int64_t kept = kept_bytes(layer);
        const std::int64_t rebuilt = recomputed_activation_bytes(plan_, model_, layer);
        if (rebuilt > 0) {
          const int id = emit_compute(OpKind::recompute, layer, unit, micro, ComputePass::recompute);
          auto& op = schedule_.ops[static_cast<std::size_t>(id)];
          op.allocates.push_back({MemoryCategory::activations, rebuilt});
          // Note [Workspaces]: QLoRA's dequantised weight during each recomputed GEMM.
          if (const std::int64_t dequantized = dequantized_weight_bytes(plan_, model_, layer); dequantized > 0) {
            op.allocates.push_back({MemoryCategory::activations, dequantized});
            op.frees.push_back({MemoryCategory::activations, dequantized});
          }
          take_pending_alloc(op);
        }
        const int id = emit_compute(OpKind::backward, layer, unit, micro, ComputePass::backward);
        auto& op = schedule_.ops[static_cast<std::size_t>(id)];
        take_pending_alloc(op);
        const std::int64_t workspace = backward_workspace_bytes(plan_, model_, layer);
        if (workspace > 0) op.allocates.push_back({MemoryCategory::activations, workspace});
        op.frees.push_back({MemoryCategory::activations, kept + rebuilt + workspace});
        if (!grads_produced_[unit]) {
          // The unit's first gradient write of this micro-batch reuses the buffer its previous reduction reads
          // (FSDP makes the compute stream wait for that reduction before backward touches it again).
          grads_produced_[unit] = true;
          if (last_reduction_[unit] >= 0) op.deps.push_back(last_reduction_[unit]);
        }
        if (layout.grad_copies && !grads_allocated_[unit]) {
          op.allocates.push_back({MemoryCategory::unsharded_grads, layout.grad_copy_bytes});
          op.zeroed_bytes = layout.grad_copy_bytes;
          grads_allocated_[unit] = true;
        }
        last_backward_ = id;
      }
      if (last_segment_of(unit, back, false)) {
        if (gathered_[unit]) emit_free(unit, micro, true);
        if (synchronise) reduce(unit, micro, reductions);
      }
    }
    handover_.release_at_ends(schedule_.ops);
    return reductions;
  }

  void take_pending_alloc(Op& op) {
    if (pending_alloc_.bytes > 0) op.allocates.push_back(pending_alloc_);
    pending_alloc_ = {MemoryCategory::activations, 0};
  }

  // The unit's last segment in this pass: in forward the highest index, in backward the lowest.
  bool last_segment_of(int unit, std::size_t index, bool forward) const {
    if (forward) {
      for (std::size_t later = index + 1; later < segments_.size(); ++later) {
        if (segments_[later].unit == unit) return false;
      }
      return true;
    }
    for (std::size_t earlier = 0; earlier < index; ++earlier) {
      if (segments_[earlier].unit == unit) return false;
    }
    return true;
  }

  void reduce(int unit, int micro, std::vector<int>& reductions);
  void optimizer_step(const std::vector<int>& reductions);

  const Plan& plan_;
  const ModelSpec& model_;
  LoweringOptions options_;
  std::vector<UnitLayout> layouts_;
  std::vector<Segment> segments_;
  StepSchedule schedule_;
  std::vector<bool> gathered_, waited_, partial_copy_, grads_allocated_, grads_produced_;
  std::vector<int> last_reduction_;  // each unit's latest gradient reduction op (-1: none yet)
  std::vector<int> gather_op_;
  struct LimiterEntry {
    int unit;
    int free_op;  // the free_unsharded op that released it, -1 until issued
  };
  std::vector<LimiterEntry> limiter_sequence_;  // every gather the rate limiter counts, in issue order
  std::deque<int> pending_;                     // gather requests held back by the rate limiter
  int last_compute_ = -1;
  int compute_waits_for_ = -1;  // an all-to-all the next compute op depends on (-1: none)
  int last_free_ = -1;
  int last_backward_ = -1;
  MemoryChange pending_alloc_{MemoryCategory::activations, 0};
  ReductionHandover handover_;  // Note [Reduction buffers] (schedule.h)
  std::array<std::vector<std::shared_ptr<const PassKernels>>, 3 * kCheckpointingModes> kernel_cache_;
};

void Lowerer::reduce(int unit, int micro, std::vector<int>& reductions) {
  const auto& layout = layouts_[static_cast<std::size_t>(unit)];
  const auto& precision = plan_.training.precision;
  // Frozen parameters have no gradients to reduce (Note [Frozen parameters in FSDP] in unit_layout.h).
  if (layout.grad_elements == 0) return;
  const std::int64_t grad_copy = grads_allocated_[unit] ? layout.grad_copy_bytes : 0;
  grads_allocated_[unit] = false;
  if (layout.grad_group > 1) {
    Op scatter = make_op(OpKind::reduce_scatter, StreamKind::reduce_scatter, unit, micro);
    scatter.bytes = layout.reduce_scatter_elements() * precision.reduce_bytes;  // Note [Expert parallelism]
    scatter.element_bytes = precision.reduce_bytes;
    scatter.group = GroupKind::shard;
    scatter.group_size = layout.grad_group;
    scatter.group_spans_nodes = layout.grad_group > options_.gpus_per_node;
    scatter.group_ranks_per_node = std::min(layout.grad_group, options_.gpus_per_node);
    scatter.deps.push_back(last_backward_);
    const std::int64_t output_bytes = layout.grad_shard_elements * precision.reduce_bytes;
    scatter.allocates.push_back({MemoryCategory::comm_buffers, output_bytes});
    // Note [Reduction buffers]: HSDP's all-reduce or the offload copy frees the output, else the reduce-scatter does.
    const bool offload = plan_.offload.params;
    const bool output_passes_on = offload || layout.replicas > 1;
    std::vector<MemoryChange> scatter_holds{{MemoryCategory::unsharded_grads, grad_copy}};
    if (!output_passes_on) scatter_holds.push_back({MemoryCategory::comm_buffers, output_bytes});
    scatter.finishes_reduction = layout.replicas == 1;
    handover_.hand_over(StreamKind::reduce_scatter, scatter);
    int last = emit(std::move(scatter));
    handover_.hold(StreamKind::reduce_scatter, last, unit, std::move(scatter_holds));
    if (layout.replicas > 1) {
      // HSDP: the reduced shard is all-reduced across the replicas of the shard group, in place.
      Op across = make_op(OpKind::all_reduce, StreamKind::all_reduce, unit, micro);
      across.bytes = output_bytes;
      across.element_bytes = precision.reduce_bytes;
      across.finishes_reduction = true;
      across.group = GroupKind::replica;
      across.group_size = layout.replicas;
      across.group_spans_nodes = options_.world_size > options_.gpus_per_node;
      // A replica group takes one rank of every shard group: gpus_per_node / shard group of them share a node.
      across.group_ranks_per_node =
          std::min(layout.replicas, std::max(1, options_.gpus_per_node / std::max(1, layout.grad_group)));
      across.deps.push_back(last);
      handover_.hand_over(StreamKind::all_reduce, across);
      last = emit(std::move(across));
      if (!offload) handover_.hold(StreamKind::all_reduce, last, unit, {{MemoryCategory::comm_buffers, output_bytes}});
    }
    if (offload) {
      Op copy = make_op(OpKind::device_to_host, StreamKind::device_to_host, unit, micro);
      copy.bytes = output_bytes;
      copy.deps.push_back(last);
      copy.frees.push_back({MemoryCategory::comm_buffers, output_bytes});
      last = emit(std::move(copy));
    }
    reductions.push_back(last);
    last_reduction_[unit] = last;
    return;
  }
  // Replicated gradients (NO_SHARD, ZeRO-1): all-reduce over the world, in place (DDP-style).
  Op everywhere = make_op(OpKind::all_reduce, StreamKind::all_reduce, unit, micro);
  everywhere.bytes = layout.grad_elements * precision.reduce_bytes;
  everywhere.element_bytes = precision.reduce_bytes;
  everywhere.finishes_reduction = true;
  everywhere.group = GroupKind::world;
  everywhere.group_size = options_.world_size;
  everywhere.group_spans_nodes = options_.world_size > options_.gpus_per_node;
  everywhere.group_ranks_per_node = std::min(options_.world_size, options_.gpus_per_node);
  everywhere.deps.push_back(last_backward_);
  if (grad_copy > 0) everywhere.frees.push_back({MemoryCategory::unsharded_grads, grad_copy});
  if (options_.world_size > 1 || grad_copy > 0) {
    last_reduction_[unit] = emit(std::move(everywhere));
    reductions.push_back(last_reduction_[unit]);
  }
}

void Lowerer::optimizer_step(const std::vector<int>& reductions) {
  std::int64_t elements = 0;
  for (const auto& layout : layouts_) elements += layout.optimizer_shard_elements;
  Op step = optimizer_step_op(elements, plan_);
  step.deps = reductions;
  const int step_id = emit(std::move(step));
  // Note [Float8 training] (precision.h): with the float8 all-gather, torchao's precompute_float8_dynamic_scale_for_fsdp
  // runs after the optimizer step: one all-reduce (max) of every float8 weight's amax, an fp32 each, over the ranks
  // that shard them, before the next step's first gather.
  if (!plan_.training.precision.fp8_all_gather || options_.world_size == 1) return;
  std::int64_t weights = 0;
  for (const LayerSpec& layer : model_.layers) {
    if (layer.kind != LayerKind::transformer_block || !layer.kernels) continue;
    for (const ProjectionSpec& projection : layer.kernels->projections) weights += runs_in_fp8(layer, projection) ? 1 : 0;
  }
  if (weights == 0) return;
  Op amax = make_op(OpKind::all_reduce, StreamKind::all_reduce, -1, plan_.grad_accumulation_steps - 1);
  amax.bytes = weights * 4;
  amax.element_bytes = 4;
  amax.group = GroupKind::world;
  amax.group_size = options_.world_size;
  amax.group_spans_nodes = options_.world_size > options_.gpus_per_node;
  amax.group_ranks_per_node = std::min(options_.world_size, options_.gpus_per_node);
  amax.deps.push_back(step_id);
  emit(std::move(amax));
}

}  // namespace

Op optimizer_step_op(std::int64_t shard_elements, const Plan& plan) {
  Op step;
  step.kind = OpKind::optimizer_step;
  step.optimizer_elements = shard_elements;
  step.memory_bytes =
      static_cast<double>(shard_elements * optimizer_bytes_per_element(plan.training.precision, plan.training.optimizer));
  step.on_host = plan.offload.params || plan.offload.optimizer;
  return step;
}

StepSchedule lower_plan(const Plan& plan, const ModelSpec& model, const LoweringOptions& options) {
  validate_plan(plan, model, options.world_size, options.gpus_per_node);
  if (plan.tensor_parallel_degree > 1) {
    // Note [2-D plans] (tensor_parallel_view.h): FSDP's schedule of one TP rank over the data-parallel ranks.
    const DataParallelView view = data_parallel_view(plan, model, options.world_size, options.gpus_per_node);
    LoweringOptions data_parallel = options;
    data_parallel.world_size = view.world_size;
    data_parallel.gpus_per_node = view.gpus_per_node;
    StepSchedule schedule = lower_plan(view.plan, view.model, data_parallel);
    schedule.tensor_parallel_degree = plan.tensor_parallel_degree;
    return schedule;
  }
  StepSchedule schedule = Lowerer(plan, model, options).run();
  schedule.activation_tensor_bytes.reserve(model.layers.size());
  for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
    schedule.activation_tensor_bytes.push_back(largest_activation_tensor_bytes(plan, model, layer));
  }
  return schedule;
}

}  // namespace shardplan
