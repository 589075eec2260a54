// The FSDP2 script's tensor parallelism: torchtitan's Llama TP plan and the full-length rotary positions hook.
#include <sstream>
#include <string>
#include <vector>

#include "plan_export.h"

namespace shardplan::export_detail {

// Note [Exported tensor parallelism]: torchtitan's apply_tp (torchtitan/models/llama3/infra/parallelize.py) written
// for Hugging Face Llama module names: per block, SequenceParallel norms, the attention and MLP inputs redistributed
// from sequence shards to replicated, q/k/v and gate/up ColwiseParallel, o_proj and down_proj RowwiseParallel back to
// sequence shards; the token embedding RowwiseParallel, the final norm SequenceParallel, lm_head ColwiseParallel with
// vocabulary-sharded logits for loss_parallel. Applied before activation checkpointing and fully_shard, as torchtitan
// orders them. The cost model's view of the same plan is Note [Tensor parallelism] (costmodel/tensor_parallel.h).
std::string python_tensor_parallel(const ModelSpec& model, bool float8_tensorwise) {
  std::vector<std::string> blocks;
  for (const LayerSpec& layer : model.layers) {
    if (layer.kind == LayerKind::transformer_block) blocks.push_back(python_string(layer.name));
  }
  std::ostringstream py;
  py << "TP_BLOCKS = " << python_list(blocks, 0, 12) << "\n\n\n"
     << "def _full_length_positions(module, args, kwargs):\n"
     << "    # Rotary embeddings from the full sequence. The embedding's output is sharded over the sequence, and\n"
     << "    # LlamaModel derives cache_position, position_ids and then cos/sin from that local length, while attention\n"
     << "    # sees the gathered full length (transformers PR #32597). torchtitan hands every block the full-length\n"
     << "    # freqs_cis (torchtitan/models/llama3/model/model.py); here LlamaModel gets full-length position_ids from\n"
     << "    # the replicated input_ids, so model.model.rotary_emb (replicated, not parallelized) computes cos/sin for\n"
     << "    # every position. Training uses no KV cache, and SDPA's causal path (no padding mask) is the one that holds.\n"
     << "    import torch\n\n"
     << "    input_ids = kwargs.get(\"input_ids\", args[0] if args else None)\n"
     << "    if kwargs.get(\"position_ids\") is None and input_ids is not None:\n"
     << "        kwargs[\"position_ids\"] = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)\n"
     << "    kwargs[\"use_cache\"] = False\n"
     << "    return args, kwargs\n\n\n"
     << "def _apply_tensor_parallel(model, tp_mesh):\n"
     << "    # torchtitan's apply_tp on Hugging Face Llama modules (Note [Exported tensor parallelism] in shardplan).\n"
     << "    # Compute the loss under torch.distributed.tensor.parallel.loss_parallel(): the logits stay sharded over\n"
     << "    # the vocabulary. Blocks see sequence shards between them; run attention with SDPA's causal kernel.\n"
     << "    from torch.distributed.tensor import Replicate, Shard\n"
     << "    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,\n"
     << "                                                   SequenceParallel, parallelize_module)\n";
  if (float8_tensorwise) {
    // torchtitan's apply_tp with enable_float8_tensorwise_tp: the blocks' styles from torchao, the embedding, norm
    // and output head (kept in bf16) with the plain ones.
    py << "    # float8 tensorwise: the blocks' projections with torchao's float8 styles, as torchtitan's apply_tp does.\n"
       << "    from torchao.float8.float8_tensor_parallel import (Float8ColwiseParallel, Float8RowwiseParallel,\n"
       << "                                                       PrepareFloat8ModuleInput)\n"
       << "    block_colwise, block_rowwise, block_prepare = Float8ColwiseParallel, Float8RowwiseParallel, "
          "PrepareFloat8ModuleInput\n";
  } else {
    py << "    block_colwise, block_rowwise, block_prepare = ColwiseParallel, RowwiseParallel, PrepareModuleInput\n";
  }
  py << "\n    model.get_submodule(\"model\").register_forward_pre_hook(_full_length_positions, with_kwargs=True)\n"
     << "    parallelize_module(model, tp_mesh, {\n"
     << "        \"model.embed_tokens\": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),\n"
     << "        \"model.norm\": SequenceParallel(),\n"
     << "        \"lm_head\": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),\n"
     << "    })\n"
     << "    for path in TP_BLOCKS:\n"
     << "        parallelize_module(model.get_submodule(path), tp_mesh, {\n"
     << "            \"input_layernorm\": SequenceParallel(),\n"
     << "            \"self_attn\": block_prepare(input_kwarg_layouts={\"hidden_states\": Shard(1)},\n"
     << "                                        desired_input_kwarg_layouts={\"hidden_states\": Replicate()},\n"
     << "                                        use_local_output=True),\n"
     << "            \"self_attn.q_proj\": block_colwise(),\n"
     << "            \"self_attn.k_proj\": block_colwise(),\n"
     << "            \"self_attn.v_proj\": block_colwise(),\n"
     << "            \"self_attn.o_proj\": block_rowwise(output_layouts=Shard(1)),\n"
     << "            \"post_attention_layernorm\": SequenceParallel(),\n"
     << "            \"mlp\": block_prepare(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),\n"
     << "                                  use_local_output=True),\n"
     << "            \"mlp.gate_proj\": block_colwise(),\n"
     << "            \"mlp.up_proj\": block_colwise(),\n"
     << "            \"mlp.down_proj\": block_rowwise(output_layouts=Shard(1)),\n"
     << "        })\n";
  return py.str();
}

}  // namespace shardplan::export_detail
