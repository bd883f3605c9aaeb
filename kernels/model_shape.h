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
  // --- Gemma 2 / Gemma 3 (core/model/gemma_config.cpp); the defaults leave a Llama layer unchanged ---
  enum class Activation { SiLU, GeluTanh };  // the gated feed-forward's activation: SwiGLU, or GeGLU (Gemma)
  Activation activation = Activation::SiLU;
  float embedding_scale = 1.0f;      // the embedding rows are multiplied by this (Gemma: sqrt(dim))
  float query_scale = 1.0f;          // q is multiplied by this after RoPE (Gemma: sqrt(head_dim / query_pre_attn_scalar))
  float attn_logit_softcap = 0.0f;   // scores become c * tanh(s / c) before the softmax (Gemma 2); 0: none
  float final_logit_softcap = 0.0f;  // the same on the output logits (Gemma 2); 0: none
  bool post_norms = false;           // RMSNorm of the attention and feed-forward outputs before each residual add
  int sliding_window = 0;            // keys a local layer's query sees, itself included (0: no local layers)
  std::vector<bool> layer_is_local;  // per layer: a sliding-window layer (empty: all global)
  float rope_local_base = 0.0f;      // RoPE base of local layers, which take no rope scaling (0: the global base)
  // --- gpt-oss (core/model/gpt_oss.h); the defaults leave the layers above unchanged ---
  bool attention_sinks = false;            // every head has a sink logit (LayerWeights::sinks, AttentionCall::sinks)
  bool router_softmax_after_topk = false;  // the k largest router logits, then a softmax over those k
  bool expert_biases = false;              // the router and every expert matrix add a bias
  // > 0: the experts' clamped SwiGLU (up + 1) * g * sigmoid(swiglu_alpha * g), g = min(gate, limit), up clamped
  // to [-limit, limit]; 0: SiLU(gate) * up.
  float swiglu_limit = 0.0f;
  float swiglu_alpha = 1.0f;

  bool is_local(int layer) const {
    return sliding_window > 0 && layer >= 0 && layer < static_cast<int>(layer_is_local.size()) && layer_is_local[layer];
  }
  // The window of `layer`'s attention: sliding_window for a local layer, 0 (unbounded) for a global one.
  int window_of(int layer) const { return is_local(layer) ? sliding_window : 0; }
  int local_layer_count() const {
    int n = 0;
    for (int l = 0; l < n_layers; ++l) n += is_local(l) ? 1 : 0;
    return n;
  }

  int group_size() const { return n_heads / n_kv_heads; }  // query heads per KV head
  int q_width() const { return n_heads * head_dim; }
  int kv_width() const { return n_kv_heads * head_dim; }
};

}  // namespace kvscope::kernels
