// pipeline_order and replay_pipeline_order (Note [Pipeline orders], Note [Pipeline order check] in pipeline_order.h).
#include "pipeline_order.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <map>
#include <numeric>

#include "errors.h"

namespace shardplan {

namespace {

constexpr std::array<std::pair<PipelineScheduleKind, const char*>, 4> kScheduleNames{{
    {PipelineScheduleKind::gpipe, "GPipe"},
    {PipelineScheduleKind::one_f_one_b, "1F1B"},
    {PipelineScheduleKind::interleaved_1f1b, "Interleaved1F1B"},
    {PipelineScheduleKind::interleaved_zero_bubble, "InterleavedZeroBubble"},
}};

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

// GPipe: every forward, then every backward in micro-batch order (ScheduleGPipe._step_microbatches).
std::vector<PipelineAction> gpipe_rank(int rank, int micro_batches) {
  std::vector<PipelineAction> actions;
  for (int micro = 0; micro < micro_batches; ++micro) actions.push_back({PipelineActionKind::forward, rank, micro});
  for (int micro = 0; micro < micro_batches; ++micro) {
    actions.push_back({PipelineActionKind::full_backward, rank, micro});
  }
  return actions;
}

// 1F1B (Schedule1F1B._step_microbatches): warmup min(M, pp − stage) forwards, then backward and forward in turn
// ("1B1F"), then the remaining backwards.
std::vector<PipelineAction> one_f_one_b_rank(int rank, int ranks, int micro_batches) {
  std::vector<PipelineAction> actions;
  const int warmup = std::min(micro_batches, ranks - rank);
  int forward = 0, backward = 0;
  for (; forward < warmup; ++forward) actions.push_back({PipelineActionKind::forward, rank, forward});
  while (true) {
    actions.push_back({PipelineActionKind::full_backward, rank, backward++});
    if (forward == micro_batches) break;
    actions.push_back({PipelineActionKind::forward, rank, forward++});
  }
  for (; backward < micro_batches; ++backward) actions.push_back({PipelineActionKind::full_backward, rank, backward});
  return actions;
}

// The interleaved orders (ScheduleInterleaved1F1B / ScheduleInterleavedZeroBubble ._calculate_single_rank_operations
// with _get_1f1b_rank_ops): warmup forwards, then a forward and a backward per step over the local stages in rounds
// of `per_round` micro-batches, then the cooldown's backwards; with zero bubble the backward is its input gradient
// and the weight gradients follow from step `rank` of the steady phase on, the rest at the end.
std::vector<PipelineAction> interleaved_rank(int rank, int ranks, int local_stages, int micro_batches,
                                             bool zero_bubble) {
  const int rounds = std::max(1, micro_batches / ranks);
  const int per_round = micro_batches / rounds;
  // Warmup for the last stage (v − 1)·per_round, plus 2 (1F1B) or 1 (zero bubble) per hop from the last rank.
  const int hop_factor = zero_bubble ? 1 : 2;
  const int warmup = std::min((local_stages - 1) * per_round + hop_factor * (ranks - 1 - rank),
                              micro_batches * local_stages);
  const int micro_batch_ops = local_stages * micro_batches;
  const int steady = micro_batch_ops - warmup;
  const int total = warmup + steady + warmup;  // the cooldown runs the warmup's backwards
  const auto forward_stage = [&](int step) { return ((step / per_round) % local_stages) * ranks + rank; };
  const auto backward_stage = [&](int step) {
    return (local_stages - 1 - ((step - warmup) / per_round) % local_stages) * ranks + rank;
  };
  const PipelineActionKind backward_kind =
      zero_bubble ? PipelineActionKind::backward_input : PipelineActionKind::full_backward;
  std::map<int, int> forwarded, backwarded, weighted;  // by stage: the next micro-batch
  std::vector<int> backward_steps;
  std::size_t weights = 0;
  std::vector<PipelineAction> actions;
  const auto weight_after = [&](int step) {
    // Zero bubble: weight gradients wait the first `rank` steady steps (num_1f1b_microbatches = rank).
    if (!zero_bubble || step - warmup < rank) return;
    const int stage = backward_stage(backward_steps[weights++]);
    actions.push_back({PipelineActionKind::backward_weight, stage, weighted[stage]++});
  };
  for (int step = 0; step < total; ++step) {
    if (step < warmup + steady) {
      const int stage = forward_stage(step);
      actions.push_back({PipelineActionKind::forward, stage, forwarded[stage]++});
    }
    if (step >= warmup) {
      const int stage = backward_stage(step);
      actions.push_back({backward_kind, stage, backwarded[stage]++});
      backward_steps.push_back(step);
      weight_after(step);
    }
  }
  while (zero_bubble && weights < backward_steps.size()) {
    const int stage = backward_stage(backward_steps[weights++]);
    actions.push_back({PipelineActionKind::backward_weight, stage, weighted[stage]++});
  }
  return actions;
}

}  // namespace

int default_stages_per_rank(PipelineScheduleKind kind) {
  return kind == PipelineScheduleKind::interleaved_1f1b || kind == PipelineScheduleKind::interleaved_zero_bubble ? 2
                                                                                                                : 1;
}

const char* to_string(PipelineScheduleKind kind) {
  for (const auto& [known, name] : kScheduleNames) {
    if (known == kind) return name;
  }
  return "?";
}

PipelineScheduleKind pipeline_schedule_from_string(const std::string& name, const std::string& field) {
  for (const auto& [kind, known] : kScheduleNames) {
    if (lowercase(name) == lowercase(known)) return kind;
  }
  throw InputError(field + ": unknown pipeline schedule '" + clip_echoed(name) +
                   "': expected GPipe, 1F1B, Interleaved1F1B or InterleavedZeroBubble");
}

const char* to_string(PipelineActionKind kind) {
  switch (kind) {
    case PipelineActionKind::forward: return "F";
    case PipelineActionKind::full_backward: return "B";
    case PipelineActionKind::backward_input: return "I";
    case PipelineActionKind::backward_weight: return "W";
  }
  return "?";
}

PipelineOrder pipeline_order(PipelineScheduleKind kind, int ranks, int stages_per_rank, int micro_batches) {
  const std::string name = to_string(kind);
  if (ranks < 1 || stages_per_rank < 1 || micro_batches < 1) {
    throw InputError("pipeline: " + name + " needs at least one rank, stage per rank and micro-batch; got " +
                     std::to_string(ranks) + ", " + std::to_string(stages_per_rank) + ", " +
                     std::to_string(micro_batches));
  }
  const bool interleaved =
      kind == PipelineScheduleKind::interleaved_1f1b || kind == PipelineScheduleKind::interleaved_zero_bubble;
  if (!interleaved && stages_per_rank != 1) {  // PipelineScheduleSingle: one stage per rank
    throw InputError("pipeline: " + name + " runs one stage per rank; expected Interleaved1F1B or "
                     "InterleavedZeroBubble for " + std::to_string(stages_per_rank) + " virtual stages");
  }
  if (interleaved) {
    const int rounds = std::max(1, micro_batches / ranks);
    if (micro_batches % rounds != 0) {  // ScheduleInterleaved1F1B.__init__'s check
      throw InputError("pipeline: " + name + " needs the micro-batches (" + std::to_string(micro_batches) +
                       ") a multiple of the rounds max(1, micro-batches / pp) = " + std::to_string(rounds));
    }
  }
  PipelineOrder order;
  order.kind = kind;
  order.ranks = ranks;
  order.stages_per_rank = stages_per_rank;
  order.micro_batches = micro_batches;
  for (int rank = 0; rank < ranks; ++rank) {
    switch (kind) {
      case PipelineScheduleKind::gpipe: order.by_rank.push_back(gpipe_rank(rank, micro_batches)); break;
      case PipelineScheduleKind::one_f_one_b:
        order.by_rank.push_back(one_f_one_b_rank(rank, ranks, micro_batches));
        break;
      case PipelineScheduleKind::interleaved_1f1b:
      case PipelineScheduleKind::interleaved_zero_bubble:
        order.by_rank.push_back(interleaved_rank(rank, ranks, stages_per_rank, micro_batches,
                                                 kind == PipelineScheduleKind::interleaved_zero_bubble));
        break;
    }
  }
  return order;
}

double PipelineReplay::bubble_fraction() const {
  if (makespan <= 0 || busy_by_rank.empty()) return 0;
  const double mean = std::accumulate(busy_by_rank.begin(), busy_by_rank.end(), 0.0) /
                      static_cast<double>(busy_by_rank.size());
  return 1.0 - mean / makespan;
}

PipelineReplay replay_pipeline_order(const PipelineOrder& order, double forward_s, double backward_input_s,
                                     double backward_weight_s) {
  const auto stages = static_cast<std::size_t>(order.stage_count());
  return replay_pipeline_order(order, StageDurations{std::vector<double>(stages, forward_s),
                                                     std::vector<double>(stages, backward_input_s),
                                                     std::vector<double>(stages, backward_weight_s)});
}

PipelineReplay replay_pipeline_order(const PipelineOrder& order, const StageDurations& durations) {
  const int stages = order.stage_count();
  const auto stage_count = static_cast<std::size_t>(stages);
  SHARDPLAN_CHECK(durations.forward_s.size() == stage_count && durations.backward_input_s.size() == stage_count &&
                      durations.backward_weight_s.size() == stage_count,
                  "a replay's durations have one entry per stage");
  // End time of each (kind, stage, micro-batch) placed so far (negative: not yet).
  constexpr std::size_t kKinds = 4;
  const auto micros = static_cast<std::size_t>(order.micro_batches);
  std::vector<double> ended(kKinds * stage_count * micros, -1.0);
  const auto slot = [&](PipelineActionKind kind, int stage, int micro) -> double& {
    return ended[(static_cast<std::size_t>(kind) * stage_count + static_cast<std::size_t>(stage)) * micros +
                 static_cast<std::size_t>(micro)];
  };
  const auto end_of = [&](PipelineActionKind kind, int stage, int micro) -> const double* {
    const double& end = slot(kind, stage, micro);
    return end < 0 ? nullptr : &end;
  };
  // The end of what `action` waits for on other stages (and its own forward), or nullptr while one has not run.
  const auto ready_at = [&](const PipelineAction& action, double& at) {
    at = 0;
    const auto after = [&](const double* end) {
      if (end == nullptr) return false;
      at = std::max(at, *end);
      return true;
    };
    switch (action.kind) {
      case PipelineActionKind::forward:
        return action.stage == 0 || after(end_of(PipelineActionKind::forward, action.stage - 1, action.micro_batch));
      case PipelineActionKind::full_backward:
      case PipelineActionKind::backward_input: {
        if (!after(end_of(PipelineActionKind::forward, action.stage, action.micro_batch))) return false;
        if (action.stage == stages - 1) return true;
        const double* full = end_of(PipelineActionKind::full_backward, action.stage + 1, action.micro_batch);
        const double* input = end_of(PipelineActionKind::backward_input, action.stage + 1, action.micro_batch);
        return after(full != nullptr ? full : input);
      }
      case PipelineActionKind::backward_weight:
        return after(end_of(PipelineActionKind::backward_input, action.stage, action.micro_batch));
    }
    return false;
  };
  const auto duration = [&](const PipelineAction& action) {
    const auto stage = static_cast<std::size_t>(action.stage);
    switch (action.kind) {
      case PipelineActionKind::forward: return durations.forward_s[stage];
      case PipelineActionKind::full_backward:
        return durations.backward_input_s[stage] + durations.backward_weight_s[stage];
      case PipelineActionKind::backward_input: return durations.backward_input_s[stage];
      case PipelineActionKind::backward_weight: return durations.backward_weight_s[stage];
    }
    return 0.0;
  };
  PipelineReplay replay;
  const auto ranks = static_cast<std::size_t>(order.ranks);
  replay.busy_by_rank.assign(ranks, 0.0);
  replay.peak_in_flight_by_stage.assign(stage_count, 0);
  std::vector<int> in_flight(stage_count, 0);
  std::vector<double> free_at(ranks, 0.0);
  std::vector<std::size_t> next(ranks, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t rank = 0; rank < ranks; ++rank) {
      const auto& actions = order.by_rank[rank];
      double at = 0;
      while (next[rank] < actions.size() && ready_at(actions[next[rank]], at)) {
        const PipelineAction& action = actions[next[rank]++];
        SHARDPLAN_CHECK(action.stage >= 0 && action.stage < stages && order.rank_of_stage(action.stage) ==
                                                                           static_cast<int>(rank) &&
                            action.micro_batch >= 0 && action.micro_batch < order.micro_batches,
                        "a pipeline action runs on its stage's rank");
        const double end = std::max(at, free_at[rank]) + duration(action);
        double& recorded = slot(action.kind, action.stage, action.micro_batch);
        SHARDPLAN_CHECK(recorded < 0, std::string("pipeline action ") + to_string(action.kind) + " of stage " +
                                          std::to_string(action.stage) + ", micro-batch " +
                                          std::to_string(action.micro_batch) + " runs once");
        recorded = end;
        free_at[rank] = end;
        replay.busy_by_rank[rank] += duration(action);
        replay.makespan = std::max(replay.makespan, end);
        int& flying = in_flight[static_cast<std::size_t>(action.stage)];
        if (action.kind == PipelineActionKind::forward) {
          ++flying;
        } else if (action.kind != PipelineActionKind::backward_input) {
          --flying;  // a full backward or the weight gradient frees the micro-batch's activations
        }
        int& peak = replay.peak_in_flight_by_stage[static_cast<std::size_t>(action.stage)];
        peak = std::max(peak, flying);
        progress = true;
      }
    }
  }
  for (std::size_t rank = 0; rank < ranks; ++rank) {
    SHARDPLAN_CHECK(next[rank] == order.by_rank[rank].size(),
                    std::string(to_string(order.kind)) + " order deadlocks on pipeline rank " + std::to_string(rank));
  }
  // Every stage ran every micro-batch's forward and backward (full, or input and weight) once.
  for (int stage = 0; stage < stages; ++stage) {
    for (int micro = 0; micro < order.micro_batches; ++micro) {
      const bool forward = end_of(PipelineActionKind::forward, stage, micro) != nullptr;
      const bool full = end_of(PipelineActionKind::full_backward, stage, micro) != nullptr;
      const bool split = end_of(PipelineActionKind::backward_input, stage, micro) != nullptr &&
                         end_of(PipelineActionKind::backward_weight, stage, micro) != nullptr;
      SHARDPLAN_CHECK(forward && (full != split), std::string(to_string(order.kind)) + ": stage " +
                                                      std::to_string(stage) + " micro-batch " +
                                                      std::to_string(micro) + " runs forward and backward once");
    }
  }
  return replay;
}

}  // namespace shardplan
