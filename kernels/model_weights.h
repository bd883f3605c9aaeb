#pragma once
// The model's tensors as the kernels read them: views into the memory-mapped GGUF or safetensors files in their
// stored type (never copied whole on the host). core/model binds them (bind_weights); a backend that keeps its
// own copy (CUDA) receives them once through Backend::upload_weights.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/ggml_type.h"

namespace kvscope::kernels {

// A weight matrix W[rows][cols] stored row-major in its file type: y = W x takes x of length cols.
struct QuantMatrix {
  GgmlType type = GgmlType::F32;
  int rows = 0;
  int cols = 0;
  const uint8_t* data = nullptr;
  std::size_t row_bytes = 0;
  const uint8_t* row(int r) const { return data + static_cast<std::size_t>(r) * row_bytes; }

  // A view of rows x cols values of `type` stored row-major at `data`.
  static QuantMatrix view(GgmlType type, int rows, int cols, const uint8_t* data) {
    return {type, rows, cols, data, ggml_row_bytes(type, static_cast<uint64_t>(cols))};
  }
};

struct LayerWeights {
  std::vector<float> attn_norm;  // [dim]
  std::vector<float> ffn_norm;   // [dim]
  QuantMatrix wq;                // [n_heads*head_dim][dim]
  QuantMatrix wk;                // [n_kv_heads*head_dim][dim]
  QuantMatrix wv;                // [n_kv_heads*head_dim][dim]
  QuantMatrix wo;                // [dim][n_heads*head_dim]
  QuantMatrix w_gate;            // [ffn_dim][dim]
  QuantMatrix w_up;              // [ffn_dim][dim]
  QuantMatrix w_down;            // [dim][ffn_dim]
  // Present only when the config asks for them (ModelConfig::qkv_bias, o_bias, qk_norm); empty otherwise.
  std::vector<float> bq, bk, bv;      // [n_heads*head_dim], [n_kv_heads*head_dim] x2
  std::vector<float> bo;              // [dim]
  std::vector<float> q_norm, k_norm;  // [head_dim], shared by all heads
  // Mixture of experts (ModelShape::n_experts > 0; w_gate, w_up, w_down are then empty): the router and each
  // expert's SwiGLU, views into the files' per-expert or merged 3-D tensors.
  QuantMatrix router;                               // [n_experts][dim]
  std::vector<QuantMatrix> expert_gate, expert_up;  // n_experts x [ffn_dim][dim]
  std::vector<QuantMatrix> expert_down;             // n_experts x [dim][ffn_dim]
  // Gemma (ModelShape::post_norms): RMSNorm of the attention and feed-forward outputs; empty otherwise.
  std::vector<float> post_attn_norm, post_ffn_norm;  // [dim]
  // gpt-oss: each query head's sink logit (ModelShape::attention_sinks), the router's and the experts' biases
  // (ModelShape::expert_biases); empty otherwise.
  std::vector<float> sinks;                                            // [n_heads]
  std::vector<float> router_bias;                                      // [n_experts]
  std::vector<std::vector<float>> expert_gate_bias, expert_up_bias;  // n_experts x [ffn_dim]
  std::vector<std::vector<float>> expert_down_bias;                   // n_experts x [dim]
};

struct ModelWeights {
  QuantMatrix token_embedding;     // [vocab][dim]
  std::vector<float> output_norm;  // [dim]
  QuantMatrix output;              // [vocab][dim]; the embedding itself when tied
  std::vector<LayerWeights> layers;
  // Matrices a reader had to lay out anew (gpt-oss folders store their experts transposed, gate and up
  // interleaved, or as MXFP4 blocks in another nibble order), which views above point into: the buffers' owners,
  // shared so that a copy of the weights stays valid.
  std::vector<std::shared_ptr<const void>> repacked;
};

}  // namespace kvscope::kernels
