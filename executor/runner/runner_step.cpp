// Runner::step: walks one StepSchedule (Note [Runner streams]) — compute inline, collectives asynchronous — and
// records the measured Timeline.
#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <utility>

#include "errors.h"
#include "runner.h"
#include "runner_support.h"
#include "stage_buffers.h"

namespace shardplan::runner {

class Runner::StepWalker {
 public:
  StepWalker(Runner& runner, std::span<const runtime::Batch> batches)
      : r_(runner), ops_(runner.schedule_.ops), batches_(batches), done_(ops_.size(), false),
        events_(ops_.size()), layers_(runner.kernels_.size()), saved_(layers_ * batches.size()),
        saved_bytes_(layers_ * batches.size(), 0),
        reduction_of_(runner.params_.size(), -1),
        stages_(ops_, runner.receive_buffers_.empty() ? 0 : runner.receive_buffers_.begin()->second.bytes()) {
    // Note [Progress hook]: the kernels poll the in-flight collectives between the parts of a layer.
    for (auto& kernel : r_.kernels_) kernel->set_progress_hook([this] { progress(); });
    // The layers see this CP rank's share of each sequence (Note [Context-parallel runner]), and of that this TP
    // rank's share of the tokens (Note [Sequence-parallel tokens]).
    if (r_.tensor_parallel_ || r_.context_parallel_) {
      for (const runtime::Batch& whole : batches_) {
        runtime::Batch share =
            r_.context_parallel_ ? context_parallel_share(whole, r_.dims_.cp(), r_.context_parallel_rank()) : whole;
        shares_.push_back(r_.tensor_parallel_ ? sequence_parallel_share(share, r_.dims_.tp()) : std::move(share));
      }
    }
    if (r_.tensor_parallel_) r_.tensor_parallel_->set_progress([this] { progress(); });
    if (r_.context_parallel_) r_.context_parallel_->set_progress([this] { progress(); });
  }
  ~StepWalker() {
    for (auto& kernel : r_.kernels_) kernel->set_progress_hook({});
    if (r_.tensor_parallel_) r_.tensor_parallel_->set_progress({});
    if (r_.context_parallel_) r_.context_parallel_->set_progress({});
  }
  StepWalker(const StepWalker&) = delete;
  StepWalker& operator=(const StepWalker&) = delete;

  double run() {
    for (const Op& op : ops_) {
      progress();
      if (is_collective(op)) {
        request(op);
      } else if (is_ring_step(op)) {
        // A ring step: posted by the attention of the pass after it (Note [Context-parallel runner]). Its receive
        // buffer lives inside that pass; it is tracked where the schedule places it, from the first send to the last.
        begin(op);
        for (const MemoryChange& change : op.allocates) r_.tracker_.allocate(change.category, change.bytes);
        for (const MemoryChange& change : op.frees) r_.tracker_.release(change.category, change.bytes);
        end(op);
      } else if (op.kind == OpKind::send) {  // on the p2p stream: completes on its own (Note [Pipeline runner])
        for (int dep : op.deps) complete(dep);
        begin(op);
        post_send(op);
      } else {
        for (int dep : op.deps) complete(dep);
        begin(op);
        run_inline(op);
        end(op);
      }
    }
    for (const Op& op : ops_) complete(op.id);
    return loss_sum_ / static_cast<double>(batches_.size());
  }

  std::vector<TimelineEvent> take_events() { return std::move(events_); }

 private:
  struct InFlight {
    int op;
    comm::CommHandle handle;
  };

  static bool is_collective(const Op& op) {
    return op.kind == OpKind::all_gather || op.kind == OpKind::reduce_scatter || op.kind == OpKind::all_reduce;
  }

  [[noreturn]] void fail(const std::string& message, std::source_location where = std::source_location::current()) {
    throw InternalError(message, where, r_.rank_);
  }

