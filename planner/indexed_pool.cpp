// run_indexed (Note [Indexed pool] in indexed_pool.h).
#include "indexed_pool.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>
#include <vector>

namespace shardplan {

void run_indexed(std::size_t count, std::size_t threads, const std::function<void(std::size_t)>& task) {
  if (count == 0) return;
  std::vector<std::exception_ptr> failures(count);
  std::atomic<std::size_t> next_index{0};
  std::atomic<bool> failed{false};
  const auto worker = [&]() {
    while (!failed) {
      const std::size_t index = next_index++;
      if (index >= count) return;
      try {
        task(index);
      } catch (...) {
        failures[index] = std::current_exception();
        failed = true;
      }
    }
  };
  {
    std::vector<std::jthread> pool;
    const std::size_t workers = std::clamp<std::size_t>(threads, 1, count);
    for (std::size_t thread = 1; thread < workers; ++thread) pool.emplace_back(worker);
    worker();
  }  // the jthreads join here
  for (const std::exception_ptr& failure : failures) {
    if (failure) std::rethrow_exception(failure);
  }
}

}  // namespace shardplan
