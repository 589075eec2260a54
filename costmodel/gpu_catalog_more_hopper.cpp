// Builtin catalog entries for NVIDIA Hopper and Blackwell parts beyond gpu_catalog_data.cpp's: H100 PCIe and NVL, H20,
// GH200 (96 GB HBM3 and 144 GB HBM3e), GB200 (per GPU of an NVL72) and B300.
//
// Sources as in gpu_catalog_data.cpp; "not verified" marks a datasheet value we could not read in a stored copy of the
// datasheet or a secondary source quoting it, "unmeasured" a kernel rate left at the profile's default.
#include "gpu_catalog_constants.h"
#include "hardware_catalog.h"

namespace shardplan::catalog_data {
namespace {

// The H100 SXM's dense GH100 peaks (H100 whitepaper, as in gpu_catalog_data.cpp), shared by the GH200.
constexpr double kGh100Bf16Flops = 989.4e12;
constexpr double kGh100Fp32Flops = 66.9e12;

// Fills what every entry of this file shares: the context overhead and NCCL's and PyTorch's fixed costs.
GpuSpec nvidia_gpu(const char* name, const char* description) {
  GpuSpec gpu{};
  gpu.name = name;
  gpu.description = description;
  gpu.context_overhead_bytes = kGpuContextOverheadBytes;  // Note [Context overhead]
  gpu.kernel_dispatch_s = kEagerDispatchS;                // Note [Eager dispatch]
  gpu.collective_base_latency_s = kNcclBaseLatencyS;      // Note [NCCL latency]
  gpu.comm_half_efficiency_bytes = kCommHalfEfficiencyBytes;  // Note [Collective size curve]
  return gpu;
}

void add_hopper_pcie(HardwareCatalog& catalog) {
  // NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe column (reproduced at archive-lib.hpctech.co.jp with its footnote
  // "shown with sparsity; specifications 1/2 lower without"): BF16/FP16 Tensor 1,513 TFLOPS with sparsity (756.5
  // dense), FP32 51 TFLOPS, 80 GB HBM2e at 2,000 GB/s, 114 SMs, NVLink bridge 600 GB/s, PCIe Gen5 128 GB/s.
  GpuSpec h100p = nvidia_gpu("H100-PCIe", "NVIDIA H100 PCIe 80GB");
  // PyTorch's total_memory for "NVIDIA H100 PCIe": 81008 MiB (multi_processor_count=114); nvidia-smi's total for the
  // PCIe card was not found in a stored copy.
  h100p.memory_bytes = mib(81008);
  h100p.peak_bf16_flops = 756.5e12;     // datasheet, dense
  h100p.peak_fp16_flops = 756.5e12;     // datasheet, dense
  h100p.peak_fp32_flops = 51e12;        // datasheet
  h100p.peak_fp8_flops = 1513e12;       // ml-engineering TFLOPS table, "H100 PCIe" fp8, dense (its GEMM: unmeasured)
  h100p.hbm_bytes_per_s = 2.0e12;       // datasheet, HBM2e
  // An NVLink bridge joins two cards only: a ring over 8 crosses PCIe Gen5 x16 (128 GB/s bidirectional / 2). Two
  // bridged cards reach ≈ 116 GB/s all-reduce busbw (NVIDIA/nccl#1161): a 2-GPU cluster file could say so.
  h100p.intra_node_link = "PCIe Gen5 x16";
  h100p.intra_node_bytes_per_s = 64e9;
  h100p.intra_node_latency_s = kPcieHopLatencyS;  // Note [NCCL latency]
  h100p.intra_node_transport = "pcie-p2p";  // Note [Intra-node transport]: datacenter part, peer access granted
  h100p.pcie_generation = 5;
  h100p.pcie_lanes = 16;
  h100p.pcie_bytes_per_s = 64e9;
  h100p.default_fabric = "roce-200g";   // as L40S: PCIe GPU cloud nodes with 200 Gb/s RoCE (not verified)
  // ASUSTeK ESC8000A-E12, "8x H100-PCIe-80GB" (its MLPerf Inference submission page, mlcommons/inference_results_v4.1).
  h100p.default_gpus_per_node = 8;
  // Lambda's 1 × H100 PCIe listing ("A Lambda H100 costs $2.49/hr for 1 GPU", computespec.pages.dev; the form factor
  // is not stated there: not verified).
  h100p.price_per_gpu_hour = 2.49;
  // GEMM: 499.5 TFLOP/s bf16 torch.mm, best of an Optuna shape search (mag-/gpu_benchmark README). Attention, STREAM
  // and collectives: unmeasured.
  h100p.max_compute_efficiency = 499.5 / 756.5;
  h100p.host_memory_bytes_per_node = tib(2);  // the ESC8000A-E12 above: "host_memory_capacity": "2 TB"
  catalog.add_gpu(h100p);

  // NVIDIA H100 NVL product brief PB-11773-001 and datasheet, as quoted with the card's own device query in a stored
  // measurement report (one H100 NVL): 94 GB HBM3 (95,830 MiB reported), 3,938 GB/s, FP32 60 TFLOPS, BF16 1,671
  // TFLOPS with sparsity (835.5 dense), 1,785 MHz, 400 W. NVLink bridge 600 GB/s bidirectional (two cards), PCIe Gen5.
  GpuSpec h100nvl = h100p;
  h100nvl.name = "H100-NVL";
  h100nvl.description = "NVIDIA H100 NVL 94GB (PCIe)";
  h100nvl.memory_bytes = mib(95830);
  h100nvl.peak_bf16_flops = 835.5e12;   // datasheet, dense
  h100nvl.peak_fp16_flops = 835.5e12;
  h100nvl.peak_fp32_flops = 60e12;
  // Twice the bf16 rate, as on every Hopper row of the ml-engineering TFLOPS table (the brief's fp8 line is not in the
  // stored quote); its GEMM: unmeasured.
  h100nvl.peak_fp8_flops = 2 * 835.5e12;
  h100nvl.hbm_bytes_per_s = 3.938e12;   // product brief, Table 2
  // 8-card PCIe Gen5 servers as for H100-PCIe (ring across bridged pairs over PCIe); no NVL-specific reference system
  // was found, so the same 2 TB host (not verified for NVL).
  h100nvl.price_per_gpu_hour = 3.29;    // RunPod "H100 NVL 94GB $3.29/hr" (stored runpodctl reference, "approximate")
  h100nvl.max_compute_efficiency = 488.5 / 835.5;  // mag-/gpu_benchmark, one card
  h100nvl.memory_efficiency = 3303.8 / 3938.0;     // BabelStream 5.0 (CUDA) Triad 3,303,794 MB/s on "NVIDIA H100 NVL"
  catalog.add_gpu(h100nvl);

  // NVIDIA H20 (Hopper for the China market; no datasheet on NVIDIA's public site): 96 GB HBM3 at 4.0 TB/s, BF16/FP16
  // 148 TFLOPS dense, FP32 44 TFLOPS, NVLink 900 GB/s, 78 SMs — secondary summaries only (willitrunai.com,
  // zangshuxian.com): not verified.
  GpuSpec h20 = nvidia_gpu("H20", "NVIDIA H20 96GB (HGX)");
  h20.memory_bytes = mib(97871);        // nvidia-smi "NVIDIA H20" total: 97871MiB, power cap 500W
  h20.peak_bf16_flops = 148e12;
  h20.peak_fp16_flops = 148e12;
  h20.peak_fp32_flops = 44e12;
  h20.hbm_bytes_per_s = 4.0e12;
  h20.intra_node_link = "NVLink4";
  h20.intra_node_bytes_per_s = 450e9;   // 900 GB/s bidirectional / 2, Note [Intra-node bandwidth]
  h20.intra_node_latency_s = kNvlinkHopLatencyS;
  h20.pcie_bytes_per_s = 64e9;          // PCIe Gen5 x16 (not verified)
  h20.default_fabric = "ib-ndr";        // NVIDIA/nccl#1244: 2 nodes of 8 × H20 with 16 ConnectX-7 NDR NICs
  h20.default_gpus_per_node = 8;        // HGX H20 (the same issue)
  h20.price_per_gpu_hour = 0;           // not rented by public clouds outside China: unknown (Note [Prices])
  // Kernel rates unmeasured. NCCL runs NVLS on H20 (nccl#1244 uses NVLSTree) but its busbw was not found: no NVLS.
  h20.host_memory_bytes_per_node = tib(2);  // no H20 reference system found: DGX H100's 2 TB, not verified
  catalog.add_gpu(h20);
}

void add_grace_superchips(HardwareCatalog& catalog) {
  // NVIDIA GH200 Grace Hopper Superchip: the H100 SXM's GH100 compute (ml-engineering TFLOPS table: GH200 989 bf16/fp16,
  // 67 fp32, dense) with 96 GB HBM3 at 4.0 TB/s (its memory table, "GH200 SXM (1)"), and a 72-core Grace CPU with up
  // to 480 GB LPDDR5X joined by NVLink-C2C at 900 GB/s bidirectional (GH200 pages at aiwiki.ai and spheron.network;
  // NVIDIA's datasheet itself is not stored).
  GpuSpec gh200 = nvidia_gpu("GH200-96GB", "NVIDIA GH200 Grace Hopper Superchip, 96GB HBM3");
  gh200.memory_bytes = mib(97871);      // nvidia-smi "NVIDIA GH200 480GB" total: 97871MiB
  gh200.peak_bf16_flops = kGh100Bf16Flops;
  gh200.peak_fp16_flops = kGh100Bf16Flops;
  gh200.peak_fp32_flops = kGh100Fp32Flops;
  gh200.peak_fp8_flops = 1979e12;       // the same table, "GH200 SXM" fp8, dense
  gh200.hbm_bytes_per_s = 4.0e12;
  // The GPU's 18 NVLinks (900 GB/s): used only where superchips share an NVLink domain (GH200 NVL2 and NVL32, 4-way
  // HPE/Eviden nodes); with one superchip per node no ring runs inside a node.
  gh200.intra_node_link = "NVLink4";
  gh200.intra_node_bytes_per_s = 450e9;
  gh200.intra_node_latency_s = kNvlinkHopLatencyS;
  gh200.pcie_bytes_per_s = 450e9;       // NVLink-C2C to the Grace memory, 900 GB/s bidirectional / 2: offload copies
  gh200.default_fabric = "ib-ndr";      // one 400 Gb/s ConnectX-7 / BlueField-3 per superchip (MGX; not verified)
  gh200.default_gpus_per_node = 1;      // NVIDIA MGX single-superchip servers, Lambda's 1 × GH200 instances
  gh200.price_per_gpu_hour = 1.49;      // Lambda 1 × GH200 (Note [Prices]; approximate, not verified)
  // GEMM: 852.5 TFLOP/s bf16 on "NVIDIA GH200 96GB" (mag-/gpu_benchmark). HBM: coalesced read 3,615 and write 3,705
  // GB/s of 4,000 (mredenti/PowerCapping OpenCL benchmark; docs/research/kernel_rates.md §d). Attention, clocks and
  // collectives: unmeasured.
  gh200.max_compute_efficiency = 852.5 / 989.4;
  gh200.memory_efficiency = 3615.0 / 4000.0;
  // 480 GB LPDDR5X on the Grace side (as above), taken in binary units like DIMMs (Note [Node host memory]).
  gh200.host_memory_bytes_per_node = gib(480);
  catalog.add_gpu(gh200);

  // The HBM3e GH200: same compute, 144 GB HBM3e. 4.9 TB/s is NVIDIA's GH200 datasheet figure for it (not verified;
  // ml-engineering lists 4.8 TB/s for "GH200 SXM (2)", 141 GB; AnandTech reported "5TB/s" at its announcement).
  GpuSpec gh200e = gh200;
  gh200e.name = "GH200-144GB";
  gh200e.description = "NVIDIA GH200 Grace Hopper Superchip, 144GB HBM3e";
  // cuDeviceTotalMem of "NVIDIA GH200 144G HBM3e": 153008209920 bytes = 145920 MiB (a stored driver test's expectation).
  gh200e.memory_bytes = mib(145920);
  gh200e.hbm_bytes_per_s = 4.9e12;
  gh200e.price_per_gpu_hour = 1.99;     // Note [Prices] (approximate, not verified)
  // GEMM: 828.6 TFLOP/s (Bekman's MAMF table, "900W 141GiB HBM3e version"; mag-/gpu_benchmark: 853.8). STREAM: unmeasured.
  gh200e.max_compute_efficiency = 828.6 / 989.4;
  // Float8 GEMMs: 1,535.0 TFLOP/s, the same table's FP8 (float8_e4m3fn) row for that version: its best shape, the mean
  // of 100 runs after 50 warm-ups (no longer run is published for it; on H100, whose entry takes Azure's 10,000-warm-up
  // runs, the same table's 1,402.6 reads 5 % above their 1,340 plateau). The 96GB part's fp8 GEMM: unmeasured.
  gh200e.fp8_compute_efficiency = 1535.0 / 1979.0;
  gh200e.memory_efficiency = 0;
  catalog.add_gpu(gh200e);

  // NVIDIA GB200 NVL72, per GPU (a superchip is one Grace and two Blackwell GPUs; 72 GPUs share one NVLink domain):
  // BF16/FP16 2,500 TFLOPS dense and FP32 80 TFLOPS (ml-engineering TFLOPS table, "GB200 SXM" per chip, from NVIDIA's
  // GB200 NVL72 specifications: "it also seems to run the B200 chips a bit faster"), HBM3e 8 TB/s, 186 GB
  // (its memory table), NVLink5 1.8 TB/s bidirectional per GPU.
  GpuSpec gb200 = nvidia_gpu("GB200", "NVIDIA GB200 NVL72, one Blackwell GPU");
  gb200.memory_bytes = mib(189471);     // nvidia-smi "NVIDIA GB200" total: 189471MiB, power cap 1200W
  gb200.peak_bf16_flops = 2500e12;
  gb200.peak_fp16_flops = 2500e12;
  gb200.peak_fp32_flops = 80e12;
  gb200.peak_fp8_flops = 5000e12;       // the same table's fp8 column, dense
  gb200.hbm_bytes_per_s = 8e12;
  gb200.intra_node_link = "NVLink5";
  gb200.intra_node_bytes_per_s = 900e9;  // 1.8 TB/s bidirectional / 2, Note [Intra-node bandwidth]
  gb200.intra_node_latency_s = kNvlinkHopLatencyS;
  // NVLink-C2C 900 GB/s bidirectional per superchip, taken as shared by its two GPUs (how it splits: not verified).
  gb200.pcie_bytes_per_s = 225e9;
  // ConnectX-7 400 Gb/s per GPU between racks (GCP A4X: "four NVIDIA ConnectX-7 (CX-7) ... total network bandwidth of
  // 1,600 Gbps" for its 4 GPUs).
  gb200.default_fabric = "ib-ndr";
  // A "node" here is the NVLink domain, not the 4-GPU compute tray: NCCL reaches all 72 GPUs of the rack over NVLink,
  // and that is what the model's intra-node tier means. "2x72xGB200" is two racks over the fabric.
  gb200.default_gpus_per_node = 72;
  gb200.price_per_gpu_hour = 6.0;       // Note [Prices] (approximate, not verified)
  // GEMM: 1,822 TFLOP/s (MAMF table, newer stored version; torch 2.10 dev, cu130). Attention: FlashAttention-2 373.9
  // TFLOP/s at b = 2, s = 8192 (Azure AI-benchmarking-guide fork, ND GB200 v6; direction not stated: both; FA2 has no
  // Blackwell path). HBM, clocks, NVLS and busbw: unmeasured.
  gb200.max_compute_efficiency = 1822.0 / 2500.0;
  // Float8 GEMMs: cuBLASLt FP8 on ND GB200 v6 after 10,000 warm-up iterations, so at the clock the GPU sustains
  // (Azure/AI-benchmarking-guide@2a370be6, Azure_Results/ND_GB200_v6_results.md): 2,243.6, 2,834.6, 2,876.6, 2,906.9
  // and 2,825.6 TFLOP/s at 2048³ ... 32768³, fitted as H100's (gpu_catalog_data.cpp) by a 2,890 TFLOP/s plateau
  // (0.578 of the dense fp8 peak) with 5.0 GFLOP fixed (rms 1.3 %, docs/research/kernel_rates.md).
  // MAMF's FP8 table reads 3,615.6 TFLOP/s for GB200 (its best shape, 100 runs after 50 warm-ups): 25 % above these
  // sustained runs. Taken: Azure's, measured as training runs its GEMMs (long, at the clock the GPU holds).
  gb200.fp8_compute_efficiency = 2890.0 / 5000.0;
  gb200.fp8_half_efficiency_flops = 5.0e9;
  gb200.attention_forward_efficiency = 373.9 / 2500.0;
  gb200.attention_backward_efficiency = 373.9 / 2500.0;
  // 36 Grace CPUs × 480 GB LPDDR5X per rack (NVIDIA lists "up to 17 TB" for NVL72: not verified).
  gb200.host_memory_bytes_per_node = gib(36 * 480);
  catalog.add_gpu(gb200);
}

void add_blackwell_ultra(HardwareCatalog& catalog) {
  // NVIDIA B300 (HGX/DGX B300, per GPU): BF16/FP16 2,250 TFLOPS dense, FP32 80 TFLOPS (ml-engineering TFLOPS table,
  // "B300 SXM", from the DGX B300 datasheet), 288 GB HBM3e at 8 TB/s (its memory table), NVLink5 1.8 TB/s bidirectional.
  // A stored third-party characterisation ("B300 TRUE REFERENCE", 2026-04-18; repository not shown by the index)
  // measures against 2,500 TFLOPS (the GB300's figure) and a 7,672 GB/s HBM peak; this entry keeps DGX B300's.
  GpuSpec b300 = nvidia_gpu("B300", "NVIDIA B300 (HGX B300) 288GB");
  b300.memory_bytes = mib(275040);      // nvidia-smi "NVIDIA B300 SXM6 AC", 275040 MiB (stored outputs), 1100 W
  b300.peak_bf16_flops = 2250e12;
  b300.peak_fp16_flops = 2250e12;
  b300.peak_fp32_flops = 80e12;
  b300.hbm_bytes_per_s = 8e12;
  b300.intra_node_link = "NVLink5";
  b300.intra_node_bytes_per_s = 900e9;  // 1.8 TB/s bidirectional / 2, Note [Intra-node bandwidth]
  b300.intra_node_latency_s = kNvlinkHopLatencyS;
  // The GPU's link is PCIe Gen6 x16, but host-to-device copies measured 57.7 GB/s (the reference above): the host side
  // is Gen5.
  b300.pcie_bytes_per_s = 64e9;
  b300.default_fabric = "ib-xdr";       // DGX B300: 8 × ConnectX-8 SuperNIC 800 Gb/s (not verified)
  b300.default_gpus_per_node = 8;       // HGX/DGX B300 8-GPU baseboard
  b300.price_per_gpu_hour = 6.99;       // Note [Prices] (approximate, not verified)
  // GEMM: 1,769 TFLOP/s (MAMF table, newer stored version; torch 2.9.1, cu130). HBM: device-to-device copy 6.93 TB/s,
  // 50:50 read+write 6.68 TB/s (the reference above), of 8 TB/s: 0.85 for Triad-like kernels. It also reads a
  // sustained 1,920 MHz against a 2,032 MHz boost, but which clock the peak assumes is not published: clocks and
  // attention unmeasured, as are the collectives.
  b300.max_compute_efficiency = 1769.0 / 2250.0;
  // Float8 GEMMs: 3,353.3 TFLOP/s of 4,500 dense (MAMF table's FP8 row and the TFLOPS table's fp8 column; best shape,
  // 100 runs after 50 warm-ups, the only B300 fp8 measurement found).
  b300.peak_fp8_flops = 4500e12;
  b300.fp8_compute_efficiency = 3353.3 / 4500.0;
  b300.memory_efficiency = 0.85;
  // DGX B300 datasheet: 2 TB (not verified; a stored inventory of a B300 DGX host, 2 × Xeon 6776P, reads 2.0 TiB).
  b300.host_memory_bytes_per_node = tib(2);
  catalog.add_gpu(b300);
}

}  // namespace

void add_nvidia_hopper_blackwell_more(HardwareCatalog& catalog) {
  add_hopper_pcie(catalog);
  add_grace_superchips(catalog);
  add_blackwell_ultra(catalog);
}

}  // namespace shardplan::catalog_data
