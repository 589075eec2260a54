// Formatting the benchmark tables and the fitted parameters as aligned text.
#include "bench_report.h"

#include <cstdio>

namespace shardplan::bench {
namespace {

constexpr double kGiga = 1e9;  // nccl-tests reports GB/s as 10⁹ bytes per second

std::string printf_string(const char* format, auto... args) {
  const int length = std::snprintf(nullptr, 0, format, args...);
  std::string text(static_cast<std::size_t>(length) + 1, '\0');
  std::snprintf(text.data(), text.size(), format, args...);
  text.pop_back();
  return text;
}

const char* tier_name(bool spans_nodes) { return spans_nodes ? "inter" : "intra"; }

std::string link_line(const char* collective, const std::string& ranks, const char* tier, const LinkFit& fit) {
  return printf_string("  %-14s %5s  %-6s %10.2f %12.3f %9.1f%% %9.1f%% %8zu\n", collective, ranks.c_str(),
                       tier, fit.latency_s * 1e6, fit.bus_bytes_per_s / kGiga, 100 * fit.rms_relative_residual,
                       100 * fit.max_relative_residual, fit.samples);
}

std::string rate_line(const char* what, const RateFit& fit, bool compute) {
  if (fit.samples == 0) return printf_string("  %-8s no samples\n", what);
  if (!compute) {
    return printf_string("  %-8s R = %.3f GB/s                                rms %.1f%%, max %.1f%%, %zu samples\n",
                         what, fit.per_s / kGiga, 100 * fit.rms_relative_residual, 100 * fit.max_relative_residual,
                         fit.samples);
  }
  return printf_string("  %-8s R = %.3f GFLOP/s, f_half = %.4g FLOP   rms %.1f%%, max %.1f%%, %zu samples\n", what,
                       fit.per_s / kGiga, fit.half_efficiency_flops, 100 * fit.rms_relative_residual,
                       100 * fit.max_relative_residual, fit.samples);
}

}  // namespace

std::string comm_table_header() {
  return "#\n"
         "# collectives (nccl-tests convention: algbw = S/t, busbw = algbw x (n-1)/n for all_gather and\n"
         "# reduce_scatter, x 2(n-1)/n for all_reduce; time = mean per iteration of the slowest rank)\n"
         "#\n"
         "#  collective     ranks  tier        size(B)  count(elems)    time(us)  algbw(GB/s)  busbw(GB/s)\n";
}

std::string format_comm_row(const CommRow& row) {
  const std::string ranks = std::to_string(row.group.ranks) + (row.group.strided ? "s" : "");
  return printf_string("   %-14s %5s  %-6s %12lld  %12lld  %10.2f  %11.3f  %11.3f\n", to_string(row.collective),
                       ranks.c_str(), tier_name(row.group.spans_nodes), static_cast<long long>(row.bytes),
                       static_cast<long long>(row.count), row.time_s * 1e6, row.algbw_bytes_per_s / kGiga,
                       row.busbw_bytes_per_s / kGiga);
}

std::string kernel_table_header() {
  return "#\n"
         "# kernels (CPU runtime, fp32; FLOPs as the simulator counts them; time = mean per iteration of the slowest "
         "rank)\n"
         "#\n"
         "#  kernel                                             class     size        work    time(us)          rate\n";
}

std::string format_kernel_row(const KernelRow& row) {
  std::string work = "-", rate = "-";
  if (row.kind == KernelClass::memory) {
    work = printf_string("%.3f MB", row.bytes / 1e6);
    if (row.time_s > 0) rate = printf_string("%.3f GB/s", row.bytes / row.time_s / kGiga);
  } else if (row.flops > 0) {
    work = printf_string("%.4f GFLOP", row.flops / kGiga);
    if (row.time_s > 0) rate = printf_string("%.3f GFLOP/s", row.flops / row.time_s / kGiga);
  }
  return printf_string("   %-50s %-7s %6lld %14s %10.2f %15s\n", row.name.c_str(), to_string(row.kind),
                       static_cast<long long>(row.size), work.c_str(), row.time_s * 1e6, rate.c_str());
}

std::string format_fits(const Calibration& calibration) {
  std::string text =
      "#\n"
      "# alpha-beta fits, t = steps(n)*alpha + bus_factor(n)*S/busbw, weighted least squares (weights 1/t);\n"
      "# residuals are relative, (fitted - measured) / measured\n"
      "#\n"
      "#  collective     ranks  tier    alpha(us)  busbw(GB/s)  rms resid  max resid  samples\n";
  for (const CollectiveFit& cell : calibration.collectives) {
    text += link_line(to_string(cell.kind), std::to_string(cell.ranks), tier_name(cell.spans_nodes), cell.fit);
  }
  text += "# pooled over collectives and group sizes (the profile's link tiers):\n";
  if (calibration.intra_node.samples > 0) text += link_line("intra_node", "all", "intra", calibration.intra_node);
  if (calibration.inter_node.samples > 0) text += link_line("inter_node", "all", "inter", calibration.inter_node);
  text +=
      "#\n"
      "# compute efficiency by op size, t = (f + f_half) / R, i.e. efficiency f / (f + f_half) of the rate R:\n";
  text += rate_line("layers", calibration.compute, true);
  text += rate_line("gemm", calibration.gemm, true);
  text += "# memory-bound work, t = bytes / R:\n";
  text += rate_line("memory", calibration.memory, false);
  return text;
}

}  // namespace shardplan::bench
