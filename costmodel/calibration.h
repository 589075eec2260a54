// Calibration: fitting the cost model's parameters (α, β per link tier and per collective × group size; compute and
// memory rates with efficiency by op size) to measured samples, and the calibrated profile's JSON.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "collective_cost.h"
#include "compute_cost.h"
#include "hardware_profile.h"

namespace shardplan {

struct CollectiveSample {
  CollectiveKind kind = CollectiveKind::all_gather;
  int ranks = 2;
  bool spans_nodes = false;
  std::int64_t message_bytes = 0;  // S as nccl-tests defines it
  double time_s = 0;
  // Seconds of it during which its rank computed (Note [Collective slowdown]); 0 in sweeps.
  double compute_overlap_s = 0;
};

// One timed compute op (a layer pass, or a GEMM of a sweep) with the kernels the op-level model says it ran
// (pass_kernels.h).
struct ComputeSample {
  double flops = 0;  // GEMM + attention FLOPs
  double time_s = 0;
  std::string name = {};  // what ran ("decoder_block backward, 512 tokens"); empty for trace ops
  // Seconds of the op during which a collective of its rank was in flight (the simulator's rule: the busiest
  // communication stream's covered time); 0 in sweeps, where nothing else runs.
  double overlap_s = 0;
  // Bytes the op zero-filled before its work (a unit's first backward op fills its gradient buffer: Op::zeroed_bytes);
  // calibrate() takes their fill time at the fitted memory rate off before fitting the compute rate.
  std::int64_t zeroed_bytes = 0;
  double gemm_count = 1;        // GEMM kernels in the op: each pays the fixed cost f½ / R
  double attention_flops = 0;   // of `flops`, flash attention's, in its length- and head-dimension-scaled work
  double memory_bytes = 0;      // the memory-bound kernels' traffic, fitted at its own rate (RateFit::memory_per_s)
};

// A compute sample of an op whose kernels are `kernels` (pass_kernels.h), measured at `time_s`: its GEMM FLOPs and
// count, its flash attention work scaled to the plateau (attention_rate_share under `base`) and its memory traffic.
ComputeSample compute_sample(const PassKernels& kernels, double time_s, const HardwareProfile& base);

struct MemorySample1D {  // memory-bound work (the optimizer step)
  double bytes = 0;
  double time_s = 0;
  std::string name = {};
};

// t = α · steps(n) + bus_factor(n) · S / B + (1 − 1/s) · o, fitted by weighted least squares (weights 1/t: relative
// errors count equally; Eigen's column-pivoting QR), o the seconds its rank computed beside it and s the collective
// slowdown (Note [Collective slowdown]). α, B and s come back with the relative RMS and largest residual. With
// `progress_lost` (1 − 1/s) given, s is taken as that, not fitted (cells use the profile's one s).
struct LinkFit {
  double latency_s = 0;
  double bus_bytes_per_s = 0;
  double overlap_slowdown = 1.0;
  bool overlap_fitted = false;  // s came from these samples (their overlaps differ)
  double rms_relative_residual = 0;
  double max_relative_residual = 0;  // the worst |predicted − measured| / measured over the samples
  std::size_t samples = 0;
};
LinkFit fit_link(const std::vector<CollectiveSample>& samples, std::optional<double> progress_lost = {});
// The fitted model's time for `sample` (its kind, ranks and S).
double predicted_time_s(const LinkFit& fit, const CollectiveSample& sample);

// One (collective, group size, tier) cell of the measurements and its own α-β fit: a ring of 2 ranks and one of 8, or
// an all-gather and an all-reduce, need not reach the same α and busbw (MPI picks different algorithms by size and
// rank count), so each cell is fitted on its own and reported beside the pooled per-tier fit the profile carries.
struct CollectiveFit {
  CollectiveKind kind = CollectiveKind::all_gather;
  int ranks = 2;
  bool spans_nodes = false;
  LinkFit fit;
};
// One fit per distinct (kind, ranks, spans_nodes) among the usable samples (ranks > 1, time > 0), ordered by kind,
// then tier, then ranks.
std::vector<CollectiveFit> fit_collectives(const std::vector<CollectiveSample>& samples,
                                           std::optional<double> progress_lost = {});
// The cell of `sample`, or nullptr when `fits` has none.
const CollectiveFit* find_collective_fit(const std::vector<CollectiveFit>& fits, const CollectiveSample& sample);

// Memory-bound work: t = bytes / R (through the origin, weights 1/t). Compute (the op-level model, compute_cost.h):
// t = (GEMM FLOPs + GEMMs × f½) / R + attention work / R_attention + memory-bound bytes / R_memory, each GEMM's
// fixed cost f½ / R — linear in the unknowns, so all come out of one least-squares fit. Attention gets its own rate
// only when the samples separate it (flash kernels in some ops and not in proportion to their GEMMs); otherwise it
// runs at R. R_memory is the executor's own rate for the bytes the model counts for its elementwise kernels.
struct RateFit {
  double per_s = 0;                  // FLOP/s, or bytes/s for memory-bound work
  double half_efficiency_flops = 0;  // compute only: f½ per GEMM
  double attention_per_s = 0;        // compute only: flash attention's plateau rate, 0 when not separated
  double memory_per_s = 0;           // compute only: the layer passes' memory-bound bytes per second, 0 when unseen
  // Compute only: t = (f + f½) / R + (s − 1) · overlap, the simulator's stretch of the part of an op that overlaps a
  // collective (HardwareProfile's overlap slowdowns: every kernel kind's). Fitted when the samples' overlaps differ (1
  // when the fit finds overlap no slower; overlap_fitted still, since the rate assumes it); not fitted when they do
  // not (a sweep).
  double overlap_slowdown = 1.0;
  bool overlap_fitted = false;
  double rms_relative_residual = 0;
  double max_relative_residual = 0;
  std::size_t samples = 0;
};
RateFit fit_compute_rate(const std::vector<ComputeSample>& samples);
RateFit fit_memory_rate(const std::vector<MemorySample1D>& samples);
// (work + f½) / R + (s − 1) · overlap: the fitted time of `work` FLOPs in one GEMM (or bytes, with f½ = 0, no
// overlap term).
double predicted_time_s(const RateFit& fit, double work, double overlap_s = 0.0);
// The fitted time of a compute sample's FLOPs (its GEMMs, their count, its attention work) and overlap; its memory
// traffic and fill are not included.
double predicted_compute_s(const RateFit& fit, const ComputeSample& sample);
// The fraction of the fitted rate that work of this size reaches: f / (f + f½) (HardwareProfile's efficiency curve
// with the maximum folded into the rate).
double fitted_efficiency(const RateFit& fit, double work);

// A gap on one rank's compute stream between two consecutive compute-stream ops, where none of the second op's
// dependencies was still running when the first ended: host time only — the collectives issued in it (their MPI calls
// and buffers) and the runner's bookkeeping between ops.
struct IssueGapSample {
  int collectives_issued = 0;
  double gap_s = 0;
};

// gap = c + o · collectives_issued by least squares, unweighted (the gaps are small absolute times and many are near
// 0, so relative weights would be dominated by those). o is HardwareProfile::collective_issue_overhead_s; fitted only
// when some gaps issued collectives and some did not, and never negative (0 when issuing costs nothing measurable).
struct IssueFit {
  double per_collective_s = 0;  // o
  double per_gap_s = 0;         // c: what a gap costs with nothing issued
  double rms_residual_s = 0;
  std::size_t samples = 0;
  bool fitted = false;
};
IssueFit fit_issue_overhead(const std::vector<IssueGapSample>& samples);

struct CalibrationSamples {
  std::vector<CollectiveSample> intra_node, inter_node;
  std::vector<ComputeSample> compute;  // whole layer passes: what the simulator times (the profile's compute rate)
  std::vector<ComputeSample> gemm;     // single GEMMs (microbenchmarks): fitted and reported, not applied
  std::vector<MemorySample1D> memory;
  std::vector<IssueGapSample> issue_gaps;  // measured timelines only
  std::int64_t measured_peak_bytes = 0;    // the tracked peak of the runs
  std::int64_t predicted_peak_bytes = 0;   // the schedule's peak without the overhead term
};

struct Calibration {
  HardwareProfile profile;
  LinkFit intra_node, inter_node;          // pooled over collectives and group sizes: what the profile takes
  std::vector<CollectiveFit> collectives;  // per collective × group size × tier
  RateFit compute, gemm, memory;
  IssueFit issue;
  bool collective_slowdown_fitted = false;  // profile.overlap_collective_slowdown came from these samples
  CalibrationSamples samples;              // the raw samples, written out with the fit
};

// Replaces the fitted parameters of `base` (those with enough samples; others keep their values). Fitted rates are
// effective rates, so efficiencies become 1 and the small-size communication curve flat; the compute curve keeps the
// fitted half-efficiency size. The overhead becomes the measured peak minus the schedule's peak without it (never
// negative).
Calibration calibrate(const HardwareProfile& base, const CalibrationSamples& samples, const std::string& source);

// Where the samples were measured.
struct MachineInfo {
  std::string host;     // host name of rank 0
  std::string cpu;      // processor model, when known
  int nodes = 1;
  int ranks = 1;
};

// `shardplan.profile/v1` plus the keys apply_profile_json reserves: "fits" (pooled tiers, per collective × group size,
// compute, gemm, memory, each with residuals and sample counts), "samples" (every raw sample with its fitted time and
// relative residual), "machine" and "date".
nlohmann::json to_json(const Calibration& calibration, const MachineInfo& machine, const std::string& date);

}  // namespace shardplan
