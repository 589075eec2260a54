// The documented range of every count, size and physical quantity an input may give, each with its reason.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardplan::limits {

// Note [Input limits]: every number a user gives (a JSON field, a flag) is checked against a range before anything
// is computed from it, so that (1) no count is narrowed into a smaller type (4294967297 read as an int is 1), (2) no
// product of them leaves 64 bits or a double's finite range, and (3) the work a request implies — the ops one step
// simulates, the candidates a search simulates — stays within seconds and well under 1 GB. The ranges are far beyond
// any real model or machine; the work limits are measured (numbers next to them) and name themselves in the error.

// Note [JSON depth]: nlohmann::json parses iteratively but copies, dumps, compares and destroys values recursively, so
// a document nested 100,000 deep overflowed the stack in an error path. shardplan's deepest document (a measured trace
// carrying its plan) nests 7 levels; 128 leaves room for any hand-written or foreign file at a few KB of stack.
inline constexpr std::size_t kMaxJsonDepth = 128;

// --- input files and error lines -------------------------------------------------------------------------------------
// Note [Input files]: every file an input flag names is opened without blocking and checked before a byte is read:
// it must be a regular file (a directory, /dev/zero, a FIFO or a socket is refused: /dev/zero grew the reader to
// 2-8 GB, a FIFO blocked), no larger than the bound of its kind; the read itself stops one byte past the bound (a file
// growing meanwhile, or a /proc file whose size reads 0). Inline JSON (Note [Inline JSON]) has the same bound as a
// file of its kind. Parsing costs about 10x a document's size in memory and 0.25 s per MB (issue 37: a 120 MB model
// took 30 s and 1.2 GB before its refusal), so 16 MiB is about 4 s and 160 MB at most.
// Model, Hugging Face config, cluster, catalog, profile and plan documents: 16 MiB. The largest shardplan writes or
// reads are far smaller: a torch-bridge model file with measured samples is about 2 KB a layer (20 MB would be a
// 10,000-layer model, kMaxLayers, every layer listed, which `repeat` avoids), a plan about 100 bytes a unit.
inline constexpr std::int64_t kMaxJsonFileBytes = std::int64_t{16} << 20;
// Chrome traces (compare --predicted/--measured, calibrate --trace): 512 MiB. About 250 bytes per op; the largest
// step (kMaxLayerPassesPerStep x ~7.5 ops) is about 250 MB for one rank.
inline constexpr std::int64_t kMaxTraceFileBytes = std::int64_t{512} << 20;
// run --data, a byte-per-token text file every rank holds whole: 1 GiB (the CPU executor's runs read kilobytes).
inline constexpr std::int64_t kMaxDatasetFileBytes = std::int64_t{1} << 30;
// A checkpoint's manifest (JSON) is a document of the first kind; its shards are raw tensors, read by size.
// Note [Echoed values] (errors.h): the longest value an error line echoes whole, and the longest error line.
inline constexpr std::size_t kMaxEchoedBytes = 80;
inline constexpr std::size_t kMaxErrorLineBytes = 2000;

// --- models ----------------------------------------------------------------------------------------------------------
// 80x the deepest published decoder (Llama 3.1 405B: 126 blocks). Measured here: simulating one step of a
// 100,000-layer model took 11 s and 470 MB (the lowering is superlinear in layers), 10,000 layers 0.2 s.
inline constexpr std::int64_t kMaxLayers = 10'000;
inline constexpr std::int64_t kMaxHiddenSize = 1'000'000;      // 60x Llama 3.1 405B's 16,384
inline constexpr std::int64_t kMaxIntermediateSize = 10'000'000;
inline constexpr std::int64_t kMaxHeads = 100'000;             // attention heads (and kv heads)
inline constexpr std::int64_t kMaxVocabSize = 100'000'000;     // 400x the largest tokenizers (256k)
inline constexpr std::int64_t kMaxPositions = 100'000'000;     // max_position_embeddings: 100x the longest contexts
// Per-token FLOPs and activation elements of an explicit layer: 1e15 FLOPs per token is a 500-trillion-parameter
// layer; the bound keeps step FLOPs (x 2^32 tokens x layers) finite in a double with room to spare.
inline constexpr double kMaxLayerFlopsPerToken = 1e15;
inline constexpr double kMaxActivationElementsPerToken = 1e12;

