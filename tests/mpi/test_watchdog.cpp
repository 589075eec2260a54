// StepWatchdog (Note [Step watchdog]): fires once an armed phase overruns, naming the rank, the phase and the wait
// the communicator reported; never while disarmed; and waits of split groups are reported too.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "mpi_test_support.h"
#include "step_watchdog.h"

using namespace shardplan::comm;
using namespace shardplan::comm::testing;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// What an expiry handed over (the tests' `expire` records instead of aborting the job).
struct Expiries {
  std::mutex mutex;
  std::string message;
  std::atomic<int> count{0};
  StepWatchdog::Expire handler() {
    return [this](const std::string& text) {
      const std::lock_guard<std::mutex> lock(mutex);
      message = text;
      ++count;
    };
  }
};

}  // namespace

TEST_CASE("watchdog: an armed phase past its timeout is reported once, with the wait it is in") {
  Expiries expiries;
  auto watchdog = std::make_shared<StepWatchdog>(0.2, 7, expiries.handler());
  watchdog->arm("step 3");
  watchdog->waiting_on("all_gather of unit 'u' over ranks 0,1");
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  watchdog->done_waiting();
  watchdog->disarm();
  REQUIRE(expiries.count == 1);
  CHECK(contains(expiries.message, "rank 7: step 3 still running after "));
  CHECK(contains(expiries.message, "waiting "));
  CHECK(contains(expiries.message, " on all_gather of unit 'u' over ranks 0,1"));
  CHECK(contains(expiries.message, "a peer rank is stopped, hung or dead"));
}

TEST_CASE("watchdog: phases within the timeout, and time while disarmed, never fire") {
  Expiries expiries;
  StepWatchdog watchdog(0.3, 0, expiries.handler());
  for (int step = 0; step < 5; ++step) {
    const WatchedPhase phase(&watchdog, "step " + std::to_string(step));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // disarmed: not a phase
  CHECK(expiries.count == 0);
}

TEST_CASE("watchdog: the communicator reports its waits, and a split group inherits the observer") {
  auto world = make_world(AsyncMechanism::nonblocking);
  Expiries expiries;
  auto watchdog = std::make_shared<StepWatchdog>(60, world_rank(), expiries.handler());
  // An observer that records every report, standing in for the watchdog (whose reports are not readable).
  struct Recorder final : WaitObserver {
    std::vector<std::string> waits;
    void waiting_on(const std::string& what) override { waits.push_back(what); }
    void done_waiting() override { waits.push_back("done"); }
  };
  auto recorder = std::make_shared<Recorder>();
  world.set_wait_observer(recorder);
  std::vector<float> buffer(4, 1.0f);
  world.label_next("all_reduce of unit 'x'");
  world.all_reduce(buffer.data(), buffer.size()).wait();
  world.barrier();
  const auto child = world.split(0, world.rank());
  child->all_reduce(buffer.data(), buffer.size()).wait();
  REQUIRE(recorder->waits.size() == 6);
  CHECK(recorder->waits[0].starts_with("all_reduce of unit 'x' over ranks 0"));
  CHECK(recorder->waits[1] == "done");
  CHECK(recorder->waits[2].starts_with("a barrier over ranks 0"));
  CHECK(recorder->waits[4].starts_with("all_reduce of 4 elements over ranks 0"));
  world.set_wait_observer(watchdog);  // and the real one accepts the same reports without firing
  world.all_reduce(buffer.data(), buffer.size()).wait();
  CHECK(expiries.count == 0);
}
