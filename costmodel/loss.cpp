// The output head under each LossKind (Note [Fine-tuning losses] in loss.h).
#include "loss.h"

#include <algorithm>
#include <cstdint>

#include "errors.h"
#include "name_suggest.h"

namespace shardplan {

LossKind loss_from_string(const std::string& text) {
  if (text == "cross-entropy") return LossKind::cross_entropy;
  if (text == "chunked-ce") return LossKind::chunked_ce;
  if (text == "linear-ce") return LossKind::linear_ce;
  throw InputError("--loss '" + text + "': expected cross-entropy, chunked-ce or linear-ce" +
                   did_you_mean(text, {"cross-entropy", "chunked-ce", "linear-ce"}));
}

const char* to_string(LossKind loss) {
  switch (loss) {
    case LossKind::chunked_ce: return "chunked-ce";
    case LossKind::linear_ce: return "linear-ce";
    case LossKind::cross_entropy: break;
  }
  return "cross-entropy";
}

namespace {

// The plain loss's kernel (block_kernels.cpp lm_head_kernels) and Gemma 2's soft-capping, by the names they carry.
constexpr const char* kLossKernel = "cross-entropy (fp32)";
constexpr const char* kSoftcapKernel = "final logit soft-capping";

void chunk_loss(LayerSpec& head) {
  const int chunks = kChunkedOutputLossChunks;
  ActivationFootprint& a = head.activations;
  a.forward_workspace_fp32_per_token /= chunks;
  a.backward_workspace_fp32_per_token /= chunks;
  a.fp32_tensor_count = chunks;
  for (ElementwiseSpec& kernel : head.kernels->elementwise) {
    if (kernel.name != kLossKernel) continue;
    kernel.name = "cross-entropy (fp32, 8 chunks)";
    kernel.forward.kernels *= chunks;
    kernel.backward.kernels *= chunks;
  }
}

void fuse_linear_loss(LayerSpec& head) {
  const ProjectionSpec& projection = head.kernels->projections.front();  // lm_head_kernels: the one projection
  const std::int64_t hidden = projection.in_features, vocab = projection.out_features;
  const auto v = static_cast<double>(vocab), h = static_cast<double>(hidden);
  ActivationFootprint& a = head.activations;
  a.elements_per_token = h;  // grad_input, saved for backward in place of the input and the logits
  a.fp32_bytes_per_token = 0;
  a.forward_workspace_fp32_per_token = 0;
  a.backward_workspace_fp32_per_token = 0;
  a.backward_workspace_elements_per_token = 0;
  a.forward_workspace_elements_per_token = h;  // one chunk of logits: the source's C × BT × H budget, C = 1
  // chunk_size = next_power_of_2(ceil(BT / ceil(V / H))): about ceil(V / H) chunks, one loss kernel each.
  const int chunks = static_cast<int>(std::max<std::int64_t>(1, (vocab + hidden - 1) / hidden));
  auto& kernels = head.kernels->elementwise;
  // Liger's kernel applies the soft-cap itself (HAS_SOFTCAPPING): no separate kernels, nothing kept for them.
  kernels.erase(std::remove_if(kernels.begin(), kernels.end(),
                               [](const ElementwiseSpec& kernel) { return kernel.name == kSoftcapKernel; }),
                kernels.end());
  for (ElementwiseSpec& kernel : kernels) {
    if (kernel.name != kLossKernel) continue;
    kernel.name = "fused linear cross-entropy (Liger)";
    kernel.forward = {3.0 * v, 0.0, 0.0, chunks};  // read the chunk twice, write its gradient in place
    kernel.backward = {0.0, 0.0, 0.0, 0};           // grad_output == 1: element_mul skipped
  }
}

}  // namespace

ModelSpec model_for_loss(const ModelSpec& model, LossKind loss) {
  if (loss == LossKind::cross_entropy) return model;
  ModelSpec result = model;
  for (LayerSpec& layer : result.layers) {
    if (layer.kind != LayerKind::lm_head || !layer.kernels || layer.kernels->projections.empty()) continue;
    if (loss == LossKind::chunked_ce) chunk_loss(layer);
    if (loss == LossKind::linear_ce) fuse_linear_loss(layer);
  }
  return result;
}

}  // namespace shardplan
