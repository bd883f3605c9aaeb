// ModelWeights from a Hugging Face folder: Llama's tensor names (model.layers.N.self_attn.q_proj.weight ...),
// stored [out_features, in_features] row-major, which is already the engine's W[rows][cols].
#include <string>

#include "core/common/error.h"
#include "core/common/shape_text.h"
#include "core/model/config.h"
#include "core/model/hf_folder.h"
#include "core/model/weights.h"
#include "kernels/common/dequantize.h"

namespace kvscope::model {
namespace {

const SafetensorsTensor& require_tensor(const HfFolder& folder, const std::string& name) {
  const SafetensorsTensor* tensor = folder.find_tensor(name);
  if (!tensor)
    throw Error(folder.dir().string() + ": tensor '" + name + "' is in none of the safetensors files (expected by " +
                folder.config().value("architectures", nlohmann::json::array({"the architecture"}))[0].dump() + ")");
  return *tensor;
}

[[noreturn]] void shape_error(const HfFolder& folder, const SafetensorsTensor& t,
                              const std::vector<uint64_t>& expected) {
  throw Error(folder.shard_of(t.name).path().string() + ": tensor '" + t.name + "' shape: " + shape_text(t.shape) +
              " (expected " + shape_text(expected) + " from config.json)");
}

QuantMatrix bind_matrix(const HfFolder& folder, const std::string& name, int rows, int cols) {
  const SafetensorsTensor& t = require_tensor(folder, name);
  const std::vector<uint64_t> expected = {static_cast<uint64_t>(rows), static_cast<uint64_t>(cols)};
  if (t.shape != expected) shape_error(folder, t, expected);
  QuantMatrix matrix;
  matrix.type = t.type;
  matrix.rows = rows;
  matrix.cols = cols;
  matrix.data = t.data;
  matrix.row_bytes = ggml_row_bytes(t.type, static_cast<uint64_t>(cols));
  return matrix;
}

std::vector<float> bind_vector(const HfFolder& folder, const std::string& name, int length) {
  const SafetensorsTensor& t = require_tensor(folder, name);
  const std::vector<uint64_t> expected = {static_cast<uint64_t>(length)};
  if (t.shape != expected) shape_error(folder, t, expected);
  std::vector<float> values(static_cast<std::size_t>(length));
  kernels::dequantize_row(t.type, t.data, values.data(), length);
  return values;
}

LayerWeights bind_layer(const HfFolder& folder, const ModelConfig& config, int layer) {
  const std::string prefix = "model.layers." + std::to_string(layer) + ".";
  const int q_dim = config.n_heads * config.head_dim;
  const int kv_dim = config.n_kv_heads * config.head_dim;
  LayerWeights weights;
  weights.attn_norm = bind_vector(folder, prefix + "input_layernorm.weight", config.dim);
  weights.ffn_norm = bind_vector(folder, prefix + "post_attention_layernorm.weight", config.dim);
  weights.wq = bind_matrix(folder, prefix + "self_attn.q_proj.weight", q_dim, config.dim);
  weights.wk = bind_matrix(folder, prefix + "self_attn.k_proj.weight", kv_dim, config.dim);
  weights.wv = bind_matrix(folder, prefix + "self_attn.v_proj.weight", kv_dim, config.dim);
  weights.wo = bind_matrix(folder, prefix + "self_attn.o_proj.weight", config.dim, q_dim);
  weights.w_gate = bind_matrix(folder, prefix + "mlp.gate_proj.weight", config.ffn_dim, config.dim);
  weights.w_up = bind_matrix(folder, prefix + "mlp.up_proj.weight", config.ffn_dim, config.dim);
  weights.w_down = bind_matrix(folder, prefix + "mlp.down_proj.weight", config.dim, config.ffn_dim);
  if (config.qkv_bias) {
    weights.bq = bind_vector(folder, prefix + "self_attn.q_proj.bias", q_dim);
    weights.bk = bind_vector(folder, prefix + "self_attn.k_proj.bias", kv_dim);
    weights.bv = bind_vector(folder, prefix + "self_attn.v_proj.bias", kv_dim);
  }
  if (config.o_bias) weights.bo = bind_vector(folder, prefix + "self_attn.o_proj.bias", config.dim);
  if (config.qk_norm) {
    weights.q_norm = bind_vector(folder, prefix + "self_attn.q_norm.weight", config.head_dim);
    weights.k_norm = bind_vector(folder, prefix + "self_attn.k_norm.weight", config.head_dim);
  }
  return weights;
}

}  // namespace

ModelWeights bind_weights(const HfFolder& folder, const ModelConfig& config) {
  ModelWeights weights;
  weights.token_embedding = bind_matrix(folder, "model.embed_tokens.weight", config.vocab_size, config.dim);
  weights.output_norm = bind_vector(folder, "model.norm.weight", config.dim);
  // transformers ties the head to the embedding when config.json says so, whatever lm_head the files hold.
  weights.output = config.tied_embeddings ? weights.token_embedding
                                          : bind_matrix(folder, "lm_head.weight", config.vocab_size, config.dim);
  weights.layers.reserve(static_cast<std::size_t>(config.n_layers));
  for (int layer = 0; layer < config.n_layers; ++layer) weights.layers.push_back(bind_layer(folder, config, layer));
  return weights;
}

}  // namespace kvscope::model