// --- training ------------------------------------------------------------------------------------------------------
inline constexpr std::int64_t kMaxSeqLen = std::int64_t{1} << 24;         // 16M tokens, 128x the longest contexts
inline constexpr std::int64_t kMaxMicroBatch = std::int64_t{1} << 20;
inline constexpr std::int64_t kMaxTokensPerMicroBatch = std::int64_t{1} << 32;
inline constexpr std::int64_t kMaxGlobalBatch = std::int64_t{1} << 32;    // sequences per optimizer step
// FSDP1's rate limiter counts all-gathers in flight; more than the layers could never be in flight.
inline constexpr std::int64_t kMaxInflightAllGathers = kMaxLayers + 1;

// Note [Step work]: one simulated step is (micro-batches per step) x (layers) layer passes of about 7.5 ops each
// (forward, backward, recompute, gathers, waits, frees, reductions). Measured here (tiny-llama, simulate): 2.3 us and
// ~300 bytes per op; 100,000 micro-batches x 6 layers took 26 s and 1.7 GB, 40,000 x 6 took 4.2 s and 510 MB. 2^17
// layer passes (~1M ops) simulate in ~3 s within ~400 MB, and cover any real step (Llama 3.1 405B, 126 blocks, at
// 1,024 micro-batches per step on one rank).
inline constexpr std::int64_t kMaxLayerPassesPerStep = std::int64_t{1} << 17;
// A plan search simulates many candidates: the one with the most micro-batches (micro-batch 1 when --global-batch
// fixes the batch) and every wrapping of the layers; its work grows as layers x (2 + micro-batches per step).
// Measured here (2 cores shared with other builds, so 1-2.5x apart): llama3-8b on 8 GPUs at --global-batch 1024
// (35 x 130 = 4550) 3.7-4.3 s, at 2048 (35 x 258 = 9030) 8.6 s; a 1,000-layer model (3,000) 2.5-6.4 s, 5,000
// layers (15,000) 31 s. 2^13 keeps one search within about 10 s.
inline constexpr std::int64_t kMaxSearchWork = std::int64_t{1} << 13;
// Bytes one step may allocate in all (every op's allocations summed): 2^60 = 1 EiB, a million times the largest GPU's
// memory, keeps every int64 byte count (and its sum over categories) exact, whatever the activations per token.
inline constexpr double kMaxStepBytes = 1152921504606846976.0;  // 2^60

// --- hardware ------------------------------------------------------------------------------------------------------
inline constexpr std::int64_t kMaxWorldSize = 1'000'000;  // GPUs in a cluster: 10x the largest training clusters
// A closed range [least, most] of a physical number.
struct Range {
  double least = 0;
  double most = 0;
};
// FLOP/s of one device: 1 kFLOP/s (slower than any CPU core) to 1e18 (400x a B200's dense bf16 peak); below the
// floor, a step's time is not a number a double keeps (1e-300 gave "step_time_s": null).
inline constexpr Range kFlopsPerS{1e3, 1e18};
// Bytes per second of a memory or a link: 1 kB/s to 1 PB/s (125x a B200's 8 TB/s of HBM).
inline constexpr Range kBytesPerS{1e3, 1e15};
// A link's latency (alpha): 0 to 1 s; real ones are 1-20 us (1e308 printed "step inf s").
inline constexpr Range kLatencyS{0, 1.0};
// Host overheads per op or collective issue: 0 to 1 s; measured ones are 1-100 us.
inline constexpr Range kOverheadS{0, 1.0};
// An efficiency or fraction of a peak: (0, 1], with a floor that keeps every time it divides finite.
inline constexpr Range kFraction{1e-6, 1.0};
// A sequence length in a kernel-rate curve (attention's half-efficiency length): 1 to 2^30 tokens.
inline constexpr Range kSeqLenRange{1, 1073741824.0};
// NICs per node: 1 to 1024 (AWS p5 nodes have 32).
inline constexpr std::int64_t kMaxNicsPerNode = 1024;
// A device's memory: 1 byte to 2^50 (1 PiB, 7000x an H200's 141 GB).
inline constexpr std::int64_t kMostMemoryBytes = std::int64_t{1} << 50;
// A slowdown factor (compute while communicating, a collective while computing): 1 to 100; calibration caps the
// collective one at 20 (collective_fit.cpp, kMostProgressLost).
inline constexpr double kMostSlowdown = 100.0;
// Price per GPU-hour: 0 (owned hardware) to 1e6 USD (10^5x today's cloud prices; 1e308 gave -nan speed-ups).
inline constexpr double kMostPricePerGpuHour = 1e6;

// --- capacity ------------------------------------------------------------------------------------------------------
// A token budget: 1 to 1e18 tokens (10^4x the largest training runs' 15T); days and costs stay finite.
inline constexpr double kMostTokens = 1e18;

}  // namespace shardplan::limits
