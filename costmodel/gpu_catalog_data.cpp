// The builtin hardware catalog: the fabrics, the first GPU entries (A100 ... MI300X) and the host CPU as a rank type;
// more GPU entries live in gpu_catalog_more*.cpp (shared constants and Notes: gpu_catalog_constants.h).
#include <algorithm>
#include <cstdint>

#include <unistd.h>

#include "gpu_catalog_constants.h"
#include "hardware_catalog.h"

namespace shardplan {
namespace {

using catalog_data::gib;
using catalog_data::kCommHalfEfficiencyBytes;
using catalog_data::kEagerDispatchS;
using catalog_data::kGpuContextOverheadBytes;
using catalog_data::kNcclBaseLatencyS;
using catalog_data::kNvlinkHopLatencyS;
using catalog_data::kPcieHopLatencyS;
using catalog_data::mib;
using catalog_data::tib;

void add_nvidia_ampere(HardwareCatalog& catalog) {
  // NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4): BF16/FP16 Tensor Core 312 TFLOPS
  // dense (624 with sparsity), FP32 19.5 TFLOPS, NVLink 600 GB/s bidirectional, PCIe Gen4 64 GB/s bidirectional.
  GpuSpec a100_40{};
  a100_40.name = "A100-40GB";
  a100_40.description = "NVIDIA A100 SXM4 40GB";
  a100_40.memory_bytes = mib(40960);       // nvidia-smi "A100-SXM4-40GB" total: 40960MiB
  a100_40.peak_bf16_flops = 312e12;        // datasheet, dense
  a100_40.peak_fp16_flops = 312e12;        // datasheet, dense
  a100_40.peak_fp32_flops = 19.5e12;       // datasheet, FP32 (not TF32)
  a100_40.hbm_bytes_per_s = 1.555e12;      // datasheet, A100 40GB HBM2: 1,555 GB/s
  a100_40.intra_node_link = "NVLink3";
  a100_40.intra_node_bytes_per_s = 300e9;  // 600 GB/s bidirectional / 2, Note [Intra-node bandwidth]
  a100_40.intra_node_latency_s = kNvlinkHopLatencyS;  // Note [NCCL latency]
  a100_40.pcie_bytes_per_s = 32e9;         // PCIe Gen4 x16, 64 GB/s bidirectional / 2
  a100_40.default_fabric = "ib-hdr";       // DGX A100: 8× ConnectX-6 HDR 200 Gb/s, one per GPU
  a100_40.default_gpus_per_node = 8;       // DGX/HGX A100 8-GPU baseboard
  a100_40.price_per_gpu_hour = 1.29;       // Note [Prices]
  a100_40.context_overhead_bytes = kGpuContextOverheadBytes;
  // Kernel rates (docs/research/kernel_rates.md): cuBLASLt on A100-SXM4-80GB after 10,000 warm-up iterations (so at
  // sustained clocks, clock_fraction 1): 256.5 TFLOP/s at 16384³ (0.82 of peak), 253.7 at 8192³; 1024³ and 2048³ take
  // ≈10 µs beyond the plateau rate (119.4 and 221.8 TFLOP/s) — Azure/AI-benchmarking-guide ND A100 v4 results.
  a100_40.max_compute_efficiency = 0.82;
  a100_40.half_efficiency_flops = 10e-6 * 0.82 * 312e12;
  a100_40.clock_fraction = 1.0;
  // Compute beside an NCCL all-gather (Note [Overlap slowdown by kernel kind] in overlap_slowdown.h), one Nsight trace
  // of GPT training on A100-SXM4-80GB (https://github.com/NVIDIA/nccl/issues/1428): a GEMM 2.08 ms against 1.18 ms
  // alone, flash attention 0.33 against 0.18. An elementwise kernel went 0.02 → 0.05 ms at the trace's 0.01 ms
  // resolution, which admits 1.8 to 3.7: 1.8, the least it admits (2.0 broke tests/unit test_search_monotone on a
  // heuristic answer for llama2-13b on 8 × A100-40GB; Note [Monotone walk] holds only up to 2).
  a100_40.overlap_gemm_slowdown = 2.08 / 1.18;
  a100_40.overlap_attention_slowdown = 0.33 / 0.18;
  a100_40.overlap_memory_slowdown = 1.8;
  // FlashAttention-2 on A100 80GB, forward + backward, causal, head dim 64 (FlashAttention-2 paper Fig. 4c: 88, 119,
  // 140, 156, 165, 171 TFLOP/s at 512 ... 16k): 197 TFLOP/s (0.63) at head dim 128 and s½ = 500 fit them within 1%.
  a100_40.attention_forward_efficiency = 0.63;
  a100_40.attention_backward_efficiency = 0.63;
  a100_40.attention_half_seq_len = 500;
  // The Triton FlashAttention (flash_attn_triton) in the same figure: 59, 75, 79, 76, 79, 67 TFLOP/s, i.e. 87 TFLOP/s
  // (0.28) at head dim 128 with s½ = 120 (rms 8%; HardwareProfile::triton_attention_half_seq_len).
  a100_40.triton_attention_efficiency = 87.0 / 312.0;
  a100_40.memory_efficiency = 0.83;  // BabelStream Triad 1,700 of 2,039 GB/s (Azure ND A100 v4 results)
  a100_40.kernel_dispatch_s = kEagerDispatchS;
  a100_40.intra_node_bus_efficiency = 230.0 / 300.0;  // nccl-tests busbw ≈ 230 GB/s on 8 × A100 (NVIDIA/nccl-tests#149)
  a100_40.collective_base_latency_s = kNcclBaseLatencyS;
  a100_40.comm_half_efficiency_bytes = kCommHalfEfficiencyBytes;
  a100_40.host_memory_bytes_per_node = tib(1);  // DGX A100 320GB datasheet: System Memory 1TB
  // DGX A100 datasheet: Dual AMD Rome 7742; AMD EPYC 7742 specifications: 8 channels DDR4-3200, 204.8 GB/s per socket.
  a100_40.host_memory_bytes_per_s_per_node = 2 * 204.8e9;
  catalog.add_gpu(a100_40);

  GpuSpec a100_80 = a100_40;
  a100_80.name = "A100-80GB";
  a100_80.description = "NVIDIA A100 SXM4 80GB";
  a100_80.memory_bytes = mib(81920);    // nvidia-smi "A100-SXM4-80GB" total: 81920MiB
  a100_80.hbm_bytes_per_s = 2.039e12;   // datasheet, A100 80GB SXM HBM2e: 2,039 GB/s
  a100_80.price_per_gpu_hour = 1.79;    // Note [Prices]
  a100_80.host_memory_bytes_per_node = tib(2);  // DGX A100 640GB datasheet: System Memory 2TB
  catalog.add_gpu(a100_80);
}

void add_nvidia_hopper_blackwell(HardwareCatalog& catalog) {
  // NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column): BF16/FP16 Tensor Core 1,979 TFLOPS with sparsity → 989.4
  // dense (H100 whitepaper table), FP32 67 TFLOPS (whitepaper: 66.9), HBM3 3.35 TB/s, NVLink 900 GB/s bidirectional,
  // PCIe Gen5 128 GB/s bidirectional.
  GpuSpec h100{};
  h100.name = "H100-80GB";
  h100.description = "NVIDIA H100 SXM5 80GB";
  h100.memory_bytes = mib(81559);       // nvidia-smi "H100 80GB HBM3" total: 81559MiB
  h100.peak_bf16_flops = 989.4e12;      // whitepaper, dense
  h100.peak_fp16_flops = 989.4e12;      // whitepaper, dense
  h100.peak_fp32_flops = 66.9e12;       // whitepaper, FP32 (not TF32)
  h100.peak_fp8_flops = 1978.9e12;      // datasheet: FP8 Tensor Core 3,958 TFLOPS with sparsity → dense half
  h100.hbm_bytes_per_s = 3.35e12;       // datasheet, H100 SXM HBM3
  h100.intra_node_link = "NVLink4";
  h100.intra_node_bytes_per_s = 450e9;  // 900 GB/s bidirectional / 2, Note [Intra-node bandwidth]
  h100.intra_node_latency_s = kNvlinkHopLatencyS;  // Note [NCCL latency]
  h100.pcie_bytes_per_s = 64e9;         // PCIe Gen5 x16, 128 GB/s bidirectional / 2
  h100.default_fabric = "ib-ndr";       // DGX H100: 8× ConnectX-7 NDR 400 Gb/s, one per GPU
  h100.default_gpus_per_node = 8;       // DGX/HGX H100 8-GPU baseboard
  h100.price_per_gpu_hour = 2.99;       // Note [Prices]
  h100.context_overhead_bytes = kGpuContextOverheadBytes;
  // Kernel rates (docs/research/kernel_rates.md, xla_gemm_table.md): GEMMs 0.80 of peak at the best shape (Bekman's
  // MAMF table: 794.5 TFLOP/s), 6 µs fixed per GEMM (XLA's measured sm_90 table, fitted: rms 6%). clock_fraction 1:
  // MAMF's rate is measured after warm-up, at the clock the GPU holds (https://github.com/stas00/ml-engineering/pull/59:
  // 813 TFLOP/s without warm-up, which the maintainer calls "not sustainable", against 794.5 with it), and sustained
  // against short GEMM runs differ by 2-7 %. The 0.85 once here came from a CI clock-lock target and an inference
  // throttling report (tile-ai/TileOPs#1588, deepseek-ai/DeepGEMM#120), not from training GEMMs.
  h100.max_compute_efficiency = 0.80;
  h100.half_efficiency_flops = 4.8e9;
  // Float8 GEMMs: cuBLASLt FP8 on ND H100 v5 (H100 80GB HBM3) after 10,000 warm-up iterations, so at the clock the
  // GPU sustains (Azure/AI-benchmarking-guide, Azure_Results/ND_H100_v5_results.md): 1,011.3, 1,216.9, 1,290.1,
  // 1,377.3 and 1,382.2 TFLOP/s at 2048³ ... 32768³, fitted by a 1,340 TFLOP/s plateau (0.677 of the dense fp8 peak)
  // with 6.0 GFLOP fixed (4.5 µs; rms 3.4 %, docs/research/kernel_rates.md). The bf16 plateau's 0.80 is MAMF's best
  // shape of the bf16 kernels; torchao's float8 linears run cuBLASLt's fp8 ones (torch._scaled_mm), which this
  // measures: the same guide's method as the A100 entry's GEMM rates.
  h100.fp8_compute_efficiency = 1340.0 / 1978.9;
  h100.fp8_half_efficiency_flops = 6.0e9;
  h100.clock_fraction = 1.0;
  // Compute beside a collective (Note [Overlap slowdown by kernel kind]). GEMMs: in Llama3 8B training on 8 × H100
  // over NVLink (torch.compile, transformer-block bucketing), "NCCL collectives use SMs, which makes matmuls that are
  // overlapped by them 30-40% slower" (https://github.com/pytorch/pytorch/pull/179937, 2026-04): 1.35, the middle.
  // It disagrees with a synthetic GEMM of exactly 132 CTAs beside a 24-CTA ncclAllGather, which spilled into a second
  // wave, its MFU falling from 80 % to 47 % (1.70; https://forums.developer.nvidia.com/t/compute-communication-overlap-
  // causes-severe-gemm-performance-degradation-because-of-tail-effect/337991): the training run's matmuls are the
  // kernels as training runs them, so they set it (not the dev set, whose H100 rows it moves further fast: H100-80GB
  // median 12.9 -> 16.9 %; benchmarks/published-runs/README.md row by row). No H100 trace of attention or memory-bound
  // kernels beside NCCL was found: A100's (NVIDIA/nccl#1428), as a100_40 above.
  h100.overlap_gemm_slowdown = 1.35;
  h100.overlap_attention_slowdown = 0.33 / 0.18;
  h100.overlap_memory_slowdown = 1.8;
  // FlashAttention-2 (what SDPA runs on Hopper) at the locked 1,830 MHz (FlashAttention-3 paper, Figs. 5-6, head dim
  // 128): forward causal 191 ... 335 TFLOP/s and backward 214 ... 322 from 512 to 16k, fitted by 350 and 328 TFLOP/s
  // plateaus with s½ 400 and 270 (rms 2%, 0.4%).
  h100.attention_forward_efficiency = 350.0 / 989.4;
  h100.attention_backward_efficiency = 328.0 / 989.4;
  h100.attention_half_seq_len = 350;
  h100.memory_efficiency = 0.89;  // BabelStream Triad 2,970 of 3,350 GB/s (Azure ND H100 v5 results)
  h100.kernel_dispatch_s = kEagerDispatchS;
  h100.intra_node_bus_efficiency = 370.0 / 450.0;  // ring busbw ≈ 370 GB/s on 8 × H100 (NVIDIA/nccl-tests#212)
  h100.nvls_bus_bytes_per_s = 480e9;  // NVLS all-reduce busbw ≈ 480 GB/s (nccl-tests#212; 476 measured in #290)
  h100.collective_base_latency_s = kNcclBaseLatencyS;
  h100.comm_half_efficiency_bytes = kCommHalfEfficiencyBytes;
  h100.host_memory_bytes_per_node = tib(2);  // DGX H100 datasheet: System Memory 2TB
  // DGX H100/H200 (DGX BasePOD reference architecture): Dual Intel Xeon Platinum 8480C; Intel ARK (8480+): 8 channels
  // of DDR5-4800, 8 × 38.4 GB/s per socket.
  h100.host_memory_bytes_per_s_per_node = 2 * 8 * 38.4e9;
  catalog.add_gpu(h100);

  // NVIDIA H200 Tensor Core GPU datasheet (H200 SXM): same GH100 compute as H100 SXM, 141 GB HBM3e at 4.8 TB/s,
  // NVLink 900 GB/s, PCIe Gen5 128 GB/s.
  GpuSpec h200 = h100;
  h200.name = "H200-141GB";
  h200.description = "NVIDIA H200 SXM 141GB";
  h200.memory_bytes = mib(143771);  // nvidia-smi "NVIDIA H200" total: 143771MiB
  h200.hbm_bytes_per_s = 4.8e12;    // datasheet, HBM3e
  h200.price_per_gpu_hour = 3.79;   // Note [Prices]
  h200.memory_efficiency = 0.86;    // BabelStream Triad 4,150 of 4,800 GB/s (Azure ND H200 v5 results)
  // Float8 GEMMs as H100's, from the guide's own ND H200 v5 run (Azure_Results/ND_H200_v5_results.md: 1,134.6,
  // 1,249.2, 1,269.4, 1,305.0 and 1,333.2 TFLOP/s at 2048³ ... 32768³): a 1,305 TFLOP/s plateau (0.659 of the fp8
  // peak) with 3.0 GFLOP fixed (rms 2.0 %).
  h200.fp8_compute_efficiency = 1305.0 / 1978.9;
  h200.fp8_half_efficiency_flops = 3.0e9;
  // clock_fraction and the overlap slowdowns as H100's (the same GH100 compute): TileOPs#1588's 1,500 MHz is the clock
  // its CI locks to, not one measured under training load.
  h200.host_memory_bytes_per_node = tib(2);  // DGX H200 datasheet: System Memory 2TB
  catalog.add_gpu(h200);

  // NVIDIA HGX B200 specifications (per GPU of the 8-GPU board): FP16/BF16 Tensor Core 4.5 PFLOPS with sparsity → 2.25
  // dense, FP32 80 TFLOPS (the HGX system table sums to 600 TFLOPS / 8 = 75; calibration settles it — FP32 matters only
  // for the CPU-side optimizer estimate), HBM3e 8 TB/s, NVLink5 1.8 TB/s bidirectional.
  GpuSpec b200 = h100;
  b200.name = "B200";
  b200.description = "NVIDIA B200 (HGX B200) 180GB";
  b200.memory_bytes = mib(183359);      // nvidia-smi "NVIDIA B200" total: 183359MiB
  b200.peak_bf16_flops = 2250e12;       // HGX B200 spec, dense
  b200.peak_fp16_flops = 2250e12;       // HGX B200 spec, dense
  b200.peak_fp32_flops = 80e12;         // Blackwell datasheet, see above
  b200.peak_fp8_flops = 4500e12;        // HGX B200 spec: FP8 Tensor Core 72 PFLOPS with sparsity / 8 GPUs → dense half
  b200.hbm_bytes_per_s = 8e12;          // HGX B200 spec, HBM3e
  b200.intra_node_link = "NVLink5";
  b200.intra_node_bytes_per_s = 900e9;  // 1.8 TB/s bidirectional / 2, Note [Intra-node bandwidth]
  b200.pcie_bytes_per_s = 64e9;         // PCIe Gen5 x16 host link, 128 GB/s bidirectional / 2
  // ConnectX-8 XDR 800 Gb/s pairs with Blackwell-generation clusters; DGX B200 as shipped has 400 Gb/s ConnectX-7, so
  // such a cluster should name "fabric": "ib-ndr".
  b200.default_fabric = "ib-xdr";
  b200.price_per_gpu_hour = 5.99;  // Note [Prices]
  // Kernel rates: GEMMs 0.776 of peak at the best shape (MAMF: 1,745 TFLOP/s), ≈ 6 µs fixed per GEMM (XLA's
  // sm_100_B200 table fitted: f½ 9 GFLOP); sustained clocks not published (clock_fraction 1, unverified). Attention:
  // SDPA forward, head dim 128, 330-375 TFLOP/s from 1k to 16k (meta-pytorch/tritonbench#1014; s½ ≈ 150), backward
  // FlashAttention-2 334 TFLOP/s at head dim 64 (Dao-AILab/flash-attention#1589), i.e. 375 at 128. Triad unmeasured:
  // the driver's 7.67 TB/s peak (pytorch/ao#4002) at H100's 0.89 of it.
  b200.max_compute_efficiency = 0.776;
  b200.half_efficiency_flops = 9e9;
  // Float8 GEMMs: 3,432.5 TFLOP/s (MAMF's FP8 table, float8_e4m3fn, best shape, 100 runs after 50 warm-ups: the only
  // B200 fp8 measurement found; not H100's fit, which this entry copied), the fixed cost the bf16 one's.
  b200.fp8_compute_efficiency = 3432.5 / 4500.0;
  b200.fp8_half_efficiency_flops = 0;
  b200.clock_fraction = 1.0;
  // No trace of kernels beside NCCL on Blackwell: the profile's population average for every kind, not H100's.
  b200.overlap_gemm_slowdown = b200.overlap_attention_slowdown = b200.overlap_memory_slowdown = 0;
  b200.attention_forward_efficiency = 375.0 / 2250.0;
  b200.attention_backward_efficiency = 375.0 / 2250.0;
  b200.attention_half_seq_len = 150;
  b200.memory_efficiency = 0.89 * 7.672 / 8.0;
  b200.intra_node_bus_efficiency = 0.70;  // XLA's 8 × B200 table: all-gather 616, reduce-scatter 642 GB/s at 2 GB
  b200.nvls_bus_bytes_per_s = 0;          // its all-reduce (614 GB/s) is no faster there
  b200.host_memory_bytes_per_node = tib(2);  // DGX B200 datasheet: System Memory 2TB (configurable to 4TB)
  // DGX B200 datasheet: Dual Intel Xeon Platinum 8570; Intel ARK: 8 channels of DDR5-5600, 8 × 44.8 GB/s per socket.
  b200.host_memory_bytes_per_s_per_node = 2 * 8 * 44.8e9;
  catalog.add_gpu(b200);
}

void add_pcie_and_amd(HardwareCatalog& catalog) {
  // NVIDIA L40S datasheet: BF16/FP16 Tensor Core 362.05 TFLOPS dense (733 with sparsity), FP32 91.6 TFLOPS, 48 GB GDDR6
  // at 864 GB/s, PCIe Gen4 x16 64 GB/s bidirectional, no NVLink (peer traffic goes over PCIe).
  GpuSpec l40s{};
  l40s.name = "L40S";
  l40s.description = "NVIDIA L40S 48GB (PCIe)";
  l40s.memory_bytes = mib(46068);       // nvidia-smi "NVIDIA L40S" total: 46068MiB (ECC on)
  l40s.peak_bf16_flops = 362.05e12;     // datasheet, dense
  l40s.peak_fp16_flops = 362.05e12;     // datasheet, dense
  l40s.peak_fp32_flops = 91.6e12;       // datasheet
  l40s.peak_fp8_flops = 733e12;         // datasheet: FP8 Tensor Core 1,466 TFLOPS with sparsity → dense half
  l40s.hbm_bytes_per_s = 864e9;         // datasheet, GDDR6
  l40s.intra_node_link = "PCIe Gen4 x16";
  l40s.intra_node_bytes_per_s = 32e9;   // PCIe Gen4 x16, 64 GB/s bidirectional / 2
  l40s.intra_node_latency_s = kPcieHopLatencyS;  // Note [NCCL latency]
  // A datacenter part: the driver grants peer access, so NCCL runs P2P over the Gen4 x16 link (Note [Intra-node
  // transport]; which hosts route it through a PCIe switch or the root complex is not verified).
  l40s.intra_node_transport = "pcie-p2p";
  l40s.pcie_generation = 4;
  l40s.pcie_lanes = 16;
  l40s.pcie_bytes_per_s = 32e9;         // same Gen4 x16 link to the host
  l40s.default_fabric = "roce-200g";    // typical L40S cloud nodes: 200 Gb/s RoCE NICs
  l40s.default_gpus_per_node = 8;       // common 4U 8-GPU PCIe servers
  l40s.price_per_gpu_hour = 1.25;       // Note [Prices]
  l40s.context_overhead_bytes = kGpuContextOverheadBytes;
  // No published L40S GEMM, attention or STREAM measurement was found (docs/research/kernel_rates.md; searched again
  // for issue 34: torch matmul tables, MAMF, flash-attention issues): the profile's defaults stand and outputs say
  // "unmeasured" (unmeasured_rates.h), with NCCL's latencies and the eager dispatch floor.
  l40s.kernel_dispatch_s = kEagerDispatchS;
  l40s.collective_base_latency_s = kNcclBaseLatencyS;
  l40s.comm_half_efficiency_bytes = kCommHalfEfficiencyBytes;
  l40s.host_memory_bytes_per_node = gib(1536);  // AWS g6e.48xlarge (8 x L40S): 1,536 GiB, Note [Node host memory]
  catalog.add_gpu(l40s);

  // NVIDIA Ada GPU architecture whitepaper, Appendix A (GeForce RTX 4090): peak BF16 and FP16 Tensor TFLOPS with FP32
  // accumulate 165.2 dense (330.4 with sparsity; the GeForce part runs FP32-accumulate at half the FP16-accumulate rate),
  // FP32 82.6 TFLOPS, 24 GB GDDR6X at 1,008 GB/s, PCIe Gen4 x16, no NVLink.
  GpuSpec rtx4090 = l40s;
  rtx4090.name = "RTX4090";
  rtx4090.description = "NVIDIA GeForce RTX 4090 24GB";
  rtx4090.memory_bytes = mib(24564);     // nvidia-smi "NVIDIA GeForce RTX 4090" total: 24564MiB
  rtx4090.peak_bf16_flops = 165.2e12;    // Ada whitepaper, FP32 accumulate, dense
  rtx4090.peak_fp8_flops = 330.3e12;     // Ada whitepaper: FP8 Tensor with FP32 accumulate (what _scaled_mm does), dense
  rtx4090.peak_fp16_flops = 165.2e12;    // Ada whitepaper, FP32 accumulate, dense
  rtx4090.peak_fp32_flops = 82.6e12;     // Ada whitepaper
  rtx4090.hbm_bytes_per_s = 1008e9;      // Ada whitepaper, GDDR6X
  rtx4090.default_fabric = "ethernet-100g";  // consumer-GPU rentals rarely have RDMA NICs
  // GeForce drivers grant no peer access on the RTX 4090 ("NVIDIA does not officially enable NCCL P2P on ... the RTX
  // 4090", allanchan339.github.io/bug-fixes/2025/05/21/4090-P2P.html; NVIDIA/nccl-tests#117), so NCCL runs SHM through
  // host memory (Note [Intra-node transport]). A host on tinygrad's patched driver says "pcie-p2p" in a cluster file.
  rtx4090.intra_node_transport = "pcie-shm";
  rtx4090.price_per_gpu_hour = 0.69;     // Note [Prices]
  // flash_attn on an RTX 4090 at 2k, head dim 128 (apache/tvm tl_doc/flash_perf.md): forward 169.3 TFLOP/s (at or
  // above the 165.2 reference peak: boost clocks), backward 124.6; global-memory bandwidth 904-922 of 1,008 GB/s
  // (xytpai/nvbench).
  rtx4090.attention_forward_efficiency = 1.0;
  // GEMM: bf16 torch.matmul 126.8, 164.8, 151.5, 160.2, 158.5 TFLOP/s at 1024³ ... 10240³ (one RTX 4090, torch 2.7,
  // CUDA 12.8; zzc0721/torch-performance-test-data#78); fp16 8192³ 158.6 on another card (mli/transformers-benchmarks#4).
  // The plateau is the 8192³ run (0.97 of the reference peak: the long run at a training-sized shape, not the 2048³
  // burst above it); 1024³'s shortfall is ≈ 3.5 µs per GEMM, 0.57 GFLOP at the plateau rate.
  rtx4090.max_compute_efficiency = 160.2 / 165.2;
  rtx4090.half_efficiency_flops = 0.57e9;
  rtx4090.attention_backward_efficiency = 124.6 / 165.2;
  rtx4090.memory_efficiency = 0.90;
  // No reference system: 8-GPU RTX 4090 rental hosts commonly list 256 GB to 512 GB; the smaller, as a floor.
  rtx4090.host_memory_bytes_per_node = gib(256);
  catalog.add_gpu(rtx4090);

  // AMD Instinct MI300X accelerator datasheet: peak BF16/FP16 1,307.4 TFLOPS dense (2,614.9 with sparsity), FP32 163.4
  // TFLOPS (vector), 192 GB HBM3 at 5.3 TB/s, 7 Infinity Fabric links at 128 GB/s bidirectional each (896 GB/s
  // aggregate), PCIe Gen5 x16 128 GB/s bidirectional.
  GpuSpec mi300x{};
  mi300x.name = "MI300X";
  mi300x.description = "AMD Instinct MI300X 192GB (OAM)";
  mi300x.memory_bytes = gib(192);          // datasheet 192 GB HBM3; rocm-smi VRAM total ≈ 192 GiB
  mi300x.peak_bf16_flops = 1307.4e12;      // datasheet, dense
  mi300x.peak_fp16_flops = 1307.4e12;      // datasheet, dense
  mi300x.peak_fp32_flops = 163.4e12;       // datasheet, FP32 vector
  mi300x.peak_fp8_flops = 2614.9e12;       // datasheet: FP8 2,614.9 TFLOPS dense (5,229.8 with sparsity)
  mi300x.hbm_bytes_per_s = 5.3e12;         // datasheet, HBM3
  mi300x.intra_node_link = "Infinity Fabric";
  mi300x.intra_node_bytes_per_s = 448e9;   // 7 links × 64 GB/s per direction (fully connected 8-GPU mesh)
  mi300x.intra_node_latency_s = kNvlinkHopLatencyS;  // Note [NCCL latency]; RCCL on xGMI taken as NCCL on NVLink
  mi300x.pcie_bytes_per_s = 64e9;          // PCIe Gen5 x16, 128 GB/s bidirectional / 2
  mi300x.default_fabric = "roce-400g";     // MI300X platforms ship 400 Gb/s RoCE NICs, one per GPU
  mi300x.default_gpus_per_node = 8;        // AMD Instinct MI300X platform: 8 OAM modules
  mi300x.price_per_gpu_hour = 2.49;        // Note [Prices]
  mi300x.context_overhead_bytes = kGpuContextOverheadBytes;
  // Kernel rates: GEMMs 0.51-0.60 of peak at the best shape (MAMF: 668.4 TFLOP/s with TunableOp, 781.9 on ROCm 6.2),
  // 0.55 taken; a ≈ 14 µs fixed cost per GEMM (XLA's gfx942 table, fitted, rms 26%: weak). FlashAttention-2 (ROCm)
  // 328.6 TFLOP/s at head dim 64, s = 8192 (Azure ND MI300X v5 results), i.e. 0.28 of peak at 128 (direction not
  // stated: both). BabelStream Triad 4,090 of 5,300 GB/s.
  mi300x.max_compute_efficiency = 0.55;
  mi300x.half_efficiency_flops = 14e-6 * 0.55 * 1307.4e12;
  // Float8 GEMMs: hipBLASLt FP8 on ND MI300X v5 after 10,000 warm-up iterations (the Azure guide's method, fork
  // yosoyjay/AI-benchmarking-guide@a8263ef1, Azure_Results/ND_MI300X_v5_results.md, HIP 6.2.41134): 726.9, 1,085.4,
  // 1,222.9, 1,081.4 and 1,142.4 TFLOP/s at 2048³ ... 32768³, fitted by a 1,150 TFLOP/s plateau (0.440 of the fp8
  // peak) with 10 GFLOP fixed (rms 4.2 %; the dip at 16384³ is the table's). The fork samuel-bohman@3de0c294 has the
  // same run on the earlier HIP 6.2.41133 (427.7 ... 1,159.2 ... 1,029.1, a 1,080 plateau): the later stack taken,
  // as the one a user installs.
  mi300x.fp8_compute_efficiency = 1150.0 / 2614.9;
  mi300x.fp8_half_efficiency_flops = 10e9;
  mi300x.attention_forward_efficiency = 0.28;
  mi300x.attention_backward_efficiency = 0.28;
  mi300x.memory_efficiency = 0.77;
  mi300x.kernel_dispatch_s = kEagerDispatchS;
  mi300x.collective_base_latency_s = kNcclBaseLatencyS;
  mi300x.comm_half_efficiency_bytes = kCommHalfEfficiencyBytes;
  mi300x.host_memory_bytes_per_node = gib(1850);  // Azure ND MI300X v5 (8 x MI300X): 1,850 GiB
  catalog.add_gpu(mi300x);
}

// The host's physical memory; sysconf is POSIX (Linux, macOS). Falls back to 8 GiB where the query is unsupported.
std::int64_t host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return gib(8);
  return static_cast<std::int64_t>(pages) * static_cast<std::int64_t>(page_size);
}

// A CPU rank for the MPI + Eigen executor. These defaults are rough on purpose: they only need to put predictions in the
// right order of magnitude until `shardplan calibrate` fits them to what this host measures.
void add_cpu(HardwareCatalog& catalog) {
  GpuSpec cpu{};
  cpu.name = "cpu";
  cpu.description = "host CPU rank (MPI + Eigen executor)";
  cpu.memory_bytes = host_memory_bytes();  // the whole host memory, read at runtime
  cpu.host_memory_bytes_per_node = cpu.memory_bytes;  // the same memory: the node is this host
  cpu.peak_bf16_flops = 1e11;  // ~100 GFLOP/s: a few AVX2/AVX-512 cores in Eigen GEMM; Eigen runs fp32 for every dtype
  cpu.peak_fp16_flops = 1e11;  // same: fp32 kernels
  cpu.peak_fp32_flops = 1e11;
  cpu.hbm_bytes_per_s = 2e10;         // ~20 GB/s: a share of DDR4/DDR5 STREAM bandwidth
  cpu.intra_node_link = "shared memory";
  cpu.intra_node_bytes_per_s = 5e9;   // MPI shared-memory transport copy rate, OSU osu_bw order of magnitude
  cpu.intra_node_latency_s = 2e-6;    // MPI shared-memory small-message latency, OSU osu_latency order of magnitude
  cpu.pcie_bytes_per_s = cpu.hbm_bytes_per_s;  // "offload" to host memory is a memory copy
  cpu.default_fabric = "ethernet-100g";
  // "4xcpu" means four ranks on this one host, as `mpirun -np 4 --oversubscribe` runs them, whatever the core count;
  // several hosts are written NODESxRANKSxcpu.
  cpu.default_gpus_per_node = 4096;
  cpu.price_per_gpu_hour = 0;  // the user's own machine
  // The CPU executor's tracked memory is its tensors (TrackingAllocator); the process image and MPI's buffers are
  // outside what a plan decides, so no overhead term (calibrated on this project's 2-core machines: 1792 B).
  cpu.context_overhead_bytes = 0;
  // Eigen's fp32 GEMMs at a transformer block's small shapes, per GEMM (the op-level model): `calibrate --trace` on
  // tiny-llama under mpirun -np 2 (2026-12-02, 2-core VM, a quiet machine) fitted 4.2e10 FLOP/s with no fixed cost
  // per GEMM worth fitting, and the passes' elementwise bytes at 2.0e10 B/s — the STREAM-like rate above.
  cpu.max_compute_efficiency = 0.42;
  cpu.half_efficiency_flops = 1;
  catalog.add_gpu(cpu);
}

void add_fabrics(HardwareCatalog& catalog) {
  // Bandwidths are the NIC line rate / 8 per GPU (one NIC per GPU, rail-optimised), per direction; a node's network is
  // its GPUs' NICs together (Note [Rails] in collective_cost.cpp). Latencies are per ring step as NCCL sees them (Note
  // [Latency α]): InfiniBand ~5 µs, RoCE ~8 µs (PFC/ECN Ethernet switches), and kernel TCP sockets ~20 µs. NIC
  // efficiency: nccl-tests busbw per NIC over its line rate; unmeasured fabrics take the profile's 0.95.
  // NVIDIA ConnectX-6 InfiniBand HDR 200 Gb/s (Quantum HDR switches): 192 of 200 GB/s all-reduce busbw on multi-node
  // DGX A100 with 8 of them (NVIDIA/nccl#812).
  catalog.add_fabric({"ib-hdr", "InfiniBand HDR 200 Gb/s", 25e9, 5e-6, 0, 0, 0.96});
  // NVIDIA ConnectX-7 InfiniBand NDR 400 Gb/s (Quantum-2 switches): 46-48 GB/s per NIC (NVIDIA/nccl-tests#290).
  catalog.add_fabric({"ib-ndr", "InfiniBand NDR 400 Gb/s", 50e9, 5e-6, 0, 0, 0.94});
  // NVIDIA ConnectX-8 SuperNIC InfiniBand XDR 800 Gb/s (Quantum-X800 switches).
  catalog.add_fabric({"ib-xdr", "InfiniBand XDR 800 Gb/s", 100e9, 5e-6});
  // RoCE v2 over 200 GbE (ConnectX-6 Dx class NICs).
  catalog.add_fabric({"roce-200g", "RoCE v2 200 Gb/s", 25e9, 8e-6});
  // RoCE v2 over 400 GbE (ConnectX-7 / AMD Pollara 400 class NICs).
  catalog.add_fabric({"roce-400g", "RoCE v2 400 Gb/s", 50e9, 8e-6});
  // Plain 100 GbE with TCP sockets (NCCL socket transport, MPI over TCP).
  catalog.add_fabric({"ethernet-100g", "Ethernet 100 Gb/s (TCP)", 12.5e9, 20e-6});
  // Plain 25 GbE with TCP sockets: typical cloud VM networking.
  catalog.add_fabric({"ethernet-25g", "Ethernet 25 Gb/s (TCP)", 3.125e9, 20e-6});
  // Fabrics of nodes with fewer NICs than GPUs (Note [Rails]: the node's bandwidth is its NICs', nics_per_node ×
  // bytes_per_s_per_nic; bytes_per_s_per_gpu is that shared over the usual node's GPUs, for `shardplan gpus`).
  // DGX-1: 4 × ConnectX InfiniBand EDR 100 Gb/s for 8 V100s. "DGX-1 can get 48 GB/s because we have 4 IB adapters"
  // (NVIDIA/nccl-tests#29, sjeaugey, multi-node all-reduce busbw; 12.2 GB/s for one 100 Gb/s card): 48 of 50, 0.96.
  catalog.add_fabric({"ib-edr", "InfiniBand EDR 100 Gb/s, 4 NICs per node (DGX-1)", 6.25e9, 5e-6, 4, 12.5e9, 0.96});
  // HPE Cray EX nodes (Frontier's EX235a: 4 × Slingshot-11 200 Gb/s NICs for 4 MI250X = 8 GCDs; ORNL's Crusher/Frontier
  // overview: "four HPE Slingshot 200 Gbit per second NICs (25 GB/s)", 100 GB/s per node). Latency as InfiniBand's and
  // NIC efficiency the profile's default: unmeasured.
  catalog.add_fabric({"slingshot-200g", "HPE Slingshot-11 200 Gb/s, 4 NICs per node", 12.5e9, 5e-6, 4, 25e9});
  // One 100 GbE link per node shared by its GPUs, TCP sockets: cloud GPU instances such as AWS g5.48xlarge (8 × A10G,
  // "100Gbps" per instance, AWS Batch GPU instance table) and GCP G2 (8 × L4, "up to 100 Gbps").
  catalog.add_fabric({"ethernet-100g-shared", "Ethernet 100 Gb/s per node (TCP), shared by its GPUs", 12.5e9 / 8, 20e-6,
                      1, 12.5e9});
}

}  // namespace

HardwareCatalog HardwareCatalog::builtin() {
  HardwareCatalog catalog;
  add_fabrics(catalog);
  add_nvidia_ampere(catalog);
  add_nvidia_hopper_blackwell(catalog);
  add_pcie_and_amd(catalog);
  catalog_data::add_nvidia_volta_ampere_ada(catalog);
  catalog_data::add_nvidia_hopper_blackwell_more(catalog);
  catalog_data::add_amd_more(catalog);
  add_cpu(catalog);
  return catalog;
}

}  // namespace shardplan