  void begin(const Op& op) {
    TimelineEvent& event = events_[static_cast<std::size_t>(op.id)];
    event = measured_event(op, r_.schedule_, r_.rank_);
    event.start_s = r_.clock_.now_s();
  }

  void end(const Op& op) {
    events_[static_cast<std::size_t>(op.id)].end_s = r_.clock_.now_s();
    done_[static_cast<std::size_t>(op.id)] = true;
  }

  // --- collectives ------------------------------------------------------------------------------------------------

  bool ready(const Op& op) const {
    return std::all_of(op.deps.begin(), op.deps.end(), [this](int dep) { return done_[static_cast<std::size_t>(dep)]; });
  }

  // A stream runs one op at a time, as the schedule says (Note [Schedule order]): an op waits while an earlier op of
  // its stream is parked or still in flight. Parked ops leave in request order, so every rank issues the collectives
  // of a communicator in the same order (MPI requires it).
  bool stream_busy(StreamKind stream) const {
    return std::any_of(in_flight_.begin(), in_flight_.end(),
                       [&](const InFlight& f) { return ops_[static_cast<std::size_t>(f.op)].stream == stream; });
  }

  bool stream_blocked(const Op& op) const { return !parked_.empty() || stream_busy(op.stream); }

  void request(const Op& op) {
    if (op.kind != OpKind::all_gather) reduction_of_[static_cast<std::size_t>(op.unit)] = op.id;
    if (!ready(op) || stream_blocked(op)) return parked_.push_back(op.id);
    issue(op);
  }

  void issue(const Op& op) {
    ParamGroup& group = r_.param_groups_.at(static_cast<std::size_t>(op.unit));
    if (op.kind != OpKind::all_gather) release(op.frees_at_start, op.unit);
    begin(op);
    comm::CommHandle handle;
    if (op.kind == OpKind::all_gather) {
      handle = group.unshard();
    } else if (op.kind == OpKind::reduce_scatter) {
      handle = group.reduce_scatter_grads();
    } else if (op.group == GroupKind::replica) {
      handle = group.all_reduce_replicas();
    } else if (op.group == GroupKind::world) {
      handle = group.all_reduce_world();
    } else {
      fail("all_reduce over group '" + std::string(to_string(op.group)) + "' is not supported");
    }
    in_flight_.push_back({op.id, std::move(handle)});
  }

  void finish(InFlight& flight) {
    const Op& op = ops_[static_cast<std::size_t>(flight.op)];
    end(op);
    if (op.kind == OpKind::send) r_.pipeline_->sent(op.id);
    // Gathers free nothing at their end on CPU ranks (fp32 without offload: no cast or copy buffers, check_executable);
    // with frozen tensors the gathered shards are put in the unit's order (Note [Frozen shards] in flat_param.h).
    if (op.kind == OpKind::all_gather) r_.params_.at(static_cast<std::size_t>(op.unit))->finish_unshard();
    if (op.kind != OpKind::reduce_scatter && op.kind != OpKind::all_reduce) return;
    if (op.finishes_reduction) r_.param_groups_.at(static_cast<std::size_t>(op.unit)).finish_reduction();
    release(op.frees, op.unit);
  }

  // Note [Reduction buffers] (schedule.h): a reduction's gradient input and comm buffer are freed where the schedule
  // frees them — at its end, or at the start of the next reduction on its stream (`owner_unit` names whose).
  void release(std::span<const MemoryChange> changes, int own_unit) {
    for (const MemoryChange& change : changes) {
      ParamGroup& group =
          r_.param_groups_.at(static_cast<std::size_t>(change.owner_unit >= 0 ? change.owner_unit : own_unit));
      if (change.category == MemoryCategory::unsharded_grads) group.release_gradient_input();
      if (change.category == MemoryCategory::comm_buffers) group.release_reduce_output();
    }
  }

