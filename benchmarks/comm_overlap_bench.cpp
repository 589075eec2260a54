// comm_overlap_bench: how well each asynchrony mechanism of the MPI communicator hides a collective behind compute.
//
// Run under `mpirun -np 2` (built as tests/mpi/comm_overlap_bench; `meson test --benchmark --suite mpi`). For each
// message size S (nccl-tests' convention: the gathered output of an all-gather, the input of a reduce-scatter) it
// measures, with a busy arithmetic loop that never enters MPI (fixed work, calibrated once on rank 0 to last about as
// long as the collective):
//   compute   the loop alone
//   comm      issue + wait with nothing in between
//   overlap   issue, run the loop, wait
// and reports overlap efficiency = (compute + comm − overlap) / min(compute, comm): 1 = the shorter of the two is
// completely hidden, 0 = they ran one after the other; and "vs serial" = overlap / (compute + the fastest mechanism's
// comm), the step time that decides (lower is better). Times are the slowest rank's, median over repetitions that
// interleave the mechanisms.
// Mechanisms (Note [Progress] in executor/comm/mpi_communicator.h):
//   nonblocking       MPI_Iallgather, progress only in wait()
//   nonblocking+poll  MPI_Iallgather, CommHandle::test() between 64 chunks of the loop (what a runner can do between
//                     layers)
//   comm_thread       blocking MPI_Allgather on the communicator's thread (MPI_THREAD_MULTIPLE)
// Options: --reps N (default 21), --collective all_gather|reduce_scatter|all_reduce, --sizes B1,B2,... (bytes).
//
// Measured in the development container: 2 shared cores, so `-np 2` fills them (and other builds were running beside
// it, load ≈ 4); Open MPI 4.1.4 with its default vader + self transports. One all_gather run:
//   mechanism          S (bytes)  compute ms   comm ms overlapped ms  overlap  vs serial
//   nonblocking           262144       0.019     0.021         0.044     -22%       1.10
//   nonblocking+poll      262144       0.019     0.026         0.044       2%       1.11
//   comm_thread           262144       0.019     0.023         0.035      36%       0.88
//   nonblocking          1048576       0.079     0.084         0.176     -16%       1.09
//   nonblocking+poll     1048576       0.079     0.097         0.174       3%       1.08
//   comm_thread          1048576       0.079     0.082         0.149      15%       0.92
//   nonblocking         33554432      42.421    38.075        69.117      30%       0.92
//   nonblocking+poll    33554432      42.421    34.151        65.453      33%       0.87
//   comm_thread         33554432      42.421    32.524        69.633      16%       0.93
// Medians of "vs serial" over 10 all_gather and 4 reduce_scatter runs (8 MiB left out: bimodal, 1 to 13 ms for the
// same collective, as the ranks lose their cores to the other load for whole scheduler slices):
//                    all_gather                                   reduce_scatter
//   S         nonblocking  +poll  comm_thread              nonblocking  +poll  comm_thread
//   256 KiB   1.12         1.10   0.88                     0.98         0.89   1.11
//   1 MiB     1.06         1.04   0.95                     1.00         0.96   1.29
//   32 MiB    1.01         0.95   0.95                     1.02         0.92   1.00
// Fastest overall per run: nonblocking+poll 7 of 14, comm_thread 4, nonblocking 3. With every core running a rank's
// compute there is no idle core for a transfer the CPU itself copies (and, for reduce-scatter, sums), so nothing hides
// much; the comm thread helps latency-bound small all-gathers but, spinning in MPI on the compute thread's core (mpirun
// binds each rank to one core at -np ≤ 2), it loses on reduce-scatter, the reduction being compute it steals. Hence
// MpiCommOptions defaults to nonblocking, and a runner polls CommHandle::test() between layers. A comm thread polling
// MPI_Test with a yield or a 50 µs sleep in between was tried too: no better than blocking (yield) or much worse for
// small messages (the sleep's latency floor), so it was dropped. On a node with spare cores per rank, rerun with
// `mpirun --bind-to none` before changing the default.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "errors.h"
#include "mpi_communicator.h"
#include "mpi_session.h"

using namespace shardplan::comm;

