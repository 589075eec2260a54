// The microbenchmark timer: warm-up, barrier, timed loop, slowest rank's mean per iteration.
#include "bench_timer.h"

#include <chrono>

#include "errors.h"

namespace shardplan::bench {

double time_iterations_s(comm::Communicator& world, const TimingOptions& options, const std::function<void()>& body) {
  SHARDPLAN_CHECK(options.iters >= 1 && options.warmup_iters >= 0, "timing needs at least one timed iteration");
  for (int i = 0; i < options.warmup_iters; ++i) body();
  world.barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < options.iters; ++i) body();
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  std::vector<double> mean_s = {elapsed.count() / options.iters};
  max_over_ranks(world, mean_s);
  return mean_s.front();
}

void max_over_ranks(comm::Communicator& world, std::vector<double>& values) {
  if (world.size() == 1 || values.empty()) return;
  std::vector<float> buffer(values.begin(), values.end());
  world.all_reduce(buffer.data(), buffer.size(), comm::ReduceOp::max).wait();
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = buffer[i];
}

}  // namespace shardplan::bench
