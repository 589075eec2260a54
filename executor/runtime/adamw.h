// AdamW (Loshchilov & Hutter 2019) on a flat shard of parameters, elementwise, with PyTorch's semantics.
#pragma once

#include <cstdint>
#include <span>

namespace shardplan::runtime {

struct AdamWOptions {
  double learning_rate = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

// One step (step counts from 1) over equally long params, grads, exp_avg (m) and exp_avg_sq (v), as torch.optim.AdamW
// (foreach=False): p ← p·(1 − lr·λ); m ← β₁m + (1−β₁)g; v ← β₂v + (1−β₂)g²;
// p ← p − (lr / (1−β₁ᵗ)) · m / (√v / √(1−β₂ᵗ) + ε). Decay applies to every element of the shard (the shard does not
// know tensor boundaries). Elementwise and in a fixed order, so a shard's result equals that slice of the unsharded
// step bit for bit. InputError for mismatched lengths or step < 1.
void adamw_step(std::span<float> params, std::span<const float> grads, std::span<float> exp_avg,
                std::span<float> exp_avg_sq, std::int64_t step, const AdamWOptions& options);

}  // namespace shardplan::runtime