namespace {

using Clock = std::chrono::steady_clock;

struct BenchOptions {
  int reps = 21;
  std::string collective = "all_gather";
  std::vector<std::size_t> sizes = {256u << 10, 1u << 20, 8u << 20, 32u << 20};
};

struct Variant {
  const char* name;
  MpiCommOptions options;
  bool poll;  // the compute loop calls CommHandle::test() between chunks
};

std::vector<Variant> all_variants() {
  return {
      {"nonblocking", MpiCommOptions{AsyncMechanism::nonblocking}, false},
      {"nonblocking+poll", MpiCommOptions{AsyncMechanism::nonblocking}, true},
      {"comm_thread", MpiCommOptions{AsyncMechanism::comm_thread}, false},
  };
}

struct OverlapResult {
  double compute_s = 0;
  double comm_s = 0;
  double overlap_s = 0;
  double efficiency() const {
    const double shorter = std::min(compute_s, comm_s);
    return shorter > 0 ? (compute_s + comm_s - overlap_s) / shorter : 0.0;
  }
};

constexpr int kChunks = 64;

// Fixed arithmetic work, a dependent chain the compiler cannot shorten; `volatile` keeps the result alive.
double busy_chunk(std::size_t iterations) {
  double x = 1.0;
  for (std::size_t i = 0; i < iterations; ++i) x = x * 1.0000001 + 1e-9;
  return x;
}

volatile double g_sink = 0;  // NOLINT: the benchmark's only global, a sink for the compute loop

BenchOptions parse(int argc, char** argv) {
  BenchOptions options;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--reps") {
      options.reps = std::max(1, std::atoi(value.c_str()));
    } else if (flag == "--collective") {
      options.collective = value;
    } else if (flag == "--sizes") {
      options.sizes.clear();
      std::size_t start = 0;
      while (start <= value.size()) {
        const std::size_t end = std::min(value.find(',', start), value.size());
        options.sizes.push_back(std::stoull(value.substr(start, end - start)));
        start = end + 1;
      }
    } else {
      throw shardplan::InputError("unknown flag " + flag + ": expected --reps, --collective or --sizes");
    }
  }
  return options;
}

// The collective under test on buffers sized for S bytes of message.
struct Buffers {
  std::vector<float> send, recv;
  std::size_t count = 0;  // per-rank count (all-gather, reduce-scatter) or buffer count (all-reduce)
};

Buffers make_buffers(const std::string& collective, std::size_t message_bytes, int ranks) {
  Buffers b;
  const std::size_t total = message_bytes / sizeof(float);
  const std::size_t n = static_cast<std::size_t>(ranks);
  b.count = collective == "all_reduce" ? total : total / n;
  b.send.assign(collective == "all_gather" ? b.count : collective == "all_reduce" ? b.count : b.count * n, 1.0f);
  b.recv.assign(collective == "all_gather" ? b.count * n : b.count, 0.0f);
  return b;
}

CommHandle issue(Communicator& comm, const std::string& collective, Buffers& b) {
  if (collective == "all_gather") return comm.all_gather(b.send.data(), b.count, b.recv.data());
  if (collective == "reduce_scatter") return comm.reduce_scatter(b.send.data(), b.recv.data(), b.count);
  if (collective == "all_reduce") return comm.all_reduce(b.send.data(), b.count);
  throw shardplan::InputError("unknown collective " + collective);
}

void compute(std::size_t chunk_iterations, CommHandle* poll) {
  double sum = 0;
  for (int c = 0; c < kChunks; ++c) {
    sum += busy_chunk(chunk_iterations);
    if (poll != nullptr) poll->test();
  }
  g_sink = sum;
}

