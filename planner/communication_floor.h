// Note [Communication floor] and Note [Step floor]: a lower bound of the time a knob setting's communication streams
// are busy in one step, and the step-time floor the plan search orders and prunes settings by, from it and the
// compute floor (compute_floor.cpp).
#pragma once

#include <array>

#include "cluster.h"
#include "hardware_profile.h"
#include "model_spec.h"
#include "schedule.h"
#include "search.h"

namespace shardplan {

// Note [Communication floor]: every plan of a knob setting, whatever its wrapping, kept units or prefetch depth,
// runs at least these collectives and copies in a step, each stream one op at a time:
//  - per micro-batch, every parameter gathered once (the forward's all-gather of each unit; a unit resharded after
//    forward gathers again in backward, a kept one does not) and its offloaded shard copied in once: every unit, the
//    root too, is resharded after each micro-batch's backward (Lowerer::backward_pass; FSDP2's reshard after
//    backward), so the next micro-batch's forward gathers it again — llama3-8b on 8 H100s at 4 micro-batches a step
//    gathers each of its 32 blocks 8 times and the root 4 (`simulate --global-batch 32`);
//  - per synchronising micro-batch (each one, or the last alone with --no-sync), every gradient reduced once (the
//    reduce-scatter, HSDP's all-reduce across replicas or the replicated all-reduce, the offloaded copy out);
//  - per micro-batch, the ops a layer's passes carry whatever the units (MoE all-to-alls, context parallelism's ring
//    sends), times the step's micro-batches.
// Of the per-micro-batch gathers and reductions, the whole model as the root unit alone (wrap_whole) moves the
// fewest bytes in the fewest collectives: its one flat parameter is padded once (Σ ceil(Ψ_i / g) >= ceil(Ψ / g);
// FSDP2 pads per parameter, the same in every wrapping), and a collective's cost, α + β·S in every tier
// (collective_cost.cpp: the latency plus the bus time of S + S½; a calibrated cell's α-β fit; a host copy's
// S / bandwidth), is subadditive in S. So the stream sums of that plan's one micro-batch lowering, times the
// micro-batches that repeat them, are at most any wrapping's, and the busiest stream's sum is at most the union of
// the communication streams' busy time (Note [Communication busy time] in op_placement.h), which collective
// slowdowns only lengthen. The same lowering's optimizer step on the compute stream (the step's update after
// its reductions; in host memory when offloaded, where it is most of a step) is likewise at most any wrapping's: its
// time is linear in the shard bytes it streams, least when padded once.
//
// Note [Regather floor]: a unit kept gathered after forward (FSDP2's reshard_after_forward=False, the root, every
// unit of a ZeRO-2 strategy) holds its gathered parameters until its backward, so where the last micro-batch's first
// backward op starts, every kept unit is gathered at once, beside the model states and the activations forward saved.
// A fitting plan's allocated bytes there are within the cap, so the units it keeps hold at most
//   keepable = cap − states floor − those activations (SettingFloors::turnaround_activation_bytes),
// and the rest of the model's gathered bytes, at least B − keepable with B the whole model's (padded once), is gathered
// again in backward over the same shard group — a second collective on the all-gather stream, subadditive as above.
// Every micro-batch's backward starts so (its forward gathered every unit again), so each regathers that much.
// A setting whose units reshard to a partial copy (a smaller group's gather) gets no such term, and a front end that
// cannot hold the whole model in one unit (FSDP1 without use_orig_params over frozen and trainable layers) no
// communication floor at all.
//
// Note [Gathers before reductions]: the streams' busy time is a union, and two parts of it never overlap. Every unit's
// forward all-gather of the first micro-batch ends before that unit's forward runs, so before the step's first
// backward op starts; every reduction (reduce-scatter, HSDP's or the replicated all-reduce) waits for a backward op,
// so starts after it. The first set alone keeps the all-gather stream busy at least the whole model's gather (one
// micro-batch's all-gather term above, subadditive as above); the second — every synchronising micro-batch's
// reductions — keeps the reduction streams busy at least the busier of their per-step terms. So the union is at
// least their sum — on a ZeRO-2 setting, whose units are never regathered, up to twice the busiest stream. The
// backward regathers are left out of the sum: a unit's may be issued before the first backward op (prefetched at the
// loss) and run beside the reductions.
struct CommunicationFloor {
  // Per step, by stream: the gathers and reductions every wrapping runs at least, over the step's micro-batches (the
  // per-micro-batch streams' layer ops are SettingFloors::micro_batch_stream_s, from the compute floor's lowering).
  std::array<double, kStreamCount> step_stream_s{};
  // Note [Gathers before reductions]: one micro-batch's all-gathers of the whole model.
  double first_micro_batch_gather_s = 0;
  double optimizer_step_s = 0;  // the compute stream's optimizer step (0 with the optimizer in backward)
  // Note [Regather floor]: the whole model's forward all-gather (bytes 0: none, or a partial copy regathers), and
  // how many micro-batches regather the rest of it.
  Op whole_gather;
  int micro_batches = 1;
  int compute_element_bytes = 2;
};
// It depends on the strategy, offload and micro-batch (the step's micro-batches) only: the search keys it so
// (Searcher::step_floor).
CommunicationFloor communication_floor(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                                       const TrainingConfig& training, const KnobSetting& knobs);
// Streams whose ops a layer's passes carry, the same in every wrapping, once per micro-batch (MoE all-to-alls,
// context parallelism's ring sends).
bool runs_per_micro_batch(StreamKind stream);
// The busiest stream's per-step ops plus its per-micro-batch ops of the whole step, the all-gather stream with the
// backward regather of what `keepable_bytes` cannot keep gathered (Note [Regather floor]; negative: none fits, so any
// bound holds — none is added).
double busiest_stream_floor_s(const CommunicationFloor& communication, const SettingFloors& floors,
                              std::int64_t keepable_bytes, const HardwareProfile& profile);
// Note [Gathers before reductions]: the whole model's forward gather and the busier reduction stream, one after the
// other.
double gathers_then_reductions_s(const CommunicationFloor& communication, const SettingFloors& floors);
// U: the larger of the two.
double communication_busy_floor_s(const CommunicationFloor& communication, const SettingFloors& floors,
                                  std::int64_t keepable_bytes, const HardwareProfile& profile);

// The least slowdown a compute op beside communication runs at (Note [Communication busy time]).
double least_overlap_compute_slowdown(const HardwareProfile& profile);

// Note [Step floor]: a lower bound of the simulated step of every plan of a setting, from its compute floor's kernels
// K and dispatch overheads D (SettingFloors), with the optimizer step counted in D (the compute stream runs it too;
// taking it as unstretched only lowers the bound), and a lower bound U of its communication busy time, with s the
// least overlap slowdown. The walk (OpWalk::place) stretches a compute op by (s − 1)·o, o the part of its kernels'
// interval that communication overlaps; communication may also overlap that stretch and the dispatch overhead
// without cost, and is exposed elsewhere. With Y = Σ s·o the time compute runs stretched:
//   step >= K + D + (1 − 1/s)·Y + max(0, U − Y − D) >= K + D + (1 − 1/s)·max(0, U − D)
// (the second for Y below and above U − D alike), and step >= U, the streams' own busy time. So for s >= 1
//   floor = max(U, K + D + (1 − 1/s)·max(0, U − D));
// a calibrated s < 1 (overlap speeds compute up) gives max(U, s·K + D), the compute floor's own.
double step_floor_s(const SettingFloors& floors, double communication_busy_s, double optimizer_step_s,
                    double least_slowdown);
// The step floor every plan of a setting with these floors and collectives takes, U being communication_busy_floor_s
// (units kept gathered bounded by `keepable_bytes`, Note [Regather floor]): what the search prunes a setting by
// (Searcher::step_floor), and a context-parallel setting by with its CP rank's floors (Note [Context-parallel floors]
// in search_context_parallel.cpp).
double setting_step_floor_s(const SettingFloors& floors, const CommunicationFloor& communication,
                            std::int64_t keepable_bytes, const HardwareProfile& profile);
// The same from one compute stream's kernels K and unstretched time D (dispatch overheads, an optimizer step) and a
// lower bound U of its communication busy time: a pipeline rank's (Note [Pipeline floor]).
double step_floor_s(double kernels_s, double dispatch_s, double communication_busy_s, double least_slowdown);

}  // namespace shardplan
