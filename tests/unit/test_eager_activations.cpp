// Tests of what an eager (HF attn_implementation="eager") llama block keeps for backward: Note [Eager composite
// activations] op by op, per tensor dtype, against the fused and materialised paths, which it must leave as they were.
#include <doctest/doctest.h>

#include "errors.h"
#include "model_presets.h"
#include "tensor_parallel.h"
#include "training.h"

using namespace shardplan;

namespace {

const LayerSpec& first_block(const ModelSpec& model) {
  for (const LayerSpec& layer : model.layers) {
    if (layer.kind == LayerKind::transformer_block) return layer;
  }
  throw InternalError("no block");
}
// A block of a temporary model would dangle.
const LayerSpec& first_block(const ModelSpec&& model) = delete;

constexpr auto kEager = AttentionActivations::eager_composite;
constexpr auto kNone = ActivationCheckpointing::none;

}  // namespace

// tiny-llama: h = q = 128, kv = 64 (GQA 4/2 heads of 32), f = 352. Per token in fp32, eager keeps the minimal set
// 4h + 2q + 2kv + 4f, plus per RMSNorm x·rsqrt (h) and rsqrt (1), plus repeat_kv's k and v at q width (2(q - kv)):
// 6h + 4q + 4f + 2 = 2690 elements, and the softmax output, 4 heads per position. What autograd saved for
// tests/python/llama_reference.py's block under torch >= 2.2, element for element (test_torch_bridge.py).
TEST_CASE("eager llama block: fp32 kept elements per token are 6h + 4q + 4f + 2 and the softmax output") {
  const ModelSpec block_model = preset_model("tiny-llama");
  const LayerSpec& block = first_block(block_model);
  const double h = 128, q = 128, f = 352, heads = 4;
  CHECK(6 * h + 4 * q + 4 * f + 2 == 2690);
  for (std::int64_t s : {128, 1000}) {
    CAPTURE(s);
    CHECK(block.activation_bytes_per_token(s, 4, kEager, kNone) ==
          doctest::Approx(4.0 * (6 * h + 4 * q + 4 * f + 2) + 4.0 * heads * static_cast<double>(s)));
  }
  // The final RMSNorm keeps its input, rsqrt and x·rsqrt (its weighted output is the LM head's input).
  const ModelSpec model = preset_model("tiny-llama");
  const LayerSpec& norm = model.layers[model.layers.size() - 2];
  REQUIRE(norm.kind == LayerKind::norm);
  CHECK(norm.activation_bytes_per_token(128, 4, kEager, kNone) == doctest::Approx(4.0 * (2 * h + 1)));
}

// Under bf16 mixed precision each RMSNorm's input is kept as its fp32 upcast (pow saves x.to(float32)), its rsqrt is
// fp32, x·rsqrt is cast back before the weight multiplies it; softmax(dtype=float32) keeps its fp32 output and P·V
// its bf16 cast: 2 bytes × (4h + 4q + 4f) + 4 bytes × (2h + 2) + 6 bytes × heads per position.
TEST_CASE("eager llama block: bf16 counts the fp32 tensors at 4 bytes (llama3-8b)") {
  const ModelSpec block_model = preset_model("llama3-8b");
  const LayerSpec& block = first_block(block_model);
  const double h = 4096, q = 4096, f = 14336, heads = 32;
  for (std::int64_t s : {1024, 8192}) {
    CAPTURE(s);
    CHECK(block.activation_bytes_per_token(s, 2, kEager, kNone) ==
          doctest::Approx(2.0 * (4 * h + 4 * q + 4 * f) + 4.0 * (2 * h + 2) + 6.0 * heads * static_cast<double>(s)));
  }
}

