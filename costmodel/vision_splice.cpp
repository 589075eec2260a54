// The splice of a multimodal model's vision layers after its text embedding (vision_splice.h).
#include "vision_splice.h"

#include <utility>

namespace shardplan {

ModelSpec splice_vision_after_embedding(ModelSpec decoder, std::vector<LayerSpec> vision,
                                        const std::string& decoder_prefix, const std::string& origin) {
  std::vector<LayerSpec> text = std::move(decoder.layers);
  ModelSpec model = std::move(decoder);  // its name, widths and default sequence length
  model.max_positions = model.max_trainable_positions();  // the decoder's, kept past the architecture
  model.architecture.reset();
  model.layers.clear();
  model.layers.reserve(text.size() + vision.size());
  for (std::size_t index = 0; index < text.size(); ++index) {
    LayerSpec layer = std::move(text[index]);
    layer.name = decoder_prefix + layer.name;
    // Every layer past the embedding moves back by the vision layers; a tie to the embedding itself does not.
    if (layer.tied_to_layer && *layer.tied_to_layer > 0) *layer.tied_to_layer += vision.size();
    model.layers.push_back(std::move(layer));
    if (index == 0) {
      for (LayerSpec& part : vision) model.layers.push_back(std::move(part));
    }
  }
  validate_model(model, origin);
  return model;
}

}  // namespace shardplan