  // Polls every in-flight collective (driving MPI progress) and issues parked ones that became ready, in order.
  void progress() {
    for (auto flight = in_flight_.begin(); flight != in_flight_.end();) {
      if (flight->handle.test()) {
        finish(*flight);
        flight = in_flight_.erase(flight);
      } else {
        ++flight;
      }
    }
    while (!parked_.empty() && ready(ops_[static_cast<std::size_t>(parked_.front())]) &&
           !stream_busy(ops_[static_cast<std::size_t>(parked_.front())].stream)) {
      const int next = parked_.front();
      parked_.pop_front();
      issue(ops_[static_cast<std::size_t>(next)]);
    }
  }

  // Blocks until op `id` has completed (issuing it first if it is parked).
  void complete(int id) {
    while (!done_[static_cast<std::size_t>(id)]) {
      const auto flight = std::find_if(in_flight_.begin(), in_flight_.end(), [id](const InFlight& f) { return f.op == id; });
      if (flight != in_flight_.end()) {
        flight->handle.wait();
        finish(*flight);
        in_flight_.erase(flight);
        continue;
      }
      if (parked_.empty()) fail("op " + std::to_string(id) + " never ran (a dependency order bug)");
      for (int dep : ops_[static_cast<std::size_t>(parked_.front())].deps) complete(dep);
      progress();
    }
  }

  // --- compute ----------------------------------------------------------------------------------------------------

  void run_inline(const Op& op) {
    switch (op.kind) {
      case OpKind::wait:
        // Its dependency (an all-gather, or FSDP2's previous reduce-scatter) completed above. The head's wait after
        // a pipeline rank's last pass is step() returning the kept outputs (Note [Pipeline buffers]).
        if (op.layer >= 0 && last_of_model(static_cast<std::size_t>(op.layer))) stages_.return_outputs();
        break;
      case OpKind::forward: forward(op); break;
      case OpKind::recompute: recompute(op); break;
      case OpKind::backward:
      case OpKind::backward_input:
        backward(op);
        stages_.release_stage_output(op);  // Note [Pipeline buffers]: by its own layer's backward, the stage's first
        break;
      case OpKind::backward_weight: backward_weight(op); break;
      case OpKind::free_unsharded: r_.param_groups_.at(static_cast<std::size_t>(op.unit)).reshard(); break;
      case OpKind::optimizer_step: optimizer_step(); break;
      case OpKind::recv: receive(op); break;
      default: fail(std::string("op kind '") + to_string(op.kind) + "' is not supported by the CPU runner");
    }
  }

  const runtime::Batch& batch(const Op& op) const {
    const auto index = static_cast<std::size_t>(op.micro_batch);
    return shares_.empty() ? batches_[index] : shares_[index];
  }

  // The layer's parameters, or its gradients: those of its trainable tensors, frozen ones bound to null (Note
  // [Trainable-first unit layout] in param_layout.h), so no kernel computes a frozen weight's gradient; `parked`: in
  // a buffer parked for the layer's weight part (Note [Split backward lowering]).
  runtime::LayerParams params_of(const Op& op, bool gradient, bool parked = false) {
    FlatParam& param = *r_.params_.at(static_cast<std::size_t>(op.unit));
    const auto layer = static_cast<std::size_t>(op.layer);
    const runtime::UnitParamLayout& unit = param.unit_layout();
    if (parked) {
      return runtime::bind_unit_grads(r_.layout_, unit, layer,
                                      stages_.park_weight_gradients(slot(op), r_.tracker_, unit.trainable_elements, op));
    }
    if (gradient) return runtime::bind_unit_grads(r_.layout_, unit, layer, param.compute_grads());
    return runtime::bind_unit_layer(r_.layout_, unit, layer, param.compute_params());
  }

  // What a layer keeps for its backward, per (micro-batch, layer): a pipeline runs several micro-batches' forwards
  // before their backwards (1F1B's warm-up), so one micro-batch's activations must not replace another's.
  std::size_t slot(const Op& op) const {
    return static_cast<std::size_t>(op.micro_batch) * layers_ + static_cast<std::size_t>(op.layer);
  }

