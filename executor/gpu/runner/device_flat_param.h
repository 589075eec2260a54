// DeviceFlatParam: one FSDP unit's flat parameter on one GPU rank — fp32 shard, gradient and AdamW states, the
// gathered copy in the compute dtype and the full-size fp32 gradient backward writes into.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device_layer.h"
#include "device_pool.h"
#include "param_init.h"
#include "param_layout.h"
#include "unit_layout.h"

namespace shardplan::gpu {

// Note [Device flat parameter]: the layout is the CPU runner's (Note [FlatParam layout] in flat_param.h): a unit's
// layers concatenated, right-padded to a multiple of the shard group, rank i of the group owning shard i. The
// persistent state — shard, sharded gradient, m, v — is fp32, as FSDP keeps its sharded flat parameter and AdamW its
// states. The gathered copy has the plan's compute dtype: fp32, or bf16 for bf16-mixed-fp32-reduce, where each
// rank casts its shard to bf16 in place inside the gathered buffer and NCCL gathers in place (FSDP2 likewise
// all-gathers the bf16 copy, halving the traffic). Gradients are produced, reduced and accumulated in fp32.
class DeviceFlatParam {
 public:
  // Allocates the persistent state from `pool` and uploads this rank's shard, initialised on the host exactly as
  // the CPU runner initialises it (init_unit_shard), so GPU and CPU runs start from the same numbers.
  DeviceFlatParam(const runtime::ModelLayout& model, runtime::UnitParamLayout unit, UnitLayout sizes, int shard_index,
                  const runtime::InitOptions& init, DeviceDType gather_dtype, DevicePool& pool, cudaStream_t stream);

  const UnitLayout& sizes() const { return sizes_; }
  const runtime::UnitParamLayout& unit_layout() const { return unit_; }
  DeviceDType gather_dtype() const { return gather_dtype_; }
  int shard_index() const { return shard_index_; }

  float* shard() const { return shard_.as<float>(); }
  float* shard_grad() const { return shard_grad_.as<float>(); }
  float* exp_avg() const { return exp_avg_.as<float>(); }
  float* exp_avg_sq() const { return exp_avg_sq_.as<float>(); }

  // The gathered flat parameter (padded_elements of gather_dtype), allocated on `stream` (the all-gather's).
  void* allocate_unsharded(StreamRef stream);
  bool unsharded_allocated() const { return unsharded_.allocated(); }
  void* unsharded() const { return unsharded_.data(); }
  void free_unsharded(StreamRef last_user) { unsharded_.release_after(last_user); }

  // The full-size fp32 gradient (grad_padded_elements), zeroed on `stream` when first used in a micro-batch.
  float* ensure_unsharded_grad(cudaStream_t stream);
  bool unsharded_grad_allocated() const { return unsharded_grad_.allocated(); }
  float* unsharded_grad() const { return unsharded_grad_.as<float>(); }
  void free_unsharded_grad(StreamRef last_user) { unsharded_grad_.release_after(last_user); }

  // The reduce-scatter output (grad_shard_elements, fp32, comm_buffers) until it is accumulated.
  float* allocate_reduce_output(StreamRef stream);
  bool reduce_output_allocated() const { return reduce_output_.allocated(); }
  float* reduce_output() const { return reduce_output_.as<float>(); }
  void free_reduce_output(StreamRef last_user) { reduce_output_.release_after(last_user); }

  // Views of model layer `layer` (the owner's tensors for a tied layer) in what the layers compute with (the
  // gathered copy, or the fp32 shard itself when the unit is replicated) and in where backward adds gradients.
  DeviceLayerParams layer_params(const runtime::ModelLayout& model, std::size_t layer) const;
  DeviceLayerGrads layer_grads(const runtime::ModelLayout& model, std::size_t layer) const;

 private:
  std::int64_t layer_offset(const runtime::ModelLayout& model, std::size_t layer) const;

  runtime::UnitParamLayout unit_;
  UnitLayout sizes_;
  int shard_index_ = 0;
  DeviceDType gather_dtype_ = DeviceDType::f32;
  DevicePool* pool_;
  DeviceBuffer shard_, shard_grad_, exp_avg_, exp_avg_sq_;
  DeviceBuffer unsharded_, unsharded_grad_, reduce_output_;
};

}  // namespace shardplan::gpu
