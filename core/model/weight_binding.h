#pragma once
// A model's tensors, bound the same way from every format: each format names the tensors and supplies its own
// matrix / vector binders (which check shapes and types and name the file in errors).
#include <string>

#include "core/model/config.h"
#include "core/model/fused_tensors.h"
#include "core/model/weights.h"
#include "kernels/common/dequantize.h"

namespace kvscope::model {

struct LayerTensorNames {
  std::string attn_norm, ffn_norm, wq, wk, wv, wo, w_gate, w_up, w_down;
  std::string bq, bk, bv, bo, q_norm, k_norm;  // read only when the config asks for them
  // --- Phi-3 and mixture of experts (issue 39), read only when the config asks for them ---
  std::string qkv, gate_up;  // fused projections (ModelConfig::fused_projections)
  // The router and the experts' gate, up and down matrices (ModelShape::n_experts > 0): one merged tensor each,
  // or per-expert names with "{e}" standing for the expert's index.
  std::string router, expert_gate, expert_up, expert_down;
  std::string post_attn_norm, post_ffn_norm;  // Gemma's output norms (ModelConfig::post_norms)
  // gpt-oss: the heads' sink logits (ModelShape::attention_sinks), the router's bias and the experts' biases
  // (ModelShape::expert_biases; each a [n_experts][rows] tensor). Expert names left empty are bound by the
  // format's own code (a gpt-oss folder's interleaved experts, core/model/gpt_oss.h).
  std::string sinks, router_bias, expert_gate_bias, expert_up_bias, expert_down_bias;
};

struct ModelTensorNames {
  std::string embedding, output_norm, output;
  LayerTensorNames (*layer)(int layer, const ModelConfig& config);
};

// llama.cpp's names (blk.N.attn_q.weight ...). Phi-3's fused gate and up rows are ffn_up (2 x ffn_dim rows).
inline LayerTensorNames gguf_layer_names(int layer, const ModelConfig& config) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  LayerTensorNames n;
  n.attn_norm = p + "attn_norm.weight";
  n.ffn_norm = p + "ffn_norm.weight";
  n.wq = p + "attn_q.weight";
  n.wk = p + "attn_k.weight";
  n.wv = p + "attn_v.weight";
  n.wo = p + "attn_output.weight";
  n.w_gate = p + "ffn_gate.weight";
  n.w_up = p + "ffn_up.weight";
  n.w_down = p + "ffn_down.weight";
  n.bq = p + "attn_q.bias";
  n.bk = p + "attn_k.bias";
  n.bv = p + "attn_v.bias";
  n.bo = p + "attn_output.bias";
  n.q_norm = p + "attn_q_norm.weight";
  n.k_norm = p + "attn_k_norm.weight";
  n.qkv = p + "attn_qkv.weight";
  n.gate_up = p + "ffn_up.weight";
  n.router = p + "ffn_gate_inp.weight";
  n.expert_gate = p + "ffn_gate_exps.weight";
  n.expert_up = p + "ffn_up_exps.weight";
  n.expert_down = p + "ffn_down_exps.weight";
  n.post_attn_norm = p + "post_attention_norm.weight";
  n.post_ffn_norm = p + "post_ffw_norm.weight";
  n.sinks = p + "attn_sinks.weight";
  n.router_bias = p + "ffn_gate_inp.bias";
  n.expert_gate_bias = p + "ffn_gate_exps.bias";
  n.expert_up_bias = p + "ffn_up_exps.bias";
  n.expert_down_bias = p + "ffn_down_exps.bias";
  // llama.cpp names gpt-oss's feed-forward input norm (Hugging Face's post_attention_layernorm) after it.
  if (config.architecture == "gpt-oss") n.ffn_norm = p + "post_attention_norm.weight";
  return n;
}

// Hugging Face's names (model.layers.N.self_attn.q_proj.weight ...); Mixtral's experts are
// block_sparse_moe.experts.E.w1 (gate), w3 (up), w2 (down), Qwen3-MoE's mlp.experts.E.gate_proj ....
inline LayerTensorNames hf_layer_names(int layer, const ModelConfig& config) {
  const std::string p = config.hf_tensor_prefix + "layers." + std::to_string(layer) + ".";
  LayerTensorNames n;
  n.attn_norm = p + "input_layernorm.weight";
  n.ffn_norm = p + "post_attention_layernorm.weight";
  n.wq = p + "self_attn.q_proj.weight";
  n.wk = p + "self_attn.k_proj.weight";
  n.wv = p + "self_attn.v_proj.weight";
  n.wo = p + "self_attn.o_proj.weight";
  n.w_gate = p + "mlp.gate_proj.weight";
  n.w_up = p + "mlp.up_proj.weight";
  n.w_down = p + "mlp.down_proj.weight";
  n.bq = p + "self_attn.q_proj.bias";
  n.bk = p + "self_attn.k_proj.bias";
  n.bv = p + "self_attn.v_proj.bias";
  n.bo = p + "self_attn.o_proj.bias";
  n.q_norm = p + "self_attn.q_norm.weight";
  n.k_norm = p + "self_attn.k_norm.weight";
  n.qkv = p + "self_attn.qkv_proj.weight";
  n.gate_up = p + "mlp.gate_up_proj.weight";
  const std::string moe = config.architecture == "MixtralForCausalLM" ? "block_sparse_moe." : "mlp.";
  const bool mixtral = moe == "block_sparse_moe.";
  n.router = p + moe + "gate.weight";
  n.expert_gate = p + moe + "experts.{e}." + (mixtral ? "w1" : "gate_proj") + ".weight";
  n.expert_up = p + moe + "experts.{e}." + (mixtral ? "w3" : "up_proj") + ".weight";
  n.expert_down = p + moe + "experts.{e}." + (mixtral ? "w2" : "down_proj") + ".weight";
  return n;
}

