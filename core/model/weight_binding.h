#pragma once
// A model's tensors, bound the same way from every format: each format names the tensors and supplies its own
// matrix / vector binders (which check shapes and types and name the file in errors).
#include <string>

#include "core/model/config.h"
#include "core/model/weights.h"

namespace kvscope::model {

struct LayerTensorNames {
  std::string attn_norm, ffn_norm, wq, wk, wv, wo, w_gate, w_up, w_down;
  std::string bq, bk, bv, bo, q_norm, k_norm;  // read only when the config asks for them
  std::string post_attn_norm, post_ffn_norm;   // Gemma's output norms (ModelConfig::post_norms)
};

struct ModelTensorNames {
  std::string embedding, output_norm, output;
  LayerTensorNames (*layer)(int layer);
};

// llama.cpp's names (blk.N.attn_q.weight ...).
inline LayerTensorNames gguf_layer_names(int layer) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  return {p + "attn_norm.weight", p + "ffn_norm.weight",    p + "attn_q.weight",     p + "attn_k.weight",
          p + "attn_v.weight",    p + "attn_output.weight", p + "ffn_gate.weight",   p + "ffn_up.weight",
          p + "ffn_down.weight",  p + "attn_q.bias",        p + "attn_k.bias",       p + "attn_v.bias",
          p + "attn_output.bias", p + "attn_q_norm.weight", p + "attn_k_norm.weight",
          p + "post_attention_norm.weight", p + "post_ffw_norm.weight"};
}

// Hugging Face's names (model.layers.N.self_attn.q_proj.weight ...).
inline LayerTensorNames hf_layer_names(int layer) {
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  return {p + "input_layernorm.weight",  p + "post_attention_layernorm.weight",
          p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
          p + "self_attn.v_proj.weight", p + "self_attn.o_proj.weight",
          p + "mlp.gate_proj.weight",    p + "mlp.up_proj.weight",
          p + "mlp.down_proj.weight",    p + "self_attn.q_proj.bias",
          p + "self_attn.k_proj.bias",   p + "self_attn.v_proj.bias",
          p + "self_attn.o_proj.bias",   p + "self_attn.q_norm.weight",
          p + "self_attn.k_norm.weight", "", ""};
}

// Gemma 2 / 3 in Hugging Face's names: post_attention_layernorm normalises the attention's output, and
// pre_feedforward_layernorm is the feed-forward's input norm (Llama's post_attention_layernorm).
inline LayerTensorNames hf_gemma_layer_names(int layer) {
  LayerTensorNames n = hf_layer_names(layer);
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  n.ffn_norm = p + "pre_feedforward_layernorm.weight";
  n.post_attn_norm = p + "post_attention_layernorm.weight";
  n.post_ffn_norm = p + "post_feedforward_layernorm.weight";
  return n;
}

// matrix(name, rows, cols) -> QuantMatrix, vector(name, length) -> std::vector<float>.
template <class BindMatrix, class BindVector>
LayerWeights bind_layer(const LayerTensorNames& n, const ModelConfig& c, BindMatrix&& matrix, BindVector&& vector) {
  const int q_dim = c.n_heads * c.head_dim;
  const int kv_dim = c.n_kv_heads * c.head_dim;
  // Every RMSNorm weight, with the offset of a checkpoint that stores w for (1 + w) (Gemma).
  const auto norm = [&](const std::string& name, int length) {
    std::vector<float> values = vector(name, length);
    for (float& v : values) v += c.norm_weight_offset;
    return values;
  };
  LayerWeights w;
  w.attn_norm = norm(n.attn_norm, c.dim);
  w.ffn_norm = norm(n.ffn_norm, c.dim);
  w.wq = matrix(n.wq, q_dim, c.dim);
  w.wk = matrix(n.wk, kv_dim, c.dim);
  w.wv = matrix(n.wv, kv_dim, c.dim);
  w.wo = matrix(n.wo, c.dim, q_dim);
  w.w_gate = matrix(n.w_gate, c.ffn_dim, c.dim);
  w.w_up = matrix(n.w_up, c.ffn_dim, c.dim);
  w.w_down = matrix(n.w_down, c.dim, c.ffn_dim);
  if (c.qkv_bias) {
    w.bq = vector(n.bq, q_dim);
    w.bk = vector(n.bk, kv_dim);
    w.bv = vector(n.bv, kv_dim);
  }
  if (c.o_bias) w.bo = vector(n.bo, c.dim);
  if (c.qk_norm) {
    w.q_norm = norm(n.q_norm, c.head_dim);
    w.k_norm = norm(n.k_norm, c.head_dim);
  }
  if (c.post_norms) {
    w.post_attn_norm = norm(n.post_attn_norm, c.dim);
    w.post_ffn_norm = norm(n.post_ffn_norm, c.dim);
  }
  return w;
}

// The embedding, final norm, output head (the embedding itself unless `separate_output`) and every layer.
template <class BindMatrix, class BindVector>
ModelWeights bind_model(const ModelTensorNames& n, const ModelConfig& c, bool separate_output, BindMatrix&& matrix,
                        BindVector&& vector) {
  ModelWeights weights;
  weights.token_embedding = matrix(n.embedding, c.vocab_size, c.dim);
  weights.output_norm = vector(n.output_norm, c.dim);
  for (float& v : weights.output_norm) v += c.norm_weight_offset;
  weights.output = separate_output ? matrix(n.output, c.vocab_size, c.dim) : weights.token_embedding;
  weights.layers.reserve(static_cast<std::size_t>(c.n_layers));
  for (int layer = 0; layer < c.n_layers; ++layer)
    weights.layers.push_back(bind_layer(n.layer(layer), c, matrix, vector));
  return weights;
}

}  // namespace kvscope::model
