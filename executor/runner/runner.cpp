// Runner: set-up (lowering, checks, groups, sharded init), gathering the model back, expected collective counts.
#include "runner.h"

#include <algorithm>
#include <source_location>
#include <string>

#include "errors.h"
#include "rank_program.h"
#include "runner_support.h"
#include "tensor_parallel_group.h"
#include "tensor_parallel_model.h"
#include "unit_layout.h"

namespace shardplan::runner {

namespace {

// The model layers of each plan unit in the order lowering's UnitInfo lists them (the root's may be non-adjacent).
std::vector<std::vector<std::size_t>> unit_layers(const Plan& plan, const ModelSpec& model) {
  std::vector<std::vector<std::size_t>> layers;
  for (const UnitInfo& unit : plan_units(plan, model)) layers.push_back(unit.layers);
  return layers;
}

// The layers `whole_layers` of a whole-model buffer (`whole` laid out as `whole_layout`), concatenated as `part`
// lays them out: a pipeline rank's stages' share of the reference init (Note [Pipeline runner]).
std::vector<float> layers_of(const runtime::ModelLayout& whole_layout, const runtime::ModelLayout& part,
                             const std::vector<std::size_t>& whole_layers, const std::vector<float>& whole) {
  std::vector<float> out(static_cast<std::size_t>(part.element_count), 0.0f);
  for (std::size_t layer = 0; layer < whole_layers.size(); ++layer) {
    const std::int64_t count = part.layers[layer].element_count;
    const auto from = whole.begin() + whole_layout.layer_offsets_elements[whole_layers[layer]];
    std::copy(from, from + count, out.begin() + part.layer_offsets_elements[layer]);
  }
  return out;
}

// The layers `whole_layers` of `model`, unsplit: a pipeline rank's stages at the whole model's widths (the model its
// TP slice is cut from, Note [Pipeline runner]); the model itself for the identity.
ModelSpec held_layers_model(const ModelSpec& model, const std::vector<std::size_t>& whole_layers) {
  ModelSpec held = model;
  held.layers.clear();
  for (std::size_t layer : whole_layers) held.layers.push_back(model.layers[layer]);
  return held;
}

}  // namespace

Runner::Runner(const ModelSpec& model, const Plan& plan, comm::Communicator& world, RunnerOptions options)
    : model_(model), plan_(plan), options_(options), rank_(world.group().world_ranks.at(static_cast<std::size_t>(world.rank()))),
      world_size_(world.size()), rank_model_(model),
      lowered_plan_(plan),
      tracker_(rank_, clock_) {
  const int gpus_per_node = options_.gpus_per_node > 0 ? options_.gpus_per_node : world_size_;
  std::vector<UnitLayout> layouts;
  // InputError carrying this rank (every rank throws the same one, before or after the same collectives).
  const auto with_rank = [this](const auto& body) {
    try {
      body();
    } catch (const InputError& error) {
      if (error.rank() >= 0) throw;
      throw InputError(error.what(), error.where(), rank_);
    }
  };
  with_rank([&] {
    // The plan as the user wrote it, for the whole world (Note [Tensor parallel degree] in plan.h), first: its errors
    // name the plan's fields (lower_plan checks a plan without TP, after check_executable) ...
    if (plan_.tensor_parallel_degree > 1) validate_plan(plan_, model_, world_size_, gpus_per_node);
    // ... then this rank's place in the world (Note [ParallelDims]) ...
    const ParallelDims dims = parallel_dims(plan_, world_size_);
    const int tp = dims.tp();
    // ... the CPU kernels' checks (InputError when heads, FFN or vocabulary don't divide) ...
    if (tp > 1) (void)runtime::tensor_parallel_rank_model(model_, tp);
    // ... a pipeline plan whole (a tied head, which no pipeline lowers: Note [Tied layers under a pipeline]) ...
    if (dims.pp() > 1) validate_plan(plan_, model_, world_size_, gpus_per_node);
    // ... and its program (Note [Rank program]): the model and units this rank holds, checked executable (with a
    // pipeline the rank's own plan, its units remapped onto its stages; else the user's), then its schedule.
    const auto check = [&](const RankProgram& held) {
      check_executable(dims.pp() > 1 ? held.plan : plan_, held.layouts, rank_,
                       ExecutorSupport{"CPU", {"fp32"}, true, true, true});
    };
    RankProgram program = lower_rank_program(plan_, model_, dims, gpus_per_node, world.rank(), check);
    dims_ = program.dims;
    placement_ = std::move(program.placement);
    schedule_ = std::move(program.schedule);
    rank_model_ = std::move(program.model);
    lowered_plan_ = std::move(program.plan);
    whole_layers_ = std::move(program.whole_layers);
    layouts = std::move(program.layouts);
    const std::int64_t whole_tokens = schedule_.sequences_per_micro_batch * schedule_.seq_len;
    if (whole_tokens % tp != 0) {
      throw InputError("plan: a micro-batch of " + std::to_string(whole_tokens) + " tokens does not split over " +
                       std::to_string(tp) + " tensor-parallel ranks (sequence parallelism)");
    }
    layout_ = runtime::model_layout(rank_model_);
    whole_layout_ = runtime::model_layout(model_);
    held_layout_ = runtime::model_layout(held_layers_model(model_, whole_layers_));
    (void)runtime::decoder_dims(model_);  // InputError for a model the CPU kernels cannot run
    if (tp == 1 && dims_.cp() == 1) {
      for (std::size_t layer : whole_layers_) kernels_.push_back(runtime::make_layer_kernel(model_, layer));
    }
  });
  groups_ = std::make_unique<RunnerGroups>(world, layouts, placement_.groups);
  if (dims_.pp() > 1) {
    with_rank([&] {
      pipeline_ = std::make_unique<PipelineP2p>(*groups_->pipeline(), dims_.pp() * plan_.pipeline.stages_per_rank,
                                                schedule_.micro_batches);
      // Note [Pipeline buffers]: every micro-batch's receive buffers of the rank's stages (torch's loop placement:
      // stages r, r + pp, ...), made once and kept; one sequence shard each under tensor parallelism.
      const int stages = dims_.pp() * plan_.pipeline.stages_per_rank;
      const std::int64_t elements = schedule_.sequences_per_micro_batch * schedule_.seq_len / dims_.tp() *
                                    model_.hidden_size;
      for (int stage = pipeline_rank(); stage < stages; stage += dims_.pp()) {
        for (int micro = 0; micro < schedule_.micro_batches; ++micro) {
          for (const bool forward : {true, false}) {
            if (forward ? stage == 0 : stage + 1 == stages) continue;
            receive_buffers_.emplace(std::tuple{stage, micro, forward},
                                     TrackedBuffer(tracker_, MemoryCategory::comm_buffers, elements));
          }
        }
      }
    });
  }
  if (dims_.cp() > 1) {  // Note [Context-parallel runner]
    context_parallel_ = std::make_unique<CommContextParallelGroup>(*groups_->context_parallel());
  }
  if (dims_.tp() > 1) {
    // The TP group's micro-batch: with CP beside it, one CP rank's rows of each sequence (schedule_.seq_len is the
    // CP rank's), which the blocks' attention passes around the ring.
    tensor_parallel_ = std::make_unique<CommTensorParallelGroup>(*groups_->tensor_parallel());
    const runtime::AttentionShape whole{static_cast<int>(schedule_.sequences_per_micro_batch),
                                        static_cast<int>(schedule_.seq_len)};
    with_rank([&] {
      for (std::size_t index = 0; index < rank_model_.layers.size(); ++index) {
        kernels_.push_back(runtime::make_tensor_parallel_layer_kernel(rank_model_, index, whole, *tensor_parallel_,
                                                                      context_parallel_.get()));
      }
    });
  } else if (context_parallel_) {
    with_rank([&] {
      for (std::size_t layer : whole_layers_) {
        kernels_.push_back(runtime::make_context_parallel_layer_kernel(model_, layer, *context_parallel_));
      }
    });
  }
  runtime::InitOptions init;
  init.seed = options_.seed;
  // With tensor parallelism every rank starts from its slice of the whole model's init, so the TP ranks together hold
  // exactly the reference's parameters (Note [Sharded init] holds per whole-model element, not per slice element).
  std::vector<float> rank_init;
  if (pipeline_ || dims_.tp() > 1) {
    // Its stages' share of the whole model's init (all of it without a pipeline), then its TP rank's slice of those
    // layers: the ranks together start from the reference's parameters.
    std::vector<float> held = layers_of(whole_layout_, held_layout_, whole_layers_,
                                        runtime::init_model_parameters(whole_layout_, init));
    if (dims_.tp() > 1) {
      rank_init.resize(static_cast<std::size_t>(layout_.element_count));
      runtime::extract_tensor_parallel_rank(held_layout_, layout_, dims_.tp(), tensor_parallel_rank(), held, rank_init);
    } else {
      rank_init = std::move(held);
    }
  }
  const auto layers = unit_layers(lowered_plan_, rank_model_);
  for (std::size_t unit = 0; unit < layouts.size(); ++unit) {
    const int group = layouts[unit].param_group;
    // Shard groups are consecutive ranks of the DP group (make_shard_group), so the index inside the group is its rank.
    const int shard_index = group > 1 ? groups_->shard(group).rank() : 0;
    // Note [Frozen shards] (flat_param.h): frozen tensors after the trainable region, the gradient's padded size.
    const std::int64_t trainable_region = layouts[unit].grad_elements > 0 ? layouts[unit].grad_padded_elements : 0;
    params_.push_back(std::make_unique<FlatParam>(
        layout_, runtime::unit_param_layout(layout_, layers[unit], trainable_region), layouts[unit], shard_index,
        init, tracker_));
    if (!rank_init.empty()) params_.back()->load_shard(layout_, rank_init);
  }
  for (auto& param : params_) param_groups_.emplace_back(*param, *groups_, dims_.data_parallel_world_size());
}

Runner::~Runner() = default;

std::vector<float> Runner::gather_parameters() {
  std::vector<float> model_flat(static_cast<std::size_t>(layout_.element_count), 0.0f);  // this TP rank's
  for (auto& param : params_) {
    const UnitLayout& sizes = param->sizes();
    if (!sizes.gathers) {
      param->scatter_into_model(layout_, param->shard(), model_flat);
      continue;
    }
    std::vector<float> gathered(static_cast<std::size_t>(sizes.padded_elements));
    groups_->shard(sizes.param_group)
        .all_gather(param->shard().data(), static_cast<std::size_t>(sizes.shard_elements), gathered.data())
        .wait();
    param->gathered_to_unit_order(gathered);
    param->scatter_into_model(layout_, gathered, model_flat);
  }
  // With tensor parallelism every TP rank's slice, each placed at its offsets in the held layers (Note
  // [Tensor-parallel split]); every TP rank then holds them all.
  std::vector<float> held = std::move(model_flat);
  if (tensor_parallel_) {
    const int tp = dims_.tp();
    std::vector<float> slices(held.size() * static_cast<std::size_t>(tp));
    groups_->tensor_parallel()->all_gather(held.data(), held.size(), slices.data()).wait();
    std::vector<float> whole_width(static_cast<std::size_t>(held_layout_.element_count), 0.0f);
    for (int r = 0; r < tp; ++r) {
      runtime::insert_tensor_parallel_rank(
          held_layout_, layout_, tp, r,
          std::span<const float>(slices).subspan(held.size() * static_cast<std::size_t>(r), held.size()),
          whole_width);
    }
    held = std::move(whole_width);
  }
  if (!pipeline_) return held;
  // Every stage's layers at their whole-model offsets: one rank of each stage contributes (its other data-parallel
  // and TP ranks hold the same layers), summed over the world on the control group (not a schedule collective).
  std::vector<float> whole(static_cast<std::size_t>(whole_layout_.element_count), 0.0f);
  if (placement_.data_parallel_rank == 0 && tensor_parallel_rank() == 0) {
    for (std::size_t layer = 0; layer < whole_layers_.size(); ++layer) {
      const auto from = held.begin() + held_layout_.layer_offsets_elements[layer];
      std::copy(from, from + held_layout_.layers[layer].element_count,
                whole.begin() + whole_layout_.layer_offsets_elements[whole_layers_[layer]]);
    }
  }
  groups_->control().all_reduce(whole.data(), whole.size()).wait();
  return whole;
}

std::vector<FlatParam*> Runner::flat_params() {
  std::vector<FlatParam*> params;
  for (auto& param : params_) params.push_back(param.get());
  return params;
}

comm::CommCounters Runner::expected_collectives(const StepSchedule& schedule) {
  comm::CommCounters expected;
  for (const Op& op : schedule.ops) {
    comm::Collective kind;
    if (op.kind == OpKind::all_gather) {
      kind = comm::Collective::all_gather;
    } else if (op.kind == OpKind::reduce_scatter) {
      kind = comm::Collective::reduce_scatter;
    } else if (op.kind == OpKind::all_reduce) {
      kind = comm::Collective::all_reduce;
    } else {
      continue;
    }
    expected[kind].calls += 1;
    expected[kind].bytes += static_cast<std::uint64_t>(op.bytes);
  }
  return expected;
}

comm::P2pCounters Runner::expected_step_p2p() const {
  comm::P2pCounters expected = PipelineP2p::expected(schedule_);
  for (const Op& op : schedule_.ops) {
    if (!is_ring_step(op)) continue;
    for (comm::CollectiveTally* tally : {&expected.sends, &expected.recvs}) {  // every ring step receives what it sends
      tally->calls += 1;
      tally->bytes += static_cast<std::uint64_t>(op.bytes);
    }
  }
  return expected;
}

comm::CommCounters Runner::expected_step_collectives() const {
  comm::CommCounters expected = expected_collectives(schedule_);
  const comm::CommCounters tp = expected_pass_collectives(schedule_);
  for (std::size_t kind = 0; kind < comm::kCollectiveKinds; ++kind) {
    expected.tallies[kind].calls += tp.tallies[kind].calls;
    expected.tallies[kind].bytes += tp.tallies[kind].bytes;
  }
  return expected;
}

}  // namespace shardplan::runner
