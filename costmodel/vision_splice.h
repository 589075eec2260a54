// The splice of a multimodal model's vision layers into its language model, after the text embedding, in the order
// the Hugging Face *ForConditionalGeneration classes run them (LLaVA, Gemma 3, Qwen2-VL, Llama 4).
#pragma once

#include <string>
#include <vector>

#include "model_spec.h"

namespace shardplan {

// The model `decoder`'s embedding first, then `vision` (the tower and its projector), then the rest of the decoder
// (Note [LLaVA layout] in hf_arch_llava.cpp). Each decoder layer's name gets `decoder_prefix` in front
// ("language_model." where the checkpoint nests the language model, "" where it does not); a tie to the embedding
// (index 0) stays valid. The model takes the decoder's name, widths and default sequence length and no
// DecoderArchitecture: the runtime and tensor parallelism build a decoder alone; this model is planned, simulated
// and exported. Checked with validate_model, `origin` naming the file in errors.
ModelSpec splice_vision_after_embedding(ModelSpec decoder, std::vector<LayerSpec> vision,
                                        const std::string& decoder_prefix, const std::string& origin);

}  // namespace shardplan
