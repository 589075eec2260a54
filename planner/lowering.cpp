// Lowering of a Plan into a StepSchedule: lower_plan, and the Lowerer's passes, which walk the segments in schedule
// order (Note [Schedule order]); where every all-gather, compute op, free and reduction they emit goes, with memory, is
// in lowering_gathers.cpp, lowering_compute.cpp and lowering_reductions.cpp.
#include "lowering.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "errors.h"
#include "lowerer.h"
#include "memory_effects.h"
#include "tensor_parallel_view.h"
#include "unit_layout.h"

namespace shardplan {
namespace lowering_internal {  // Note [Lowering] in lowering.h

Lowerer::Lowerer(const Plan& plan, const ModelSpec& model, const LoweringOptions& options,
                 const std::vector<std::size_t>& stage_starts)
    : plan_(plan), model_(model), options_(options),
      layouts_(unit_layouts(plan, model, options.world_size, options.gpus_per_node)),
      layer_owner_(model.layers.size(), 0) {
  // Each layer's unit: the first non-root unit whose range holds it, else the root (0).
  for (std::size_t unit = plan.units.size(); unit-- > 1;) {
    const auto& range = plan.units[unit].layers;
    for (std::size_t layer = range.begin; layer < std::min(range.end, layer_owner_.size()); ++layer) {
      layer_owner_[layer] = static_cast<int>(unit);
    }
  }
  for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
    const int unit = owner_of(layer);
    const bool stage_starts_here = std::find(stage_starts.begin(), stage_starts.end(), layer) != stage_starts.end();
    if (segments_.empty() || segments_.back().unit != unit || stage_starts_here) {
      segments_.push_back({unit, layer, layer});
    } else {
      segments_.back().last_layer = layer;
    }
  }
  // Each unit's last segment in forward (its highest) and in backward (its lowest).
  std::vector<std::size_t> highest(plan.units.size(), 0), lowest(plan.units.size(), segments_.size());
  for (std::size_t index = 0; index < segments_.size(); ++index) {
    const auto unit = static_cast<std::size_t>(segments_[index].unit);
    highest[unit] = index;
    lowest[unit] = std::min(lowest[unit], index);
  }
  for (std::size_t index = 0; index < segments_.size(); ++index) {
    const auto unit = static_cast<std::size_t>(segments_[index].unit);
    segments_[index].last_in_forward = highest[unit] == index;
    segments_[index].last_in_backward = lowest[unit] == index;
  }
}

void Lowerer::begin_step() {
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
}

StepSchedule Lowerer::run() {
  begin_step();
  // Room for the ops up front (a layer's forward, recompute and backward, a unit's gathers, waits, frees and
  // reductions, per micro-batch): growing the list moves every Op, with its vectors, at each doubling.
  schedule_.ops.reserve(static_cast<std::size_t>(plan_.grad_accumulation_steps) *
                            (3 * model_.layers.size() + 8 * layouts_.size()) +
                        16);
  std::vector<int> reductions;
  for (int micro = 0; micro < plan_.grad_accumulation_steps; ++micro) {
    const bool synchronise = micro + 1 == plan_.grad_accumulation_steps || !plan_.training.no_sync_accumulation;
    forward_pass(micro);
    reductions = backward_pass(micro, synchronise);
  }
  optimizer_step(reductions);
  return std::move(schedule_);
}

int Lowerer::owner_of(std::size_t layer) const { return layer_owner_[layer]; }

int Lowerer::emit(Op op) {
  op.id = static_cast<int>(schedule_.ops.size());
  op.stage = current_stage_;
  if (op.stream == StreamKind::compute && compute_waits_for_ >= 0) {
    op.deps.push_back(compute_waits_for_);  // Note [Expert parallelism]: the tokens are back from their experts
    compute_waits_for_ = -1;
  }
  if (op.stream == StreamKind::compute) last_compute_ = op.id;
  schedule_.ops.push_back(std::move(op));
  return schedule_.ops.back().id;
}

// Note [Fragments] (schedule.h): the next op begins a fragment.
void Lowerer::mark(int micro, FragmentPass pass, int unit) {
  schedule_.fragments.push_back({static_cast<int>(schedule_.ops.size()), micro, pass, unit});
}

void Lowerer::forward_pass(int micro) {
  start_pass();
  mark(micro, FragmentPass::step, -1);
  forward_layers(micro, 0, model_.layers.size() - 1);
}

void Lowerer::forward_layers(int micro, std::size_t first, std::size_t last) {
  std::vector<bool> started(layouts_.size(), false);
  int copy_out = -1, earlier_copy_out = -1;  // Note [Activation offloading]: the latest two layers' copies out
  for (std::size_t index = 0; index < segments_.size(); ++index) {
    const Segment& segment = segments_[index];
    if (segment.first_layer < first || segment.last_layer > last) continue;
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
      // Note [Activation offloading]: a layer's forward waits for the copy out of the layer two before it.
      if (earlier_copy_out >= 0) schedule_.ops[static_cast<std::size_t>(id)].deps.push_back(earlier_copy_out);
      if (const int copy = emit_copy_out(layer, unit, micro, id); copy >= 0) {
        earlier_copy_out = copy_out;
        copy_out = copy;
      }
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

std::vector<int> Lowerer::backward_pass(int micro, bool synchronise) {
  std::vector<int> reductions;
  backward_layers(micro, synchronise, true, 0, model_.layers.size() - 1, reductions);
  return reductions;
}

void Lowerer::backward_layers(int micro, bool synchronise, bool reshard, std::size_t first, std::size_t last,
                              std::vector<int>& reductions, ComputePass part) {
  // Units kept gathered from forward stay so; every other unit is gathered again (the pass state carries over).
  pending_.clear();
  for (std::size_t unit = 0; unit < layouts_.size(); ++unit) {
    waited_[unit] = gathered_[unit];  // nothing to wait for on a unit still gathered since forward
  }
  std::vector<bool> started(layouts_.size(), false);
  grads_produced_.assign(layouts_.size(), false);
  copied_in_.assign(model_.layers.size(), -1);
  for (std::size_t back = segments_.size(); back-- > 0;) {
    const Segment& segment = segments_[back];
    if (segment.first_layer < first || segment.last_layer > last) continue;
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
      if (part == ComputePass::backward_weight) {
        const int id = emit_backward_weight(layer, unit, micro);
        produce_grads(unit, schedule_.ops[static_cast<std::size_t>(id)]);
        last_backward_ = id;
        continue;
      }
      // Note [Activation offloading]: the layer's copy back, and the next layer's issued beside its backward.
      const int copied_in = emit_copy_in(layer, unit, micro);
      if (layer > first) emit_copy_in(layer - 1, owner_of(layer - 1), micro);
      const bool input_part = part == ComputePass::backward_input;
      const int id = emit_layer_backward(layer, unit, micro, copied_in, input_part);
      if (input_part) continue;
      produce_grads(unit, schedule_.ops[static_cast<std::size_t>(id)]);
      last_backward_ = id;
    }
    // A split backward's input part neither reshards nor reduces: the weight part has yet to write the gradients.
    if (part == ComputePass::backward_input) continue;
    if (last_segment_of(unit, back, false)) {
      if (gathered_[unit] && reshard) emit_free(unit, micro, true);
      if (synchronise) {
        wait_for_reduce_scatter(unit, micro);  // Note [Reduce-scatter waits]
        const std::size_t reduced_before = reductions.size();
        reduce(unit, micro, reductions);
        step_in_backward(unit, micro, reductions.size() > reduced_before ? reductions.back() : -1);
      }
    }
  }
  // Note [Reduce-scatter waits]: the root's final backward callback waits for the pass's last reduce-scatter.
  if (synchronise) wait_for_reduce_scatter(0, micro);
  handover_.release_at_ends(schedule_.ops);
}

// A layer's backward op — whole, or a split backward's input part — after its recompute: what it waits for, its
// workspace, and what it frees: everything the layer kept and rebuilt for a whole backward; what a checkpoint rebuilt
// for an input part, which also holds the output gradients kept for the weight part (Note [Split backward lowering]).
int Lowerer::emit_layer_backward(std::size_t layer, int unit, int micro, int copied_in, bool input_part) {
  const LayerFacts& facts = layer_facts(layer);
  emit_recompute(layer, unit, micro, copied_in, false);
  const int id = emit_compute(input_part ? OpKind::backward_input : OpKind::backward, layer, unit, micro,
                              input_part ? ComputePass::backward_input : ComputePass::backward);
  auto& op = schedule_.ops[static_cast<std::size_t>(id)];
  take_pending_alloc(op);
  if (copied_in >= 0) op.deps.push_back(copied_in);
  const std::int64_t workspace = facts.backward_workspace_bytes;
  op.kept_gradient_bytes = input_part ? kept_weight_gradient_bytes(layer) : 0;
  if (workspace + op.kept_gradient_bytes > 0) {
    op.allocates.push_back({MemoryCategory::activations, workspace + op.kept_gradient_bytes});
  }
  const std::int64_t kept = input_part ? 0 : facts.kept_bytes;
  op.frees.push_back({MemoryCategory::activations, kept + facts.recomputed_bytes + workspace});
  return id;
}

// A checkpointed layer's recompute before its backward (nothing when it rebuilds nothing); `transient`: its rebuilt
// activations are freed at its end (Note [Split backward lowering]), else by the backward op after it.
void Lowerer::emit_recompute(std::size_t layer, int unit, int micro, int copied_in, bool transient) {
  const LayerFacts& facts = layer_facts(layer);
  const std::int64_t rebuilt = facts.recomputed_bytes;
  if (rebuilt <= 0) return;
  const int id = emit_compute(OpKind::recompute, layer, unit, micro, ComputePass::recompute);
  auto& op = schedule_.ops[static_cast<std::size_t>(id)];
  op.allocates.push_back({MemoryCategory::activations, rebuilt});
  if (transient) op.frees.push_back({MemoryCategory::activations, rebuilt});
  if (copied_in >= 0) op.deps.push_back(copied_in);
  // Note [Workspaces]: QLoRA's dequantised weight during each recomputed GEMM.
  if (const std::int64_t dequantized = facts.dequantized_weight_bytes; dequantized > 0) {
    op.allocates.push_back({MemoryCategory::activations, dequantized});
    op.frees.push_back({MemoryCategory::activations, dequantized});
  }
  take_pending_alloc(op);
}

// The gradient writes of `unit`'s first backward op this micro-batch (`op`, a whole backward or a weight part).
void Lowerer::produce_grads(int unit, Op& op) {
  const auto& layout = layouts_[static_cast<std::size_t>(unit)];
  if (!grads_produced_[unit]) {
    // The unit's first gradient write of this micro-batch reuses the buffer its previous reduction reads
    // (FSDP makes the compute stream wait for that reduction before backward touches it again).
    grads_produced_[unit] = true;
    if (last_reduction_[unit] >= 0) op.deps.push_back(last_reduction_[unit]);
    // Note [Optimizer in backward]: a gradient written in place exists from here until the unit's own step.
    if (plan_.training.optimizer_in_backward && !layout.grad_copies && layout.grad_elements > 0) {
      op.allocates.push_back({MemoryCategory::sharded_grads, in_backward_grad_bytes(layout, plan_)});
    }
  }
  if (layout.grad_copies && !grads_allocated_[unit]) {
    op.allocates.push_back({MemoryCategory::unsharded_grads, layout.grad_copy_bytes});
    op.zeroed_bytes = layout.grad_copy_bytes;
    grads_allocated_[unit] = true;
  }
}

// Note [Reduce-scatter waits]: FSDP2's post-backward makes the compute stream wait for the previous reduce-scatter
// before it issues its own (FSDPParamGroup.post_backward: `current_stream().wait_event(reduce_scatter_state.event)`,
// so that buffer can go), and the root's final backward callback waits for the last one of the pass
// (FSDPState._root_post_backward_final_callback, when is_last_backward: the same wait, then reduce_scatter_state =
// None), torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py and _fsdp_state.py. So compute after a unit's
// backward cannot run ahead of the reduce-scatter before it, and a micro-batch's last reduce-scatter (the root's)
// ends before the next micro-batch's forward or the optimizer step. A `wait` op on the compute stream, depending on
// that reduce-scatter, stands for it. FSDP1 makes no such wait (its reductions run on the post-backward stream, the
// buffers kept by record_stream): plans with fsdp version 1 have none.
void Lowerer::wait_for_reduce_scatter(int unit, int micro) {
  if (plan_.training.finetune.fsdp.version == 1 || last_reduce_scatter_ < 0) return;
  Op wait = make_op(OpKind::wait, StreamKind::compute, unit, micro);
  wait.deps.push_back(last_reduce_scatter_);
  emit(std::move(wait));
  last_reduce_scatter_ = -1;
}

void Lowerer::take_pending_alloc(Op& op) {
  if (pending_alloc_.bytes > 0) op.allocates.push_back(pending_alloc_);
  pending_alloc_ = {MemoryCategory::activations, 0};
}

// The unit's last segment in this pass: in forward the highest index, in backward the lowest.
bool Lowerer::last_segment_of(int unit, std::size_t index, bool forward) const {
  const Segment& segment = segments_[index];
  SHARDPLAN_CHECK(segment.unit == unit, "a segment asked about another unit");
  return forward ? segment.last_in_forward : segment.last_in_backward;
}

void finish_lowering(StepSchedule& schedule, const Plan& plan, const ModelSpec& model, bool flatten_memory_effects) {
  schedule.activation_tensor_bytes.clear();
  schedule.activation_tensor_bytes.reserve(model.layers.size());
  for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
    schedule.activation_tensor_bytes.push_back(largest_activation_tensor_bytes(plan, model, layer));
  }
  if (flatten_memory_effects) schedule.memory_effects = std::make_shared<const MemoryEffects>(memory_effects(schedule));
}

}  // namespace lowering_internal

