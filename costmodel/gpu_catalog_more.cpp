// Builtin catalog entries for NVIDIA Volta, Ampere and Ada parts beyond gpu_catalog_data.cpp's: V100 (SXM2), the cloud
// A10G and L4, and the RTX 3090, RTX A6000 and RTX 6000 Ada workstation cards.
//
// Sources as in gpu_catalog_data.cpp: each number names where it was read. "Not verified" marks a datasheet value we
// could not read in a stored copy of the datasheet or a secondary source quoting it. Kernel rates (HardwareProfile)
// are set only where a published kernel measurement exists; "unmeasured" leaves the profile's default.
#include "gpu_catalog_constants.h"
#include "hardware_catalog.h"

namespace shardplan::catalog_data {
namespace {

// The best bf16 torch.mm of an Optuna search over shapes (mag-/gpu_benchmark README "Stats" table; its mamf-finder.py
// hard-codes dtype torch.bfloat16, 100 iterations after 50 warm-up, median), TFLOP/s. One card each, clocks as found.
constexpr double kMagV100Sxm2_16 = 96.1;
constexpr double kMagV100Sxm2_32 = 94.0;
constexpr double kMagA10g = 69.7;
constexpr double kMagL4 = 91.4;
constexpr double kMagRtx3090 = 78.0;
constexpr double kMagRtxA6000 = 131.2;
constexpr double kMagRtx6000Ada = 278.5;

void add_volta(HardwareCatalog& catalog) {
  // NVIDIA Tesla V100 SXM2 datasheet: Tensor 125 TFLOPS (fp16 inputs, fp32 accumulate), FP32 15.7 TFLOPS, HBM2 900
  // GB/s, NVLink 300 GB/s, PCIe Gen3 x16 32 GB/s bidirectional. Read in stored secondary copies: 15.7 and 125 TFLOPS
  // (avensun/deep-learning-benchmark README), 900 GB/s and 6 NVLinks at 25 GB/s per direction (a Volta whitepaper
  // summary, gist wolfram77/a42aeb02), "NVLINK2.0 300GB/s" (NVIDIA's MLPerf Training v0.7 DGX-1 system description,
  // mlcommons/training_results_v0.7 NVIDIA/systems/dgx1_ngc20.06_pytorch.json). PCIe Gen3: not verified.
  GpuSpec v100{};
  v100.name = "V100-16GB";
  v100.description = "NVIDIA Tesla V100 SXM2 16GB";
  // nvidia-smi on current drivers reads the whole 16384MiB of a V100 16GB (stored outputs for V100-PCIE-16GB, same
  // HBM2); older drivers and PyTorch report 16160 MiB for V100-SXM2-16GB.
  v100.memory_bytes = mib(16384);
  // Volta has no bf16 tensor cores. The planner charges every 2-byte GEMM at peak_bf16_flops
  // (HardwareProfile::peak_flops_for_bytes), so this holds the fp16 tensor-core peak: plan V100s in fp16 mixed
  // precision (zero-fp16). A bf16 plan is then predicted at the fp16 rate; mag-/gpu_benchmark's bf16 torch.mm reached
  // 94-96 TFLOP/s on V100-SXM2 — a tensor-core rate, so cuBLAS evidently maps bf16 onto it, how is not verified.
  v100.peak_bf16_flops = 125e12;
  v100.peak_fp16_flops = 125e12;        // datasheet, Tensor Performance
  v100.peak_fp32_flops = 15.7e12;       // datasheet, single precision (SXM2)
  v100.hbm_bytes_per_s = 900e9;         // datasheet, HBM2
  v100.intra_node_link = "NVLink2";
  v100.intra_node_bytes_per_s = 150e9;  // 300 GB/s bidirectional / 2 (6 links × 25 GB/s), Note [Intra-node bandwidth]
  v100.intra_node_latency_s = kNvlinkHopLatencyS;  // Note [NCCL latency]
  v100.pcie_bytes_per_s = 16e9;         // PCIe Gen3 x16, 32 GB/s bidirectional / 2
  v100.default_fabric = "ib-edr";       // DGX-1: 4 × EDR for 8 GPUs (NVIDIA/nccl-tests#29)
  v100.default_gpus_per_node = 8;       // DGX-1 / HGX-1: 8 × V100-SXM2 in a hybrid cube-mesh
  // Note [Prices] (approximate, not verified in a stored price list); hyperscalers ask far more: AWS p3.2xlarge
  // $3.06/h for one V100 16GB (avensun/deep-learning-benchmark README).
  v100.price_per_gpu_hour = 0.55;
  v100.context_overhead_bytes = kGpuContextOverheadBytes;
  // Kernel rates: GEMM plateau 96.1 of 125 TFLOP/s (mag-/gpu_benchmark, above). Attention, STREAM, sustained clocks
  // and NCCL's busbw within a DGX-1: unmeasured.
  v100.max_compute_efficiency = kMagV100Sxm2_16 / 125.0;
  v100.kernel_dispatch_s = kEagerDispatchS;
  v100.collective_base_latency_s = kNcclBaseLatencyS;
  v100.comm_half_efficiency_bytes = kCommHalfEfficiencyBytes;
  v100.host_memory_bytes_per_node = gib(512);  // DGX-1: "host_memory_capacity": "512 GB" (MLPerf v0.7 DGX-1 system)
  catalog.add_gpu(v100);

  GpuSpec v100_32 = v100;
  v100_32.name = "V100-32GB";
  v100_32.description = "NVIDIA Tesla V100 SXM2 32GB";
  // nvidia-smi "Tesla V100-SXM2-32GB" total: 32768MiB on current drivers (stored outputs); driver 470 read 32480 MiB.
  v100_32.memory_bytes = mib(32768);
  v100_32.price_per_gpu_hour = 0.75;  // Note [Prices] (approximate, not verified)
  v100_32.max_compute_efficiency = kMagV100Sxm2_32 / 125.0;  // 94.0 TFLOP/s (mag-/gpu_benchmark)
  // DGX-1 with 32 GB V100s: 512 GB as above (the MLPerf description is of the 16 GB system: not verified for 32 GB).
  // DGX-2's 16 × V100-SXM3-32GB nodes (350 W, NVSwitch) have 1.5 TB (MLPerf v0.7 dgx2 system): say so in a cluster file.
  v100_32.host_memory_bytes_per_node = gib(512);
  catalog.add_gpu(v100_32);
}

void add_cloud_ampere_ada(HardwareCatalog& catalog) {
  // NVIDIA A10G: AWS's GA102 part for g5 instances; NVIDIA publishes no A10G datasheet. 24 GB GDDR6 at 600 GB/s like
  // the A10, with less tensor and more CUDA-core throughput (Baseten, "NVIDIA A10 vs A10G for ML model inference");
  // the 70 TFLOPS bf16/fp16 tensor (fp32 accumulate, dense) and 35 TFLOPS FP32 are that article's spec table, stored
  // only as an image: not verified — but the measured 69.7 TFLOP/s bf16 GEMM (below) fits a 70 TFLOP/s peak, not the
  // A10's 125.
  GpuSpec a10g{};
  a10g.name = "A10G";
  a10g.description = "NVIDIA A10G 24GB (AWS g5)";
  a10g.memory_bytes = mib(23028);       // nvidia-smi "NVIDIA A10G" total: 23028MiB (ECC on), power cap 300W
  a10g.peak_bf16_flops = 70e12;
  a10g.peak_fp16_flops = 70e12;
  a10g.peak_fp32_flops = 35e12;
  a10g.hbm_bytes_per_s = 600e9;         // GDDR6 (Baseten)
  a10g.intra_node_link = "PCIe Gen4 x16";
  a10g.intra_node_bytes_per_s = 32e9;   // PCIe Gen4 x16, 64 GB/s bidirectional / 2; no NVLink
  a10g.intra_node_latency_s = kPcieHopLatencyS;  // Note [NCCL latency]
  a10g.intra_node_transport = "pcie-p2p";  // datacenter part: peer access granted (Note [Intra-node transport])
  a10g.pcie_generation = 4;
  a10g.pcie_lanes = 16;
  a10g.pcie_bytes_per_s = 32e9;
  a10g.default_fabric = "ethernet-100g-shared";  // g5.48xlarge: 100 Gb/s per instance
  a10g.default_gpus_per_node = 8;       // g5.48xlarge: 8 GPUs, 192 vCPU, 768 GiB, 100 Gbps (AWS Batch GPU instance table)
  a10g.price_per_gpu_hour = 2.04;       // AWS g5.48xlarge on-demand $16.288/h / 8 (us-east-1; not verified)
  a10g.context_overhead_bytes = kGpuContextOverheadBytes;
  // GEMM plateau: 69.7 of 70 TFLOP/s (mag-/gpu_benchmark). Attention, STREAM and collectives: unmeasured.
  a10g.max_compute_efficiency = kMagA10g / 70.0;
  a10g.kernel_dispatch_s = kEagerDispatchS;
  a10g.collective_base_latency_s = kNcclBaseLatencyS;
  a10g.comm_half_efficiency_bytes = kCommHalfEfficiencyBytes;
  a10g.host_memory_bytes_per_node = gib(768);  // g5.48xlarge: 768 GiB (AWS Batch GPU instance table)
  catalog.add_gpu(a10g);

  // NVIDIA L4 datasheet (as quoted from NVIDIA's L4 datasheet in a stored search result): FP32 30.3 TFLOPS, BF16/FP16
  // Tensor Core 242 TFLOPS with sparsity (121 dense), 24 GB GDDR6. 300 GB/s and PCIe Gen4 x16 (64 GB/s bidirectional):
  // datasheet, not verified. 72 W: clocks drop under sustained load (see the GEMM rate).
  GpuSpec l4 = a10g;
  l4.name = "L4";
  l4.description = "NVIDIA L4 24GB (PCIe)";
  l4.memory_bytes = mib(23034);         // nvidia-smi "NVIDIA L4" total: 23034MiB (ECC on), 72W cap
  l4.peak_bf16_flops = 121e12;          // datasheet, dense
  l4.peak_fp16_flops = 121e12;          // datasheet, dense
  l4.peak_fp32_flops = 30.3e12;         // datasheet
  l4.hbm_bytes_per_s = 300e9;           // datasheet, GDDR6
  // GCP G2 (g2-standard-96: 8 × L4, "up to 100 Gbps") and AWS g6.48xlarge (8 × L4) share one link per node.
  l4.default_fabric = "ethernet-100g-shared";
  l4.default_gpus_per_node = 8;
  l4.price_per_gpu_hour = 0.80;         // AWS g6.xlarge on-demand ≈ $0.805/h for one L4 (not verified)
  l4.max_compute_efficiency = kMagL4 / 121.0;  // 91.4 TFLOP/s bf16 GEMM (mag-/gpu_benchmark)
  // AWS g6.48xlarge: 768 GiB (the stored AWS table stops at g6.16xlarge: not verified).
  l4.host_memory_bytes_per_node = gib(768);
  catalog.add_gpu(l4);
}

void add_workstation_ampere_ada(HardwareCatalog& catalog) {
  // NVIDIA Ampere GA102 GPU architecture whitepaper v2, Appendix A (GeForce RTX 3090): peak FP16 and BF16 Tensor
  // TFLOPS with FP32 accumulate 71 dense (142 with sparsity; the GeForce part runs fp32 accumulate at half rate), FP32
  // 35.6 TFLOPS, 24 GB GDDR6X at 936 GB/s, PCIe Gen4 x16; an NVLink bridge (112.5 GB/s bidirectional) joins two cards
  // only. Not verified: only the whitepaper's table of contents is stored.
  GpuSpec rtx3090{};
  rtx3090.name = "RTX3090";
  rtx3090.description = "NVIDIA GeForce RTX 3090 24GB";
  rtx3090.memory_bytes = mib(24576);    // nvidia-smi "NVIDIA GeForce RTX 3090" total: 24576MiB
  rtx3090.peak_bf16_flops = 71e12;      // GA102 whitepaper, fp32 accumulate, dense
  rtx3090.peak_fp16_flops = 71e12;
  rtx3090.peak_fp32_flops = 35.6e12;
  rtx3090.hbm_bytes_per_s = 936e9;      // GDDR6X
  rtx3090.intra_node_link = "PCIe Gen4 x16";
  rtx3090.intra_node_bytes_per_s = 32e9;  // a ring over more than a bridged pair crosses PCIe Gen4 x16 (64 GB/s bidir.)
  rtx3090.intra_node_latency_s = kPcieHopLatencyS;  // Note [NCCL latency]
  // GeForce: p2pBandwidthLatencyTest on an 8 × RTX 3090 server reads "Device=0 CANNOT Access Peer Device=1"
  // (NVIDIA/nccl#1127), so NCCL runs SHM through host memory (Note [Intra-node transport]).
  rtx3090.intra_node_transport = "pcie-shm";
  rtx3090.pcie_generation = 4;
  rtx3090.pcie_lanes = 16;
  rtx3090.pcie_bytes_per_s = 32e9;
  rtx3090.default_fabric = "ethernet-100g-shared";  // rental hosts rarely have RDMA NICs
  rtx3090.default_gpus_per_node = 8;    // 8-card hosts exist (NVIDIA/nccl#1439: all_reduce_perf on 8 × RTX 3090)
  rtx3090.price_per_gpu_hour = 0.22;    // RunPod community "$0.22/hr" (stored runpodctl reference, "approximate")
  rtx3090.context_overhead_bytes = kGpuContextOverheadBytes;
  // GEMM: 78.0 TFLOP/s bf16 (mag-/gpu_benchmark), above the 71 of the reference boost clock (boards boost higher):
  // the plateau is the whole peak. Attention, STREAM and collectives: unmeasured.
  static_assert(kMagRtx3090 > 71.0);
  rtx3090.max_compute_efficiency = 1.0;
  rtx3090.kernel_dispatch_s = kEagerDispatchS;
  rtx3090.collective_base_latency_s = kNcclBaseLatencyS;
  rtx3090.comm_half_efficiency_bytes = kCommHalfEfficiencyBytes;
  // No reference system: 8-card rental hosts list 256 GB to 512 GB (as for RTX4090); the smaller, not verified.
  rtx3090.host_memory_bytes_per_node = gib(256);
  catalog.add_gpu(rtx3090);

  // NVIDIA RTX A6000 (GA102 whitepaper v2, Appendix C, and the RTX A6000 datasheet): FP32 38.7 TFLOPS, Tensor 309.7
  // TFLOPS with sparsity (154.8 dense; the professional part runs fp32 accumulate at full rate), 48 GB GDDR6 with ECC
  // at 768 GB/s, PCIe Gen4 x16, NVLink bridge for two cards (112.5 GB/s bidirectional). Not verified; the stored A40
  // datasheet (same GA102 silicon, lower clocks) reads 149.7 / 37.4 TFLOPS and 696 GB/s, consistent.
  GpuSpec a6000 = rtx3090;
  a6000.name = "RTX-A6000";
  a6000.description = "NVIDIA RTX A6000 48GB";
  a6000.memory_bytes = mib(49140);      // nvidia-smi "NVIDIA RTX A6000" total: 49140MiB (ECC off; 46068MiB with ECC on)
  a6000.peak_bf16_flops = 154.8e12;
  a6000.peak_fp16_flops = 154.8e12;
  a6000.peak_fp32_flops = 38.7e12;
  a6000.hbm_bytes_per_s = 768e9;        // GDDR6
  a6000.default_gpus_per_node = 4;      // a 4-GPU workstation
  // A professional part: the driver grants peer access (NVIDIA/nccl-tests#74 measures P2P on the same-silicon A40),
  // so NCCL runs P2P over the Gen4 x16 link (Note [Intra-node transport]).
  a6000.intra_node_transport = "pcie-p2p";
  a6000.price_per_gpu_hour = 0.50;      // RunPod community "$0.50/hr" (stored runpodctl reference, "approximate")
  a6000.max_compute_efficiency = kMagRtxA6000 / 154.8;  // 131.2 TFLOP/s bf16 GEMM (mag-/gpu_benchmark)
  a6000.host_memory_bytes_per_node = gib(256);  // no reference workstation: 256 GB, not verified
  catalog.add_gpu(a6000);

  // NVIDIA RTX 6000 Ada Generation datasheet: FP32 91.1 TFLOPS, Tensor 1,457 TFLOPS (FP8 with sparsity: 364.25 dense
  // bf16/fp16 at full-rate fp32 accumulate), 48 GB GDDR6 with ECC at 960 GB/s, PCIe Gen4 x16, no NVLink. Not verified
  // in a stored copy (the values examples/clusters/ used for it before it was builtin).
  GpuSpec rtx6000ada = a6000;
  rtx6000ada.name = "RTX6000-Ada";
  rtx6000ada.description = "NVIDIA RTX 6000 Ada Generation 48GB";
  rtx6000ada.memory_bytes = mib(49140);  // nvidia-smi "NVIDIA RTX 6000 Ada Gene..." total: 49140MiB (ECC off)
  rtx6000ada.peak_bf16_flops = 364.25e12;
  rtx6000ada.peak_fp16_flops = 364.25e12;
  rtx6000ada.peak_fp32_flops = 91.1e12;
  rtx6000ada.hbm_bytes_per_s = 960e9;    // GDDR6
  rtx6000ada.price_per_gpu_hour = 0.77;  // Note [Prices] (approximate, not verified)
  // 278.5 TFLOP/s bf16 GEMM (mag-/gpu_benchmark), measured at the card's 300 W board power, the cap it runs training
  // under: 0.76 of the datasheet peak (the clock it holds at 300 W is below the boost clock the peak assumes).
  // Attention and STREAM: unmeasured (outputs say so).
  rtx6000ada.max_compute_efficiency = kMagRtx6000Ada / 364.25;
  catalog.add_gpu(rtx6000ada);
}

}  // namespace

void add_nvidia_volta_ampere_ada(HardwareCatalog& catalog) {
  add_volta(catalog);
  add_cloud_ampere_ada(catalog);
  add_workstation_ampere_ada(catalog);
}

}  // namespace shardplan::catalog_data
