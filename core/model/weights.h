#pragma once
// The model's tensors, as views into the memory-mapped GGUF or safetensors files (never copied whole).
#include <cstdint>
#include <vector>

#include "core/model/ggml_type.h"
#include "kernels/model_weights.h"

namespace kvscope::model {

class GgufFile;
class HfFolder;
struct ModelConfig;

// The weight types belong to the kernels (kernels/model_weights.h); the readers bind them.
using kernels::LayerWeights;
using kernels::ModelWeights;
using kernels::QuantMatrix;

// Binds every tensor the config needs, checking names, shapes and types; throws Error naming the tensor.
ModelWeights bind_weights(const GgufFile& file, const ModelConfig& config);
// The same from a Hugging Face folder's safetensors (core/model/hf_weights.cpp): the matrices stay in their
// F32/F16/BF16 storage, and only the norm vectors are converted to float.
ModelWeights bind_weights(const HfFolder& folder, const ModelConfig& config);

}  // namespace kvscope::model
