// LayerKernel: the driver interface every layer kind plugs into (forward, backward, recompute), plus its factories.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "model_spec.h"
#include "param_layout.h"
#include "runtime_types.h"
#include "saved_activations.h"

namespace shardplan::runtime {

// The hyper-parameters every llama-family kernel needs, taken from a DecoderArchitecture. RMSNorm epsilon and the
// RoPE base are not in DecoderArchitecture; the defaults are Llama 2's (Touvron et al. 2023; HF LlamaConfig).
struct DecoderDims {
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_heads = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t max_positions = 0;
  bool attention_bias = false;  // Qwen2-style biases on q, k and v
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  // LoRA's scaling of the adapters' output, lora_alpha / r (peft/tuners/lora/layer.py update_layer, use_rslora
  // False); 0 without LoRA (projection.h).
  double lora_scaling = 0;
  std::int64_t kv_dim() const { return head_dim * num_kv_heads; }
  // The query projection's width: hidden_size for a whole model, 1/degree of it for a tensor-parallel rank's heads
  // (tensor_parallel_model.h), so the attention code never assumes heads·head_dim = hidden_size.
  std::int64_t q_dim() const { return head_dim * num_heads; }
};

// Checks that `model` is something this runtime can execute (a llama-family architecture without dropout, an even
// head dimension; under fine-tuning no QLoRA and no lora_dropout) and returns its dimensions; InputError naming the
// model otherwise.
DecoderDims decoder_dims(const ModelSpec& model);

// What a kernel reads in forward: the hidden states, and the token ids of the batch it needs.
struct LayerInput {
  int micro_batch = 0;
  int seq_len = 0;
  std::span<const float> hidden;       // [micro_batch·seq_len × width]; empty for the embedding
  std::span<const std::int32_t> ids;   // tokens (embedding) or targets (loss); empty otherwise
  std::int64_t token_count() const { return static_cast<std::int64_t>(micro_batch) * seq_len; }
};

struct LayerForward {
  Activations output;      // next layer's input; for the loss layer a scalar holding the mean loss
  SavedActivations saved;  // what backward needs (only the input under full checkpointing)
  // Bytes the forward held beside `saved` and released before returning: under full checkpointing, the complete
  // saved state it built before dropping all but the input (the planner's Note [Workspaces]).
  std::int64_t workspace_bytes = 0;
};

// Note [Kernel driver]: forward() and backward() are the same for every kind; each kind implements run_forward (which
// computes the output and fills `saved`) and run_backward (which reads a complete `saved`). Full checkpointing is
// handled here once: forward drops everything but the input; backward first recomputes the forward from that input
// with the same code and parameters, so the gradients are bitwise those of the un-checkpointed run. Selective
// checkpointing is passed to run_forward, and a kernel may leave out what its run_backward can rebuild cheaply.
class LayerKernel {
 public:
  enum class InputIds { none, tokens, targets };

  virtual ~LayerKernel() = default;
  virtual LayerKind kind() const = 0;
  virtual const char* kernel_name() const = 0;
  virtual InputIds input_ids() const { return InputIds::none; }
  // Whether the kernel reads the TP group's whole micro-batch of ids (Batch::group_degree) rather than its rows'.
  virtual bool reads_group_ids() const { return false; }
  // Whether its backward reads the input the driver keeps (SavedActivations::input). A kernel that keeps what it
  // needs in another form (the loss-parallel head: its gathered input) says no, and the driver then keeps the input
  // only for a checkpointed layer's recompute.
  virtual bool backward_reads_input() const { return true; }
  virtual std::int64_t output_width() const = 0;

  // `input` is the previous layer's output (ignored, may be empty, for the embedding).
  LayerForward forward(const LayerParams& params, const Batch& batch, const Activations& input,
                       ActivationCheckpointing checkpointing) const;
  // Returns the gradient with respect to the input (empty for the embedding) and ADDS the parameter gradients into
  // `grads`, a view with the same layout as `params`. `grad_output` has the output's shape; for the loss layer it is
  // the scalar dL/dloss (1, or 1/k when k micro-batches are accumulated).
  Activations backward(const LayerParams& params, const SavedActivations& saved, const Activations& grad_output,
                       const LayerParams& grads) const;
  // Rebuilds the complete saved state from a checkpointed one by running forward again. An executor that schedules
  // recompute as its own op calls this and then backward() with the result, which then does not recompute again.
  SavedActivations recompute(const LayerParams& params, const SavedActivations& checkpointed) const;
  // Bytes of the temporary buffers backward holds at once beside `saved` (the planner's Note [Workspaces]): the
  // loss's fp32 gradients. An executor that tracks memory charges them for the duration of the backward op.
  virtual std::int64_t backward_workspace_bytes(const SavedActivations& saved) const {
    (void)saved;
    return 0;
  }

  // Note [Progress hook]: an executor whose collectives advance only while the host calls into the communication
  // library (MPI without an asynchronous progress thread: Note [Progress] in mpi_communicator.h) installs a hook here;
  // kernels call it between the large parts of a pass (attention, MLP), so an in-flight collective moves on during
  // a layer instead of only between layers. Without it a collective that needs a few rounds spans whole layers, and
  // the memory it holds stays allocated that long. Empty by default; the hook must not touch this layer's buffers.
  void set_progress_hook(ProgressPoll hook) { progress_hook_ = std::move(hook); }

 protected:
  const ProgressPoll& progress_hook() const { return progress_hook_; }

  virtual Activations run_forward(const LayerParams& params, const LayerInput& input,
                                  ActivationCheckpointing checkpointing, SavedActivations& saved) const = 0;
  virtual Activations run_backward(const LayerParams& params, const SavedActivations& saved,
                                   const Activations& grad_output, const LayerParams& grads) const = 0;
  // The width every non-embedding kernel expects of its input.
  virtual std::int64_t input_width() const = 0;

 private:
  ProgressPoll progress_hook_;
};

// One factory per layer kind (each in its own file) and the dispatcher that picks by LayerSpec kind.
std::unique_ptr<LayerKernel> make_embedding_layer(const DecoderDims& dims);
std::unique_ptr<LayerKernel> make_rmsnorm_layer(const DecoderDims& dims);
std::unique_ptr<LayerKernel> make_decoder_block(const DecoderDims& dims);
std::unique_ptr<LayerKernel> make_lm_head_loss(const DecoderDims& dims);
// Kernel for model.layers[index]; checks its tensors (of the owner, for a tied lm_head) have the names and shapes
// the kernel reads; InputError otherwise.
std::unique_ptr<LayerKernel> make_layer_kernel(const ModelSpec& model, std::size_t index);

}  // namespace shardplan::runtime