// The slowest rank's time: a collective step is over when its last rank is done.
double slowest(double seconds) {
  double max = 0;
  MPI_Allreduce(&seconds, &max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return max;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// One timed run of `body`, started together on all ranks, as the slowest rank saw it.
template <typename Body>
double sample(Communicator& comm, Body body) {
  comm.barrier();
  const auto start = Clock::now();
  body();
  return slowest(std::chrono::duration<double>(Clock::now() - start).count());
}

template <typename Body>
double median_time(Communicator& comm, int reps, Body body) {
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) samples.push_back(sample(comm, body));
  return median(samples);
}

// Iterations per chunk so that kChunks chunks take about `seconds`, agreed on by all ranks (rank 0's calibration).
std::size_t calibrate_chunk(double seconds) {
  constexpr std::size_t kProbe = 2'000'000;
  const auto start = Clock::now();
  g_sink = busy_chunk(kProbe);
  const double rate = kProbe / std::chrono::duration<double>(Clock::now() - start).count();
  unsigned long long iterations = static_cast<unsigned long long>(std::max(1.0, rate * seconds / kChunks));
  MPI_Bcast(&iterations, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  return static_cast<std::size_t>(iterations);
}

}  // namespace

int main(int argc, char** argv) {
  MpiSession session(&argc, &argv);
  try {
    const BenchOptions options = parse(argc, argv);
    const bool root = session.world_rank() == 0;
    if (root) {
      std::printf("# %s overlap, %d ranks, median of %d interleaved repetitions, slowest rank; compute = busy loop in "
                  "%d chunks, sized to the non-blocking collective's time\n",
                  options.collective.c_str(), session.world_size(), options.reps, kChunks);
      std::printf("%-17s %10s %11s %9s %13s %8s %10s\n", "mechanism", "S (bytes)", "compute ms", "comm ms",
                  "overlapped ms", "overlap", "vs serial");
    }
    std::vector<Variant> variants = all_variants();
    std::vector<double> efficiency_sum(variants.size(), 0.0);
    std::vector<double> ratio_sum(variants.size(), 0.0);
    for (const std::size_t bytes : options.sizes) {
      Buffers buffers = make_buffers(options.collective, bytes, session.world_size());
      std::vector<std::unique_ptr<MpiCommunicator>> comms;
      for (const Variant& v : variants) {
        comms.push_back(std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, v.options));
        issue(*comms.back(), options.collective, buffers).wait();  // warm-up: connections, first-touch pages
      }
      // Compute sized to the plain non-blocking collective, so neither side dominates the efficiency.
      const double reference =
          median_time(*comms[0], options.reps, [&] { issue(*comms[0], options.collective, buffers).wait(); });
      const std::size_t chunk = calibrate_chunk(reference);
      // Interleaved: every repetition measures every variant, so a burst of load on the (shared) machine lands on all
      // of them instead of on whichever ran at that moment.
      std::vector<double> compute_samples;
      std::vector<std::vector<double>> comm_samples(variants.size()), overlap_samples(variants.size());
      for (int rep = 0; rep < options.reps; ++rep) {
        compute_samples.push_back(sample(*comms[0], [&] { compute(chunk, nullptr); }));
        for (std::size_t v = 0; v < variants.size(); ++v) {
          Communicator& comm = *comms[v];
          comm_samples[v].push_back(sample(comm, [&] { issue(comm, options.collective, buffers).wait(); }));
          overlap_samples[v].push_back(sample(comm, [&] {
            CommHandle handle = issue(comm, options.collective, buffers);
            compute(chunk, variants[v].poll ? &handle : nullptr);
            handle.wait();
          }));
        }
      }
      // The efficiency flatters a mechanism whose collective alone is slow (a sleeping poller), so the decision uses
      // the step time itself: overlapped / (compute + the fastest mechanism's collective alone), lower is better.
      double best_comm = median(comm_samples[0]);
      for (const auto& samples : comm_samples) best_comm = std::min(best_comm, median(samples));
      for (std::size_t v = 0; v < variants.size(); ++v) {
        OverlapResult result;
        result.compute_s = median(compute_samples);
        result.comm_s = median(comm_samples[v]);
        result.overlap_s = median(overlap_samples[v]);
        const double vs_serial = result.overlap_s / (result.compute_s + best_comm);
        efficiency_sum[v] += result.efficiency();
        ratio_sum[v] += vs_serial;
        if (root) {
          std::printf("%-17s %10zu %11.3f %9.3f %13.3f %7.0f%% %10.2f\n", variants[v].name, bytes,
                      result.compute_s * 1e3, result.comm_s * 1e3, result.overlap_s * 1e3, result.efficiency() * 100,
                      vs_serial);
        }
      }
    }
    if (root) {
      std::printf("# mean overlap efficiency over sizes:");
      for (std::size_t v = 0; v < variants.size(); ++v) {
        const double mean = efficiency_sum[v] / static_cast<double>(options.sizes.size());
        std::printf(" %s %.0f%%;", variants[v].name, mean * 100);
      }
      std::printf("\n# mean step time vs serial (lower is better):");
      std::size_t best = 0;
      for (std::size_t v = 0; v < variants.size(); ++v) {
        std::printf(" %s %.2f;", variants[v].name, ratio_sum[v] / static_cast<double>(options.sizes.size()));
        if (ratio_sum[v] < ratio_sum[best]) best = v;
      }
      std::printf("\n# fastest: %s\n", variants[best].name);
    }
  } catch (const shardplan::Error& e) {
    std::fprintf(stderr, "comm_overlap_bench: %s (%s)\n", e.what(), e.raised_at().c_str());
    MPI_Abort(MPI_COMM_WORLD, e.rank() >= 0 ? 1 : 2);
  }
  return 0;
}
