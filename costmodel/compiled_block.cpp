// Note [Compiled blocks] (compiled_block.h): the llama block's tensors eager keeps and a torch.compile'd block does not.
#include "compiled_block.h"

namespace shardplan {

CompiledBlockSavings compiled_llama_block_savings(const DecoderArchitecture& arch, const LayerKernelSpec& spec) {
  CompiledBlockSavings savings;
  // The gated MLP's activation output (silu(gate), Gemma's gelu(gate)): read in backward only by the mul's backward,
  // pointwise and fusible, so the partitioner recomputes it from the saved gate output.
  savings.recomputed_elements_per_token = static_cast<double>(arch.intermediate_size);
  // The last matmul (down_proj) feeds only the residual add — except where Gemma's post_feedforward_layernorm reads
  // it, whose backward needs its input.
  if (!spec.projections.empty() && !arch.sandwich_norms) {
    const ProjectionSpec& last = spec.projections.back();
    if (last.saved_by_op_policy) savings.unread_selective_op_elements_per_token = static_cast<double>(last.out_features);
  }
  return savings;
}

}  // namespace shardplan
