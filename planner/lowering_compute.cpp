// The Lowerer's compute ops (Note [Lowering] in lowering.h): each layer pass's kernels, FLOPs and activation memory,
// and the all-to-alls around an expert-parallel MoE block (Note [Expert parallelism] in unit_layout.h).
#include <algorithm>
#include <cmath>
#include <memory>

#include "lowerer.h"
#include "unit_layout.h"

namespace shardplan::lowering_internal {  // Note [Lowering] in lowering.h

// The layer's activation bytes and checkpointing come from unit_layout.h, which the closed-form bound shares.
std::int64_t Lowerer::kept_bytes(std::size_t layer) const {
  const std::int64_t kept = kept_activation_bytes(model_, plan_.training, layer, checkpointing(layer));
  // Note [Pipeline buffers]: a stage's first layer saves its input, which lives in the stage's receive buffer.
  const std::int64_t received = layer < received_input_bytes_.size() ? received_input_bytes_[layer] : 0;
  return std::max<std::int64_t>(kept - received, 0);
}

ActivationCheckpointing Lowerer::checkpointing(std::size_t layer) const {
  return layer_checkpointing_of(plan_, model_, layer);
}

const Lowerer::LayerFacts& Lowerer::layer_facts(std::size_t layer) {
  if (layer_facts_.empty()) layer_facts_.resize(model_.layers.size());
  auto& facts = layer_facts_[layer];
  if (facts) return *facts;
  LayerFacts built;
  built.checkpointing = checkpointing(layer);
  built.kept_bytes = kept_bytes(layer);
  built.forward_workspace_bytes = forward_workspace_bytes(plan_, model_, layer);
  built.backward_workspace_bytes = backward_workspace_bytes(plan_, model_, layer);
  built.recomputed_bytes = recomputed_activation_bytes(plan_, model_, layer);
  built.dequantized_weight_bytes = dequantized_weight_bytes(plan_, model_, layer);
  // Model FLOPs (MFU's numerator, Korthikanti et al. 2022 App. A): forward once and backward twice the forward's
  // FLOPs, whatever the kernels do beyond that (a flash backward's recompute, activation recompute).
  // Frozen weights skip their weight gradients (LayerSpec::backward_flops_per_token).
  const LayerSpec& spec = model_.layers[layer];
  const auto tokens = static_cast<double>(plan_.training.tokens_per_micro_batch(spec));
  // Note [Context-parallel lowering]: the attention spans the whole sequence, not the rank's share of it.
  const std::int64_t seq = ring_.enabled() ? ring_.seq_len : plan_.training.seq_len;
  const bool causal = plan_.training.flash_attention;
  built.forward_model_flops = tokens * spec.forward_flops_per_token(seq, causal);
  built.backward_model_flops = tokens * spec.backward_flops_per_token(seq, causal);
  facts = built;
  return *facts;
}

// The pass's kernels, built once per layer, pass and checkpointing mode of this lowering and shared by its ops —
// and by every other layer pass with equal kernels (Note [Durations by shape] in op_durations.h: the simulator prices
// each object once). Equal passes come in runs (a model's identical blocks, a recompute equal to its forward), so a
// new one is compared with the latest few distinct ones only.
std::shared_ptr<const PassKernels> Lowerer::kernels_of(std::size_t layer, ComputePass pass,
                                                       ActivationCheckpointing mode) {
  constexpr std::size_t kInternedCompared = 8;
  auto& slot = kernel_cache_[static_cast<std::size_t>(pass) * kCheckpointingModes + static_cast<std::size_t>(mode)];
  if (slot.empty()) slot.resize(model_.layers.size());
  auto& kernels = slot[layer];
  if (kernels) return kernels;
  PassKernels built = pass_kernels(model_, layer, plan_.training, pass, mode);
  if (ring_.enabled()) {
    // Note [Context-parallel lowering]: pass_kernels on the rank's s/cp tokens gives one ring step's attention; the
    // ring runs cp of them, and the eager tensor ops around them (Note [Ring tensor traffic]).
    const std::vector<AttentionCall> step = built.attention;
    for (int more = 1; more < ring_.degree; ++more) {
      built.attention.insert(built.attention.end(), step.begin(), step.end());
    }
    if (const auto& attention = ring_attention(layer); attention && !step.empty()) {
      const bool backward = pass == ComputePass::backward || pass == ComputePass::backward_input;
      built.memory_bytes += backward ? attention->backward_tensor_bytes : attention->forward_tensor_bytes;
      built.memory_kernels += backward ? attention->backward_tensor_kernels : attention->forward_tensor_kernels;
    }
  }
  for (std::size_t back = 1; back <= std::min(kInternedCompared, distinct_kernels_.size()); ++back) {
    const auto& earlier = distinct_kernels_[distinct_kernels_.size() - back];
    if (*earlier == built) return kernels = earlier;
  }
  kernels = std::make_shared<const PassKernels>(std::move(built));
  distinct_kernels_.push_back(kernels);
  return kernels;
}

double Lowerer::flops_of(std::size_t layer, ComputePass pass, ActivationCheckpointing mode,
                         const PassKernels& kernels) {
  auto& slot = flops_cache_[static_cast<std::size_t>(pass) * kCheckpointingModes + static_cast<std::size_t>(mode)];
  if (slot.empty()) slot.assign(model_.layers.size(), -1.0);
  double& flops = slot[layer];
  if (flops < 0) flops = kernels.flops();
  return flops;
}

int Lowerer::emit_compute(OpKind kind, std::size_t layer, int unit, int micro, ComputePass pass) {
  const int before = last_compute_;
  const LayerFacts& facts = layer_facts(layer);
  Op op;
  op.kind = kind;
  op.unit = unit;
  op.layer = static_cast<int>(layer);
  op.micro_batch = micro;
  op.checkpointing = facts.checkpointing;
  op.kernels = kernels_of(layer, pass, op.checkpointing);
  op.flops = flops_of(layer, pass, op.checkpointing, *op.kernels);
  schedule_.hardware_flops_per_rank += op.flops;
  schedule_.model_flops_per_rank += model_flops_of(layer, pass);
  // Note [Context-parallel lowering]: the ring's sends are issued before the pass they overlap; only a full
  // recompute runs the ring again (torchtitan's selective-op policy saves SDPA's output). A split backward's
  // attention is in its input part (Note [Split backward]), which runs the backward's ring.
  const bool rings = ring_.enabled() && pass != ComputePass::backward_weight &&
                     (pass != ComputePass::recompute || facts.checkpointing == ActivationCheckpointing::full);
  const ComputePass ring_pass = pass == ComputePass::backward_input ? ComputePass::backward : pass;
  const int ring_sends = rings ? emit_ring_sends(layer, unit, micro, ring_pass, before) : -1;
  if (kind == OpKind::forward) {
    // Note [Workspaces] (unit_layout.h): what the op materialises beyond what it keeps is freed at its end.
    const std::int64_t workspace = facts.forward_workspace_bytes;
    op.allocates.push_back({MemoryCategory::activations, facts.kept_bytes + workspace});
    if (workspace > 0) op.frees.push_back({MemoryCategory::activations, workspace});
  }
  const int id = emit(std::move(op));
  // torchtitan's selective-op policy saves the all-to-alls' outputs (its _save_list holds all_to_all_single), and
  // attention-core recompute does not reach the MLP: only full recompute exchanges the tokens again. The token
  // gradients travel with a split backward's input part.
  if (pass != ComputePass::backward_weight &&
      (pass != ComputePass::recompute || facts.checkpointing == ActivationCheckpointing::full)) {
    emit_all_to_alls(layer, unit, micro, id);
  }
  finish_ring(layer, unit, micro, ring_pass, id, ring_sends);
  return id;
}

// Model FLOPs (LayerFacts) of one pass; a recompute adds none. A split backward's weight part counts its dW GEMMs'
// FLOPs, each one 2·tokens·in·out as the model's weight-gradient FLOPs are, and the input part the rest of the
// backward's (Note [Split backward]), so the two sum to the whole backward's.
double Lowerer::model_flops_of(std::size_t layer, ComputePass pass) {
  const LayerFacts& facts = layer_facts(layer);
  switch (pass) {
    case ComputePass::forward: return facts.forward_model_flops;
    case ComputePass::backward: return facts.backward_model_flops;
    case ComputePass::recompute: return 0.0;
    case ComputePass::backward_input:
    case ComputePass::backward_weight: {
      const auto weight = kernels_of(layer, ComputePass::backward_weight, facts.checkpointing);
      const double weight_flops = flops_of(layer, ComputePass::backward_weight, facts.checkpointing, *weight);
      return pass == ComputePass::backward_weight ? weight_flops : facts.backward_model_flops - weight_flops;
    }
  }
  return 0.0;
}

// Note [Expert parallelism] (unit_layout.h): an MoE block's dispatch and combine over its EP group, after the
// block's compute op `after`; the next compute op waits for the combine.
void Lowerer::emit_all_to_alls(std::size_t layer, int unit, int micro, int after) {
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

}  // namespace shardplan::lowering_internal