  // `aliased_bytes`: what torch would keep in a buffer the tracker counts already (Note [Pipeline buffers]: a
  // stage's first layer saves its input, which is the stage's receive buffer; this kernel keeps its own copy).
  void keep(std::size_t at, runtime::SavedActivations saved, std::int64_t aliased_bytes = 0) {
    const std::int64_t bytes = std::max<std::int64_t>(saved.bytes() - aliased_bytes, 0);
    if (bytes > saved_bytes_[at]) r_.tracker_.allocate(MemoryCategory::activations, bytes - saved_bytes_[at]);
    if (bytes < saved_bytes_[at]) r_.tracker_.release(MemoryCategory::activations, saved_bytes_[at] - bytes);
    saved_bytes_[at] = bytes;
    saved_[at] = std::move(saved);
  }

  // --- pipeline messages (Note [Pipeline runner]) -----------------------------------------------------------------

  // A forward's message is the hidden state its stage's last layer produced, a backward's the gradient its stage's
  // first layer produced: the pass of the same micro-batch and stage that the walker ran last.
  void post_send(const Op& op) {
    if (!r_.pipeline_) fail("a send op in a schedule without a pipeline");
    const bool forward = op.peer_stage > op.stage;
    const Op* pass = last_compute_ >= 0 ? &ops_[static_cast<std::size_t>(last_compute_)] : nullptr;
    if (!pass || pass->micro_batch != op.micro_batch || pass->stage != op.stage ||
        (pass->kind == OpKind::backward || pass->kind == OpKind::backward_input) == forward) {
      fail("send op " + std::to_string(op.id) + " does not follow the pass whose output it sends");
    }
    const runtime::Activations& tensor = forward ? hidden_ : grad_;
    in_flight_.push_back({op.id, r_.pipeline_->send(op, tensor.values)});
    if (forward) stages_.keep_stage_output(op, r_.tracker_, tensor.values);  // Note [Pipeline buffers]
  }

  TrackedBuffer& receive_buffer(const Op& op) {
    const auto found = r_.receive_buffers_.find({op.stage, op.micro_batch, op.peer_stage < op.stage});
    if (found == r_.receive_buffers_.end()) fail("recv op " + std::to_string(op.id) + " without a receive buffer");
    return found->second;
  }

  // Blocks the compute stream until the micro-batch's tensor arrived, polling the collectives meanwhile (a DP peer
  // may wait on one this rank has parked).
  void receive(const Op& op) {
    if (!r_.pipeline_) fail("a recv op in a schedule without a pipeline");
    const runtime::Batch& b = batch(op);
    runtime::Activations& tensor = op.peer_stage < op.stage ? hidden_ : grad_;
    tensor = runtime::Activations::zeros(b.micro_batch, b.seq_len, r_.model_.hidden_size);
    TrackedBuffer& buffer = receive_buffer(op);
    if (buffer.size() != static_cast<std::int64_t>(tensor.values.size())) {
      fail("recv op " + std::to_string(op.id) + ": a receive buffer of " + std::to_string(buffer.size()) +
           " elements for a tensor of " + std::to_string(tensor.values.size()));
    }
    comm::CommHandle handle = r_.pipeline_->recv(op, buffer.values());
    while (!handle.test()) progress();
    std::copy(buffer.values().begin(), buffer.values().end(), tensor.values.begin());
  }

  // Whether the rank's layer is the whole model's first (the embedding) or last (the head and loss): with a
  // pipeline, the first and last stage's (Note [Pipeline runner]).
  bool first_of_model(std::size_t layer) const { return r_.whole_layers_[layer] == 0; }
  bool last_of_model(std::size_t layer) const { return r_.whole_layers_[layer] + 1 == r_.model_.layers.size(); }

