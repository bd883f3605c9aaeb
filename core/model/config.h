#pragma once
// Llama-family hyperparameters, read from GGUF metadata (or a Hugging Face config.json).
#include <cstdint>
#include <string>
#include <vector>

#include "core/model/rope_scaling.h"
#include "kernels/model_shape.h"

namespace kvscope::model {

class GgufFile;
class HfFolder;

using kernels::RopeStyle;

// Upper bounds well beyond any model kvscope could run; the readers of both formats use them to catch corrupt
// or hostile values before they reach a size computation.
inline constexpr int64_t kMaxLayers = 1024;
inline constexpr int64_t kMaxHeads = 1024;
inline constexpr int64_t kMaxDim = 1 << 16;
inline constexpr int64_t kMaxFfnDim = 1 << 20;
inline constexpr int64_t kMaxVocab = 1 << 22;
inline constexpr int64_t kMaxContext = 1 << 24;
inline constexpr int64_t kMaxExperts = 1 << 12;

// The kernels' ModelShape (layer sizes, RoPE, biases, norms) plus what only readers and front ends use.
struct ModelConfig : kernels::ModelShape {
  std::string architecture;  // GGUF "llama", or the Hugging Face class, e.g. "LlamaForCausalLM"
  std::string name;
  int context_length = 0;
  bool tied_embeddings = false;
  // The rope scaling the checkpoint declares (its divisors are ModelShape::rope_freq_divisors); "rope_freqs"
  // for a GGUF that gives the divisors as a tensor, without naming the scaling.
  RopeScaling rope_scaling;

  // --- Phi-3 and mixture of experts (issue 39) ---
  // Phi-3 stores one qkv projection (q rows, then k, then v) and one gate_up projection (gate rows, then up);
  // the readers split them into views (core/model/fused_tensors.h).
  bool fused_projections = false;
  // --- Gemma (core/model/gemma.h) ---
  // Added to every RMSNorm weight when the weights are bound: Hugging Face's Gemma stores w for a norm that
  // multiplies by (1 + w); llama.cpp's converter stores 1 + w already.
  float norm_weight_offset = 0.0f;
  double query_pre_attn_scalar = 0.0;  // as the checkpoint gives it (0: head_dim, the Llama scale)
  // A Hugging Face folder's prefix of the text model's tensors: "model." (model.layers.N..., model.embed_tokens),
  // or "language_model.model." for the text part of a multimodal Gemma3ForConditionalGeneration folder.
  std::string hf_tensor_prefix = "model.";
  std::string hf_output_name = "lm_head.weight";
};

// Reads and validates the hyperparameters; throws Error naming the file and key.
ModelConfig read_config(const GgufFile& file);
// The same from a Hugging Face config.json (core/model/hf_config.cpp); throws Error naming config.json and the field.
ModelConfig read_config(const HfFolder& folder);

}  // namespace kvscope::model
