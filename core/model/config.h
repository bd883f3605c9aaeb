#pragma once
// Llama-family hyperparameters, read from GGUF metadata (or a Hugging Face config.json).
#include <cstdint>
#include <string>
#include <vector>

namespace kvscope::model {

class GgufFile;
class HfFolder;

// How RoPE pairs dimensions. GGUF llama weights were permuted by the converter for adjacent pairs
// (2i, 2i+1); Hugging Face checkpoints pair i with i + d/2.
enum class RopeStyle { AdjacentPairs, HalfSplit };

// Upper bounds well beyond any model kvscope could run; the readers of both formats use them to catch corrupt
// or hostile values before they reach a size computation.
inline constexpr int64_t kMaxLayers = 1024;
inline constexpr int64_t kMaxHeads = 1024;
inline constexpr int64_t kMaxDim = 1 << 16;
inline constexpr int64_t kMaxFfnDim = 1 << 20;
inline constexpr int64_t kMaxVocab = 1 << 22;
inline constexpr int64_t kMaxContext = 1 << 24;

struct ModelConfig {
  std::string architecture;  // GGUF "llama", or the Hugging Face class, e.g. "LlamaForCausalLM"
  std::string name;
  int n_layers = 0;
  int n_heads = 0;       // query heads
  int n_kv_heads = 0;    // key/value heads (GQA when fewer than n_heads)
  int dim = 0;           // embedding size
  int ffn_dim = 0;
  int head_dim = 0;      // dim / n_heads
  int vocab_size = 0;
  int context_length = 0;
  int rope_dim = 0;      // dimensions rotated per head
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied_embeddings = false;
  RopeStyle rope_style = RopeStyle::AdjacentPairs;
  // Per rotated pair i, theta_i = position * base^(-2i/rope_dim) / rope_freq_divisors[i] (empty: all 1). Linear
  // and Llama 3 rope scaling (core/model/rope_scaling.cpp) are such divisors, as is llama.cpp's rope_freqs tensor.
  std::vector<float> rope_freq_divisors;
  bool qkv_bias = false;  // q, k and v projections add a bias (Qwen2; attention_bias in Llama/Qwen3 configs)
  bool o_bias = false;    // the output projection adds a bias (attention_bias in Llama/Qwen3 configs)
  bool qk_norm = false;   // q and k get a per-head RMSNorm before RoPE (Qwen3)

  int group_size() const { return n_heads / n_kv_heads; }  // query heads per KV head
};

// Reads and validates the hyperparameters; throws Error naming the file and key.
ModelConfig read_config(const GgufFile& file);
// The same from a Hugging Face config.json (core/model/hf_config.cpp); throws Error naming config.json and the field.
ModelConfig read_config(const HfFolder& folder);

}  // namespace kvscope::model
