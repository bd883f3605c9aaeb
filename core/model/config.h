#pragma once
// Llama-family hyperparameters, read from GGUF metadata (or a Hugging Face config.json).
#include <string>

namespace kvscope::model {

class GgufFile;

// How RoPE pairs dimensions. GGUF llama weights were permuted by the converter for adjacent pairs
// (2i, 2i+1); Hugging Face checkpoints pair i with i + d/2.
enum class RopeStyle { AdjacentPairs, HalfSplit };

struct ModelConfig {
  std::string architecture;  // "llama"
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

  int group_size() const { return n_heads / n_kv_heads; }  // query heads per KV head
};

// Reads and validates the hyperparameters; throws Error naming the file and key.
ModelConfig read_config(const GgufFile& file);

}  // namespace kvscope::model
