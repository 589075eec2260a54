// Deterministic parameter initialisation that depends only on (seed, element index in the model's flat parameter).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "param_layout.h"

namespace shardplan::runtime {

// Note [Sharded init]: every element's initial value is a pure function of (seed, its index in the whole model's flat
// parameter, the tensor it falls in), so a rank that initialises only its shard of one unit writes exactly the bits
// the unsharded reference writes there. A sequential generator (std::mt19937_64) would need the whole prefix of the
// stream; SplitMix64 (Steele, Lea & Flood 2014) is counter-based — output n is a bijective mix of seed + (n+1)·γ — so
// element i reads outputs 2i and 2i+1 directly, and Box–Muller (1958) turns them into a normal deviate with plain
// double arithmetic (std::normal_distribution's algorithm differs between standard libraries).
struct InitOptions {
  std::uint64_t seed = 0;
  double matrix_std = 0.02;  // normal(0, 0.02) for weight matrices and embeddings (GPT-2 / HF initializer_range)
};

// Normal(0, 1) deviate number `index` of the stream `seed` (exposed for tests).
double counter_normal(std::uint64_t seed, std::uint64_t index);

// Writes the initial values of model elements [first_element, first_element + out.size()): normal(0, std) for tensors
// of rank ≥ 2, ones for 1-D weights (RMSNorm scales), zeros for 1-D tensors whose name ends in "bias"; LoRA adapters
// (Note [Fine-tuning layout] in param_layout.h) as PEFT's default init_lora_weights=True (peft/tuners/lora/layer.py,
// reset_lora_parameters): lora_A kaiming_uniform_(a=√5), i.e. uniform(−1/√in, 1/√in) (gain √(2/(1+a²)) = √(1/3),
// bound gain·√(3/fan_in)), lora_B zeros, so the adapted model starts as the base model. The uniform deviate of
// element i reads output 2i of the same counter stream (Note [Sharded init] holds for it too).
void init_parameters(const ModelLayout& layout, const InitOptions& options, std::int64_t first_element,
                     std::span<float> out);
std::vector<float> init_model_parameters(const ModelLayout& layout, const InitOptions& options);

}  // namespace shardplan::runtime
