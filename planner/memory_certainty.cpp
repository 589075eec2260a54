// MemoryCertainty (Note [Certainly live]): one pass along the compute stream, growing the set of ops it waited for.
#include "memory_certainty.h"

#include <algorithm>
#include <span>

namespace shardplan {

MemoryCertainty::MemoryCertainty(const StepSchedule& schedule, int owner, unsigned excluded) {
  const auto& ops = schedule.ops;
  const std::size_t count = ops.size();
  const auto owned = [&](const Op& op, const MemoryChange& change) {
    const int unit = change.owner_unit >= 0 ? change.owner_unit : op.unit;
    return owner < 0 ? unit < 0 || unit >= 32 || (excluded >> static_cast<unsigned>(unit) & 1u) == 0 : unit == owner;
  };
  const auto sum = [&](const Op& op, std::span<const MemoryChange> changes) {
    std::int64_t bytes = 0;
    for (const MemoryChange& change : changes) bytes += owned(op, change) ? change.bytes : 0;
    return bytes;
  };
  frees_before_.assign(count + 1, 0);
  frees_at_start_.assign(count, 0);
  certain_after_.assign(count, 0);
  last_compute_before_.assign(count + 1, -1);
  std::vector<int> previous_on_stream(count, -1);
  std::vector<int> last_of(kStreamCount, -1);
  for (std::size_t index = 0; index < count; ++index) {
    const Op& op = ops[index];
    frees_at_start_[index] = sum(op, op.frees_at_start);
    frees_before_[index + 1] = frees_before_[index] + frees_at_start_[index] + sum(op, op.frees);
    auto& last = last_of[static_cast<std::size_t>(op.stream)];
    previous_on_stream[index] = last;
    last = static_cast<int>(index);
    last_compute_before_[index + 1] = op.stream == StreamKind::compute ? static_cast<int>(index)
                                                                       : last_compute_before_[index];
  }
  // The ops each compute op waited for include those the one before it on the stream waited for: the set only grows.
  std::vector<bool> waited(count, false);
  std::int64_t certain = 0;
  std::vector<int> stack;
  for (std::size_t index = 0; index < count; ++index) {
    if (ops[index].stream != StreamKind::compute) continue;
    stack.push_back(static_cast<int>(index));
    while (!stack.empty()) {
      const auto at = static_cast<std::size_t>(stack.back());
      stack.pop_back();
      if (waited[at]) continue;
      waited[at] = true;
      certain += sum(ops[at], ops[at].allocates);
      for (int dep : ops[at].deps) {
        if (!waited[static_cast<std::size_t>(dep)]) stack.push_back(dep);
      }
      if (previous_on_stream[at] >= 0 && !waited[static_cast<std::size_t>(previous_on_stream[at])]) {
        stack.push_back(previous_on_stream[at]);
      }
    }
    certain_after_[index] = certain;
  }
}

std::int64_t MemoryCertainty::before(int point) const {
  const int last = last_compute_before_[static_cast<std::size_t>(point)];
  const std::int64_t certain = last >= 0 ? certain_after_[static_cast<std::size_t>(last)] : 0;
  return std::max<std::int64_t>(0, certain - frees_before_[static_cast<std::size_t>(point)]);
}

std::int64_t MemoryCertainty::most_at_compute_ops(int begin, int end) const {
  std::int64_t most = 0;
  for (int index = begin; index < end; ++index) {
    const auto at = static_cast<std::size_t>(index);
    if (last_compute_before_[at + 1] != index) continue;  // not a compute op
    most = std::max(most, certain_after_[at] - frees_before_[at] - frees_at_start_[at]);
  }
  return most;
}

}  // namespace shardplan