  void forward(const Op& op) {
    const auto layer = static_cast<std::size_t>(op.layer);
    last_compute_ = op.id;
    if (first_of_model(layer)) hidden_ = runtime::Activations{};
    runtime::LayerForward result =
        r_.kernels_[layer]->forward(params_of(op, false), batch(op), hidden_, op.checkpointing);
    hidden_ = std::move(result.output);
    keep(slot(op), std::move(result.saved), stages_.aliased_input_bytes(op));
    // What the forward held beside what it kept, charged where it was alive (Note [Workspaces]).
    if (result.workspace_bytes > 0) {
      r_.tracker_.allocate(MemoryCategory::activations, result.workspace_bytes);
      r_.tracker_.release(MemoryCategory::activations, result.workspace_bytes);
    }
    if (last_of_model(layer)) {
      loss_sum_ += hidden_.values.at(0);
      // Note [Pipeline buffers]: torch's last stage keeps each micro-batch's output, the logits, until step()
      // returns them. This head fuses the loss and never holds its logits apart, so the buffer holds their count of
      // elements (every token's row of the vocabulary) for the step, as torch's does; nothing reads them.
      if (r_.pipeline_) stages_.keep_returned_output(r_.tracker_, batch(op).token_count() * r_.model_.vocab_size);
    }
  }

  void recompute(const Op& op) {
    const auto layer = static_cast<std::size_t>(op.layer);
    last_compute_ = op.id;
    keep(slot(op), r_.kernels_[layer]->recompute(params_of(op, false), saved_[slot(op)]),
         stages_.aliased_input_bytes(op));
  }

  void backward(const Op& op) {
    const auto layer = static_cast<std::size_t>(op.layer);
    last_compute_ = op.id;
    if (last_of_model(layer)) {
      // dL/dloss of one micro-batch's mean loss when k are accumulated into one step (Note [Gradient mean]); with
      // tensor parallelism every TP rank's loss-parallel head computes the whole micro-batch's mean (Note
      // [Vocabulary-parallel layers]).
      grad_ = runtime::Activations::scalar(1.0f / static_cast<float>(batches_.size()));
    }
    // Note [Gradient hazard]: the schedule lets a unit's reduction of micro-batch m overlap the compute of m + 1 and
    // does not order it before the unit's next backward, which writes the same gradient buffer (the replicated
    // gradient reduced in place, or the full-size copy a reduce-scatter reads). FSDP orders these by making the
    // next backward's stream wait for the reduction's event; the runner does the same by completing the reduction
    // before the first write. Without gradient accumulation there is no next backward within the step.
    // A split backward's input part parks its weight gradients and keeps its activations (see backward_weight).
    const bool input_part = op.kind == OpKind::backward_input;
    if (!input_part) complete_reduction_before_write(op);
    // A layer before every trainable parameter runs no backward kernel: autograd records nothing there
    // (LayerFinetune::backward_needed; the embedding under LoRA). Its op still ends the pass where the schedule says.
    const auto& finetune = r_.rank_model_.layers[layer].finetune;
    if (finetune && !finetune->backward_needed) {
      if (!input_part) keep(slot(op), runtime::SavedActivations{});
      return;
    }
    const runtime::LayerParams params = params_of(op, false);
    const runtime::LayerParams grads = params_of(op, true, input_part);
    const std::int64_t workspace = r_.kernels_[layer]->backward_workspace_bytes(saved_[slot(op)]);
    if (workspace > 0) r_.tracker_.allocate(MemoryCategory::activations, workspace);
    std::optional<ReplicatedGradients> replicated;  // Note [Replicated gradients]
    if (r_.tensor_parallel_) replicated.emplace(grads, r_.rank_model_.layers[layer]);
    grad_ = r_.kernels_[layer]->backward(params, saved_[slot(op)], grad_, grads);
    if (replicated) replicated->sum_over(*r_.tensor_parallel_);
    if (workspace > 0) r_.tracker_.release(MemoryCategory::activations, workspace);
    if (!input_part) keep(slot(op), runtime::SavedActivations{});
  }