StepSchedule lower_plan(const Plan& plan, const ModelSpec& model, const LoweringOptions& options) {
  if (plan.pipeline.enabled()) {
    throw InputError("plan.pipeline: a plan with pipeline degree " + std::to_string(plan.pipeline.degree) +
                     " lowers into one program per pipeline rank (lower_pipeline); expected degree 1 here");
  }
  validate_plan(plan, model, options.world_size, options.gpus_per_node);
  const ParallelDims dims = parallel_dims(plan, options.world_size);
  if (dims.tp() > 1) {
    // Note [2-D plans] (tensor_parallel_view.h): FSDP's schedule of one TP rank over the data-parallel ranks.
    const DataParallelView view = data_parallel_view(plan, model, dims, options.gpus_per_node);
    LoweringOptions data_parallel = options;
    data_parallel.world_size = view.world_size();
    data_parallel.gpus_per_node = view.gpus_per_node;
    StepSchedule schedule = lower_plan(view.plan, view.model, data_parallel);
    schedule.parallel = dims;
    return schedule;
  }
  if (plan.context_parallel.enabled()) {
    // Note [Context-parallel lowering] (context_parallel_lowering.h): one CP rank's program, its share of each
    // sequence and the ring's exchanges.
    const Plan rank_plan = context_parallel_rank_plan(plan);
    lowering_internal::Lowerer lowerer(rank_plan, model, options);
    lowerer.set_ring({plan.context_parallel.degree, plan.training.seq_len});
    StepSchedule schedule = lowerer.run();
    schedule.parallel = dims;
    lowering_internal::finish_lowering(schedule, rank_plan, model, options.flatten_memory_effects);
    return schedule;
  }
  StepSchedule schedule = lowering_internal::Lowerer(plan, model, options).run();
  schedule.parallel = dims;
  lowering_internal::finish_lowering(schedule, plan, model, options.flatten_memory_effects);
  return schedule;
}

}  // namespace shardplan
