#pragma once
// The hyperparameters the kernels need to run a Llama-family layer. model::ModelConfig extends this with what
// only the readers and the front ends use (names, context length).
#include <vector>

namespace kvscope::kernels {

// How RoPE pairs dimensions. GGUF llama weights were permuted by the converter for adjacent pairs
// (2i, 2i+1); Hugging Face checkpoints pair i with i + d/2.
enum class RopeStyle { AdjacentPairs, HalfSplit };

struct ModelShape {
  int n_layers = 0;
  int n_heads = 0;     // query heads
  int n_kv_heads = 0;  // key/value heads (GQA when fewer than n_heads)
  int dim = 0;         // embedding size
  int ffn_dim = 0;
  int head_dim = 0;  // dim / n_heads
  int vocab_size = 0;
  int rope_dim = 0;  // dimensions rotated per head
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;
  RopeStyle rope_style = RopeStyle::AdjacentPairs;
  // Per rotated pair i, theta_i = position * base^(-2i/rope_dim) / rope_freq_divisors[i] (empty: all 1). Linear
  // and Llama 3 rope scaling (core/model/rope_scaling.cpp) are such divisors, as is llama.cpp's rope_freqs tensor.
  std::vector<float> rope_freq_divisors;
  bool qkv_bias = false;  // q, k and v projections add a bias (Qwen2; attention_bias in Llama/Qwen3 configs)
  bool o_bias = false;    // the output projection adds a bias (attention_bias in Llama/Qwen3 configs)
  bool qk_norm = false;   // q and k get a per-head RMSNorm before RoPE (Qwen3)

  // --- Phi-3 longrope and mixture of experts (issue 39) ---
  // Longrope (Phi-3/3.5): a forward call whose last position + 1 exceeds rope_long_after rotates with these
  // divisors instead of rope_freq_divisors, as transformers' longrope_frequency_update switches its frequencies
  // per call (empty: one set for every position).
  std::vector<float> rope_freq_divisors_long;
  int rope_long_after = 0;
  float rope_attention_factor = 1.0f;  // multiplies cos and sin (longrope's attention scaling), so q.k by its square
  // Routed experts (Mixtral, Qwen3-MoE): every layer's FFN is n_experts SwiGLUs of ffn_dim, of which a router picks
  // n_experts_used per token (core/engine/expert_routing.h). 0: a dense SwiGLU.
  int n_experts = 0;
  int n_experts_used = 0;
  bool expert_weights_norm = true;  // the chosen experts' probabilities are renormalised to sum to 1

  int group_size() const { return n_heads / n_kv_heads; }  // query heads per KV head
  int q_width() const { return n_heads * head_dim; }
  int kv_width() const { return n_kv_heads * head_dim; }
};

}  // namespace kvscope::kernels