  // Note [Split backward lowering]: the weight part adds what the input part parked and lets the activations go.
  void backward_weight(const Op& op) {
    last_compute_ = op.id;
    if (const auto& finetune = r_.rank_model_.layers[static_cast<std::size_t>(op.layer)].finetune;
        !finetune || finetune->backward_needed) {
      complete_reduction_before_write(op);
      stages_.add_parked_weight_gradients(slot(op), r_.params_.at(static_cast<std::size_t>(op.unit))->compute_grads());
    }
    keep(slot(op), runtime::SavedActivations{});
  }

  // Note [Gradient hazard] (backward): a unit's pending reduction completes before its gradients are written again.
  void complete_reduction_before_write(const Op& op) {
    const int pending = std::exchange(reduction_of_[static_cast<std::size_t>(op.unit)], -1);
    if (pending >= 0) complete(pending);
  }

  void optimizer_step() {
    ++r_.optimizer_steps_;
    for (auto& param : r_.params_) {
      // Only the shard's trainable part: frozen parameters have no gradient and no optimizer state, and stay
      // bit-identical (Note [Frozen shards] in flat_param.h).
      runtime::adamw_step(param->trainable_shard(), param->shard_grad(), param->exp_avg(), param->exp_avg_sq(),
                          r_.optimizer_steps_, r_.options_.adamw);
      std::fill(param->shard_grad().begin(), param->shard_grad().end(), 0.0f);
    }
  }

  Runner& r_;
  const std::vector<Op>& ops_;
  std::span<const runtime::Batch> batches_;
  std::vector<runtime::Batch> shares_;  // this TP or CP rank's share of each micro-batch; empty without either
  std::vector<bool> done_;
  std::vector<TimelineEvent> events_;
  std::vector<InFlight> in_flight_;
  std::deque<int> parked_;
  std::size_t layers_;                            // this rank's layers (its stages' with a pipeline)
  std::vector<runtime::SavedActivations> saved_;  // per slot(op)
  std::vector<std::int64_t> saved_bytes_;
  int last_compute_ = -1;                         // the forward, recompute or backward op run last
  runtime::Activations hidden_;
  runtime::Activations grad_;
  double loss_sum_ = 0;
  std::vector<int> reduction_of_;  // per unit: its last requested reduction op (Note [Gradient hazard]), -1 if none
  StageBuffers stages_;  // Note [Pipeline buffers]: the forward cache and the returned outputs
};

StepReport Runner::step(std::span<const runtime::Batch> micro_batches) {
  check_step_batches(schedule_, micro_batches, rank_, dims_.cp());
  StepReport report;
  comm::Communicator& control = groups_->control();
  const comm::CommCounters before = groups_->data_counters();
  const comm::P2pCounters p2p_before = groups_->p2p_counters();
  control.barrier();  // Note [One clock]
  clock_.restart();
  tracker_.start_window();
  StepWalker walker(*this, micro_batches);
  report.local_loss = walker.run();
  const double local_time = clock_.now_s();
  report.collectives = groups_->data_counters().since(before);
  report.p2p = groups_->p2p_counters().since(p2p_before);
  report.peak_bytes = tracker_.peak_total();
  report.memory_at_peak = tracker_.at_peak();
  report.peak_by_category = tracker_.peak_by_category();
  report.tokens = schedule_.tokens_per_step;
  report.timeline.source = "measured";
  report.timeline.events = walker.take_events();
  report.timeline.memory = tracker_.series();

  // Agreed numbers: the global loss (every rank's micro-batches have equally many tokens) and the slowest rank.
  float agreed[2] = {static_cast<float>(report.local_loss), static_cast<float>(local_time)};
  control.all_reduce(&agreed[0], 1, comm::ReduceOp::sum).wait();
  control.all_reduce(&agreed[1], 1, comm::ReduceOp::max).wait();
  // With a pipeline only the last stage's ranks computed a loss (the others' local loss is 0).
  report.loss = agreed[0] / static_cast<double>(world_size_ / dims_.pp());
  report.step_time_s = agreed[1];
  return report;
}

}  // namespace shardplan::runner
