// AdamW step over flat fp32 buffers.
#include "adamw.h"

#include <cmath>
#include <string>

#include "errors.h"

namespace shardplan::runtime {

void adamw_step(std::span<float> params, std::span<const float> grads, std::span<float> exp_avg,
                std::span<float> exp_avg_sq, std::int64_t step, const AdamWOptions& options) {
  if (grads.size() != params.size() || exp_avg.size() != params.size() || exp_avg_sq.size() != params.size()) {
    throw InputError("adamw_step: params, grads, exp_avg and exp_avg_sq must have equal lengths (got " +
                     std::to_string(params.size()) + ", " + std::to_string(grads.size()) + ", " +
                     std::to_string(exp_avg.size()) + ", " + std::to_string(exp_avg_sq.size()) + ")");
  }
  if (step < 1) throw InputError("adamw_step: step counts from 1, got " + std::to_string(step));
  // Scalars in double as PyTorch computes them in Python; the per-element arithmetic is fp32 as on the fp32 tensors.
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(options.beta1, t);
  const double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(options.beta2, t));
  const auto decay = static_cast<float>(1.0 - options.learning_rate * options.weight_decay);
  const auto beta1 = static_cast<float>(options.beta1), beta2 = static_cast<float>(options.beta2);
  const auto one_minus_beta1 = static_cast<float>(1.0 - options.beta1);
  const auto one_minus_beta2 = static_cast<float>(1.0 - options.beta2);
  const auto step_size = static_cast<float>(options.learning_rate / bias_correction1);
  const auto bias_correction2_sqrt_f = static_cast<float>(bias_correction2_sqrt);
  const auto eps = static_cast<float>(options.eps);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const float g = grads[i];
    params[i] *= decay;
    exp_avg[i] = beta1 * exp_avg[i] + one_minus_beta1 * g;
    exp_avg_sq[i] = beta2 * exp_avg_sq[i] + one_minus_beta2 * g * g;
    const float denom = std::sqrt(exp_avg_sq[i]) / bias_correction2_sqrt_f + eps;
    params[i] -= step_size * exp_avg[i] / denom;
  }
}

}  // namespace shardplan::runtime