// Gemma 2 / 3 in Hugging Face's names: post_attention_layernorm normalises the attention's output, and
// pre_feedforward_layernorm is the feed-forward's input norm (Llama's post_attention_layernorm).
inline LayerTensorNames hf_gemma_layer_names(int layer, const ModelConfig& config) {
  LayerTensorNames n = hf_layer_names(layer, config);
  const std::string p = config.hf_tensor_prefix + "layers." + std::to_string(layer) + ".";
  n.ffn_norm = p + "pre_feedforward_layernorm.weight";
  n.post_attn_norm = p + "post_attention_layernorm.weight";
  n.post_ffn_norm = p + "post_feedforward_layernorm.weight";
  return n;
}

// gpt-oss in Hugging Face's names: the router is mlp.router (with a bias); the experts and their biases are bound
// by bind_gpt_oss_folder_experts.
inline LayerTensorNames hf_gpt_oss_layer_names(int layer, const ModelConfig& config) {
  LayerTensorNames n = hf_layer_names(layer, config);
  const std::string p = config.hf_tensor_prefix + "layers." + std::to_string(layer) + ".";
  n.router = p + "mlp.router.weight";
  n.router_bias = p + "mlp.router.bias";
  n.sinks = p + "self_attn.sinks";
  n.expert_gate = n.expert_up = n.expert_down = "";
  return n;
}

// `pattern` with its "{e}" replaced by `expert`.
inline std::string expert_tensor_name(const std::string& pattern, int expert) {
  std::string name = pattern;
  if (const auto at = name.find("{e}"); at != std::string::npos) name.replace(at, 3, std::to_string(expert));
  return name;
}

// matrix(name, rows, cols) -> QuantMatrix, vector(name, length) -> std::vector<float>,
// experts(name, n_experts, rows, cols) -> std::vector<QuantMatrix>.
template <class BindMatrix, class BindVector, class BindExperts>
LayerWeights bind_layer(const LayerTensorNames& n, const ModelConfig& c, BindMatrix&& matrix, BindVector&& vector,
                        BindExperts&& experts) {
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
  if (c.fused_projections) {
    const auto qkv = split_rows(matrix(n.qkv, q_dim + 2 * kv_dim, c.dim), {q_dim, kv_dim, kv_dim});
    w.wq = qkv[0];
    w.wk = qkv[1];
    w.wv = qkv[2];
  } else {
    w.wq = matrix(n.wq, q_dim, c.dim);
    w.wk = matrix(n.wk, kv_dim, c.dim);
    w.wv = matrix(n.wv, kv_dim, c.dim);
  }
  w.wo = matrix(n.wo, c.dim, q_dim);
  if (c.n_experts > 0) {
    w.router = matrix(n.router, c.n_experts, c.dim);
    if (!n.expert_gate.empty()) {
      w.expert_gate = experts(n.expert_gate, c.n_experts, c.ffn_dim, c.dim);
      w.expert_up = experts(n.expert_up, c.n_experts, c.ffn_dim, c.dim);
      w.expert_down = experts(n.expert_down, c.n_experts, c.dim, c.ffn_dim);
    }
    if (c.expert_biases) {
      w.router_bias = vector(n.router_bias, c.n_experts);
      // One bias row per expert, widened to float32.
      const auto bias_rows = [&](const std::string& name, int length) {
        std::vector<std::vector<float>> rows;
        if (name.empty()) return rows;
        const QuantMatrix m = matrix(name, c.n_experts, length);
        for (int e = 0; e < c.n_experts; ++e) {
          rows.emplace_back(static_cast<std::size_t>(length));
          kernels::dequantize_row(m.type, m.row(e), rows.back().data(), length);
        }
        return rows;
      };
      w.expert_gate_bias = bias_rows(n.expert_gate_bias, c.ffn_dim);
      w.expert_up_bias = bias_rows(n.expert_up_bias, c.ffn_dim);
      w.expert_down_bias = bias_rows(n.expert_down_bias, c.dim);
    }
  } else if (c.fused_projections) {
    const auto gate_up = split_rows(matrix(n.gate_up, 2 * c.ffn_dim, c.dim), {c.ffn_dim, c.ffn_dim});
    w.w_gate = gate_up[0];
    w.w_up = gate_up[1];
    w.w_down = matrix(n.w_down, c.dim, c.ffn_dim);
  } else {
    w.w_gate = matrix(n.w_gate, c.ffn_dim, c.dim);
    w.w_up = matrix(n.w_up, c.ffn_dim, c.dim);
    w.w_down = matrix(n.w_down, c.dim, c.ffn_dim);
  }
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
  if (c.attention_sinks) w.sinks = vector(n.sinks, c.n_heads);
  return w;
}

// The embedding, final norm, output head (the embedding itself unless `separate_output`) and every layer.
template <class BindMatrix, class BindVector, class BindExperts>
ModelWeights bind_model(const ModelTensorNames& n, const ModelConfig& c, bool separate_output, BindMatrix&& matrix,
                        BindVector&& vector, BindExperts&& experts) {
  ModelWeights weights;
  weights.token_embedding = matrix(n.embedding, c.vocab_size, c.dim);
  weights.output_norm = vector(n.output_norm, c.dim);
  for (float& v : weights.output_norm) v += c.norm_weight_offset;
  weights.output = separate_output ? matrix(n.output, c.vocab_size, c.dim) : weights.token_embedding;
  weights.layers.reserve(static_cast<std::size_t>(c.n_layers));
  for (int layer = 0; layer < c.n_layers; ++layer)
    weights.layers.push_back(bind_layer(n.layer(layer, c), c, matrix, vector, experts));
  return weights;
}

}  // namespace kvscope::model
