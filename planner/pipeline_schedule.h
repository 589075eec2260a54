// PipelineSchedule: a pipeline-parallel step as one StepSchedule program per pipeline rank, with the send/recv pairs
// that tie the programs together, and lower_pipeline, which lowers a plan into it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lowering.h"
#include "pipeline_order.h"
#include "schedule.h"
#include "wrapping.h"

namespace shardplan {

// Note [Pipeline programs]: with pipeline parallelism the ranks no longer run one program. The model is cut into
// pp × v stages (stage_partition.h); pipeline rank r holds stages r, r + pp, ... (torch's loop placement) and runs
// its stages' passes in the order its schedule gives (PipelineOrder, Note [Pipeline orders]). Its program is a
// StepSchedule over the layers of its stages with FSDP's ops as everywhere else, plus:
//  - a `recv` on the compute stream before each pass whose input comes from another stage (a forward's activation
//    from the stage before, a backward's gradient from the stage after), and a `send` on the p2p stream after each
//    pass whose output goes to one; each recv depends on its matching send in the other program (a cross
//    dependency), which is how bubbles arise: the simulator places all programs together (pipeline_simulator.h);
//  - FSDP as torchtitan runs it under PP: every unit kept gathered from its first forward to the stage's last
//    backward (torchtitan's reshard_after_forward "default" policy: off when pp is on), gradients accumulated
//    unsharded and reduced at the last micro-batch's backward (torch.distributed.pipelining's
//    backward_maybe_with_nosync: set_requires_gradient_sync and set_reshard_after_backward on the last backward);
//  - each program's world_size is the data-parallel ranks of one stage (dp_replicate × dp_shard × cp), which FSDP
//    shards over;
//  - under context parallelism the program is one CP rank's (Note [Context-parallel lowering]): its share of each
//    sequence, the ring's sends on its attention layers. They share the p2p stream with the pipeline's sends here,
//    where torch runs them on the CP and PP groups' own streams: a send of one waits for the other's (an upper bound).
// The boundary tensor a micro-batch passes is the hidden state, micro-batch × seq × hidden in the compute dtype
// (torchtitan's stage outputs for Llama: the decoder's `h`), and its gradient the same; under tensor parallelism each
// TP rank passes its sequence shard (torchtitan's TP plan ends every block with `attention.wo` / `feed_forward.w2`
// RowwiseParallel(output_layouts=Shard(1)) and local outputs, so `h` between blocks is the rank's seq / tp rows);
// under context parallelism the CP rank's seq / cp of them (torchtitan shards the inputs on the sequence before the
// pipeline schedule runs).
// Note [Pipeline buffers]: the memory torch.distributed.pipelining holds beside the layers' own
// (torch/distributed/pipelining/stage.py, PipelineStage._prepare_forward_infra and _create_grad_recv_info;
// _PipelineStageBase.forward_one_chunk):
//  - receive buffers made once, for every micro-batch of the step, and kept: per non-first stage one for the
//    activation of each micro-batch, per non-last stage one for the gradient of each (persistent, comm_buffers);
//  - the received activation is the stage's input, so its first layer's saved input lives in that buffer and is not
//    allocated again;
//  - a non-last stage's output stays referenced in the stage's forward cache (fwd_cache) until that micro-batch's
//    backward pops it (pytorch/pytorch#128910: unlike Megatron-LM's deallocate_output_tensor, the output's data is
//    kept), so each micro-batch in flight holds one more boundary tensor — counted until the backward of the stage's
//    last layer, the stage backward's first (in its layer's allocator size class, Note [Allocator size classes]).
//  - the last stage keeps every micro-batch's output (the logits) in its output_chunks from that micro-batch's
//    forward until step() returns them merged, after the rank's last action (pytorch/pytorch#159251, 2025-07: "the
//    forward output of each micro batch size keeps alive during the step period"; #138504 detaches them, so only the
//    tensors stay, not their graphs): allocated by the head's forward, released by a zero-time wait of the head's
//    layer after the rank's last pass. torch before pytorch/pytorch#153383 (2025-05) kept every stage's outputs so;
//    the model keeps the last stage's, which every version does (a non-last stage's are one boundary tensor each).
// pipeline_buffer_bytes gives the two tensors' sizes, which the lowering and the pipeline grid's memory floor share.
// A send is placed when its stage's pass has run and takes its link's time; NCCL's pairing with the receiver's
// posting is not modelled (the receiver posts its recv before it is needed in these orders).
// Note [Pipeline buffers]: the tensors one micro-batch passes between stages and the last stage keeps, for a pipeline
// rank whose plan trains `rank_training` (under context parallelism the CP rank's share of each sequence).
struct PipelineBufferBytes {
  // One boundary tensor: the micro-batch's rows of hidden states (one TP rank's sequence shard under sequence
  // parallelism, Note [Pipeline programs]) in the compute dtype.
  std::int64_t boundary_bytes = 0;
  // The last stage's output: every token's row of one TP rank's vocabulary shard (loss parallel) in the compute dtype;
  // 0 where the model has no vocabulary.
  std::int64_t output_bytes = 0;
};
PipelineBufferBytes pipeline_buffer_bytes(const ModelSpec& model, const TrainingConfig& rank_training,
                                          int tensor_parallel);

struct PipelineSchedule {
  PipelineOrder order;
  std::vector<LayerRange> stage_layers;  // per global stage, in the model's layer numbering
  std::vector<StepSchedule> programs;    // per pipeline rank
  struct CrossDependency {
    int program = 0;
    int op = 0;           // a recv of `program`
    int on_program = 0;
    int on_op = 0;        // the send it waits for
  };
  std::vector<CrossDependency> cross_dependencies;
};

struct PipelineLayout {
  PipelineScheduleKind schedule = PipelineScheduleKind::one_f_one_b;
  int degree = 1;           // pp
  int stages_per_rank = 1;  // v
  // The stages' layers, pp × v contiguous ranges covering the model in order (stage_partition.h gives them).
  std::vector<LayerRange> stages;
  // The whole world's degrees (pp = degree): each program's StepSchedule::parallel, and its TP degree places the
  // stages' ranks on nodes.
  ParallelDims dims;
};

// The pipeline of a plan (Note [Pipeline policy] in plan.h) laid out on `dims` = parallel_dims(plan, world): its
// schedule, degree, stages and the tensor-parallel ranks per data-parallel rank.
PipelineLayout pipeline_layout(const Plan& plan, const ParallelDims& dims);

// Note [Tied layers under a pipeline]: a layer tied to another (Llama 3.2's and Qwen2.5's lm_head reading
// embed_tokens' weight) needs both on one rank, while a pipeline puts the embedding on its first stage and the head
// on its last. torch.distributed.pipelining has no shared-weight mechanism across stages (Megatron-LM keeps a copy
// on the last stage and all-reduces the two gradients; no such op is modelled here), so the lowering refuses a tied
// model with more than one stage, and `plan` leaves pipeline plans out for it, saying why.
// "" when no layer of `model` is tied to another; else which ("layer 'lm_head' shares its weight with
// 'model.embed_tokens' (tied embeddings)").
std::string pipeline_tie(const ModelSpec& model);

// What pipeline rank `rank` holds (Note [Pipeline programs]): its stages' layers concatenated in stage order, the
// plan's units remapped onto them (every one kept gathered, the root too: reshard_after_forward is off under PP), and
// for each of its layers the layer of the whole model it is. Its program is lowered for exactly this model and plan,
// so a runner builds its layers and FSDP units from it.
struct PipelineRankModel {
  ModelSpec model;
  Plan plan;
  std::vector<std::size_t> whole_layers;  // per layer of `model`
  std::vector<std::size_t> stage_starts;  // per held stage: its first layer in `model`
};
PipelineRankModel pipeline_rank_model(const Plan& plan, const ModelSpec& model, const PipelineLayout& layout,
                                      int rank);

// `plan`: a plan of the whole model whose units each lie within one stage; its grad_accumulation_steps is the
// pipeline's micro-batch count. `options.world_size`: the data-parallel ranks of one stage. InputError naming the
// field when the layout does not fit the model or the plan, or the schedule's order cannot be lowered.
PipelineSchedule lower_pipeline(const Plan& plan, const ModelSpec& model, const LoweringOptions& options,
                                const PipelineLayout& layout);

}  // namespace shardplan
