// The wrap-boundary DP's public face (Note [Wrap DP] in wrap_dp.h): plans from wrappings, the step model's time of a
// wrapping, the fastest wrapping, and the memory floor of one.
#include "wrap_dp.h"

#include "errors.h"
#include "wrap_label_dp.h"

namespace shardplan {

using namespace wrap_internal;

Plan plan_with_units(const ModelSpec& model, const Plan& plan_template, const std::vector<LayerRange>& units,
                     const std::vector<bool>& kept_gathered) {
  SHARDPLAN_CHECK(kept_gathered.empty() || kept_gathered.size() == units.size(), "one kept flag per unit");
  Plan plan = plan_template;
  const PlanUnit unit_template = plan_template.units.at(plan_template.units.size() > 1 ? 1 : 0);
  const PlanUnit root_template = plan_template.units.at(0);
  plan.units.clear();
  const int count = static_cast<int>(units.size()) + 1;
  for (int id = 0; id < count; ++id) {
    PlanUnit unit = id == 0 ? root_template : unit_template;
    if (id > 0) {
      unit.layers = units[static_cast<std::size_t>(id - 1)];
      unit.name = model.layers[unit.layers.begin].name +
                  (unit.layers.end - unit.layers.begin > 1 ? "-" + model.layers[unit.layers.end - 1].name : "");
      if (!kept_gathered.empty() && kept_gathered[static_cast<std::size_t>(id - 1)]) {
        unit.reshard_after_forward.enabled = false;
      }
    }
    // FSDP's one-ahead prefetch (as default_plan sets it).
    unit.forward_prefetch.clear();
    unit.backward_prefetch.clear();
    if (id + 1 < count) unit.forward_prefetch = {id + 1};
    if (id == 0 && count > 1) unit.backward_prefetch = {count - 1};
    if (id >= 2) unit.backward_prefetch = {id - 1};
    plan.units.push_back(std::move(unit));
  }
  return plan;
}

double modelled_step_time_s(const ModelSpec& model, const Plan& plan_template, const HardwareProfile& profile,
                            int world_size, int gpus_per_node, const std::vector<LayerRange>& units,
                            const std::vector<bool>& kept_gathered) {
  StepTerms terms(model, plan_template, profile, world_size, gpus_per_node);
  SHARDPLAN_CHECK(kept_gathered.empty() || kept_gathered.size() == units.size(), "one kept flag per unit");
  const auto kept = [&](std::size_t k) { return !kept_gathered.empty() && kept_gathered[k]; };
  std::vector<const UnitCost*> costs;
  std::size_t block = 0;
  for (const auto& range : units) {
    costs.push_back(&terms.unit(block, range.end - range.begin));
    block += range.end - range.begin;
  }
  SHARDPLAN_CHECK(!costs.empty() && block == terms.block_count(), "units must cover every block");
  const std::size_t count = costs.size();
  // Whether unit k issues the next unit's all-gather in forward (its prefetch, after its wait).
  const auto prefetches = [&](std::size_t k) { return k + 1 < count && costs[k + 1]->gather_forward_s > 0; };
  double total = terms.head_terms(*costs.front(), prefetches(0)) + terms.turn_terms(*costs.back(), kept(count - 1));
  for (std::size_t k = 0; k < count; ++k) {
    total += terms.forward_step(*costs[k], k + 1 < count ? costs[k + 1]->gather_forward_s : 0.0,
                                k + 1 < count && prefetches(k + 1)) +
             terms.optimizer_time_s(costs[k]->optimizer_elements);
  }
  double backlog = 0, replica_backlog = 0;
  for (std::size_t k = count; k-- > 1;) {
    const auto step = terms.backward_step(*costs[k], kept(k - 1) ? 0.0 : costs[k - 1]->gather_backward_s, backlog,
                                          replica_backlog);
    total += step.step_s;
    backlog = step.backlog_s;
    replica_backlog = step.replica_backlog_s;
  }
  return total + terms.close_terms(*costs.front(), backlog, replica_backlog);
}

WrapDpResult best_wrapping(const ModelSpec& model, const Plan& plan_template, const HardwareProfile& profile,
                           int world_size, int gpus_per_node, const WrapDpOptions& options) {
  WrapContext context(model, plan_template, profile, world_size, gpus_per_node, options.max_unit_blocks, 0, false);
  const DpAnswer answer = label_dp(context, false);
  WrapDpResult result;
  result.found = answer.found;
  result.units = to_units(context.terms, answer.choices);
  result.modelled_step_s = answer.modelled_step_s;
  return result;
}

bool wrap_model_is_lower_bound(const Plan& plan_template) {
  const PlanUnit& unit = plan_template.units.at(plan_template.units.size() > 1 ? 1 : 0);
  return !unit.reshard_after_forward.keeps_partial_copy();
}

bool wrap_model_is_exact(const Plan& plan_template, int world_size, int gpus_per_node, const HardwareProfile& profile) {
  if (!wrap_model_is_lower_bound(plan_template)) return false;
  if (profile.overlap_collective_slowdown > 1.0) return false;  // Note [Collective slowdown]
  if (plan_template.offload.params || plan_template.offload.optimizer) return false;  // host copies
  // Micro-batches that reduce leave reductions queued into the next one's forward.
  if (plan_template.grad_accumulation_steps > 1 && !plan_template.training.no_sync_accumulation) return false;
  const PlanUnit& unit = plan_template.units.at(plan_template.units.size() > 1 ? 1 : 0);
  const ShardingLayout layout = resolve_sharding(unit.strategy, world_size, gpus_per_node);
  return !(layout.grads_sharded() && world_size / layout.grad_group > 1);  // HSDP's second reduction stream
}

std::int64_t memory_floor_bytes(const ModelSpec& model, const Plan& plan_template, const HardwareProfile& profile,
                                int world_size, int gpus_per_node, const std::vector<LayerRange>& units,
                                const std::vector<bool>& kept_gathered, bool neighbours_gathered) {
  WrapContext context(model, plan_template, profile, world_size, gpus_per_node, 1, 0, false);
  context.neighbours_gathered = neighbours_gathered;
  std::vector<UnitChoice> choices;
  std::size_t block = 0;
  const bool template_kept = context.template_kept;
  for (std::size_t k = 0; k < units.size(); ++k) {
    const std::size_t length = units[k].end - units[k].begin;
    choices.push_back({block, length, kept_gathered.empty() ? template_kept : static_cast<bool>(kept_gathered[k])});
    block += length;
  }
  SHARDPLAN_CHECK(!choices.empty() && block == context.n, "units must cover every block");
  std::int64_t persistent = 0;
  for (const auto& choice : choices) persistent += context.floor.sizes(choice.first_block, choice.length).persistent;
  // With no cap the budget is a large constant B: the slack is B less the largest term.
  return context.floor.constant_bytes() + persistent + (context.budget_bytes - context.wrapping_slack(choices));
}

}  // namespace shardplan