TEST_CASE("eager llama block: the flash and materialised paths keep what they kept") {
  const ModelSpec block_model = preset_model("llama3-8b");
  const LayerSpec& block = first_block(block_model);
  const double h = 4096, kv = 1024, f = 14336, heads = 32;
  CHECK(block.activation_bytes_per_token(8192, 2, AttentionActivations::flash, kNone) ==
        doctest::Approx(2.0 * (6 * h + 2 * kv + 4 * f) + 4.0 * heads));
  CHECK(block.activation_bytes_per_token(1024, 2, AttentionActivations::materialised, kNone) ==
        doctest::Approx(2.0 * (6 * h + 2 * kv + 4 * f) + 2.0 * heads * 1024));
  // The bool shorthand is the same two.
  CHECK(block.activation_bytes_per_token(1024, 2, false, kNone) ==
        block.activation_bytes_per_token(1024, 2, AttentionActivations::materialised, kNone));
  CHECK(block.activation_bytes_per_token(1024, 2, true, kNone) ==
        block.activation_bytes_per_token(1024, 2, AttentionActivations::flash, kNone));
  // GPT-2 (LayerNorm, no GQA) has no composite extras counted: eager is the materialised set there.
  const ModelSpec gpt2_model = preset_model("gpt2");
  const LayerSpec& gpt2 = first_block(gpt2_model);
  CHECK(gpt2.activation_bytes_per_token(1024, 2, kEager, kNone) ==
        gpt2.activation_bytes_per_token(1024, 2, AttentionActivations::materialised, kNone));
}

TEST_CASE("eager llama block under checkpointing: full keeps the input, selective keeps the norms' extras only") {
  const ModelSpec block_model = preset_model("tiny-llama");
  const LayerSpec& block = first_block(block_model);
  const double h = 128, kv = 64, f = 352;
  CHECK(block.activation_bytes_per_token(512, 4, kEager, ActivationCheckpointing::full) == doctest::Approx(4.0 * h));
  // Selective recompute rebuilds the attention core from q, k and v: no scores, no repeat_kv copies.
  CHECK(block.activation_bytes_per_token(512, 4, kEager, ActivationCheckpointing::selective) ==
        doctest::Approx(4.0 * (6 * h + 2 * kv + 4 * f + 2 * h + 2)));
}

TEST_CASE("eager llama block under tensor parallelism: norms on the sequence shard, repeat_kv split by heads") {
  const ModelSpec model = preset_model("llama3-8b");
  TensorParallelStyle style;
  style.degree = 4;
  style.sequence_parallel = false;
  const LayerSpec& whole = first_block(model);
  const ModelSpec shard_model = tensor_parallel_shard(model, style);
  const LayerSpec& shard = first_block(shard_model);
  const double h = 4096, q = 4096, kv = 1024, heads = 32;
  const auto extra = [](const LayerSpec& block) {
    return block.activation_bytes_per_token(2048, 2, kEager, kNone) -
           block.activation_bytes_per_token(2048, 2, AttentionActivations::materialised, kNone);
  };
  // bf16: norms 2 × (2 bytes x·rsqrt + 2 more bytes of fp32 input) × h + 2 × 4 bytes rsqrt, whole on every rank
  // without sequence parallelism; repeat_kv 2 bytes × 2(q - kv) and the fp32 softmax 4 bytes × heads × s, split.
  CHECK(extra(whole) == doctest::Approx(2 * 4.0 * h + 8.0 + 2.0 * 2 * (q - kv) + 4.0 * heads * 2048));
  CHECK(extra(shard) == doctest::Approx(2 * 4.0 * h + 8.0 + (2.0 * 2 * (q - kv) + 4.0 * heads * 2048) / 4));
}

TEST_CASE("eager attention: the CLI's eager is its own kernel; flash with it is refused") {
  TrainingConfig training;
  CHECK(training.attention_activations() == AttentionActivations::flash);
  training.flash_attention = false;
  CHECK(training.attention_activations() == AttentionActivations::materialised);  // --no-flash-attention, runtimes
  training.attention_kernel = attention_kernel_from_string("eager");
  CHECK(training.attention_activations() == kEager);
  CHECK(std::string(to_string(training.attention_kernel)) == "eager");
  training.flash_attention = true;
  CHECK_THROWS_WITH_AS(validate_training(training, preset_model("tiny-llama")),
                       doctest::Contains("flash_attention false"), InputError);
}
