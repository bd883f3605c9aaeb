// ModelWeights from a Hugging Face folder: Llama's tensor names (model.layers.N.self_attn.q_proj.weight ...),
// stored [out_features, in_features] row-major, which is already the engine's W[rows][cols].
#include <string>

#include "core/common/error.h"
#include "core/common/shape_text.h"
#include "core/model/config.h"
#include "core/model/gpt_oss.h"
#include "core/model/hf_folder.h"
#include "core/model/weight_binding.h"
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

// Weights and norms are values; U8 tensors (MXFP4 blocks and scales) only where a reader expects them.
const SafetensorsTensor& require_float_tensor(const HfFolder& folder, const std::string& name) {
  const SafetensorsTensor& t = require_tensor(folder, name);
  if (!t.is_float())
    throw Error(folder.shard_of(name).path().string() + ": tensor '" + name + "' dtype: " + t.dtype +
                " (expected F32, F16 or BF16)");
  return t;
}

[[noreturn]] void shape_error(const HfFolder& folder, const SafetensorsTensor& t,
                              const std::vector<uint64_t>& expected) {
  throw Error(folder.shard_of(t.name).path().string() + ": tensor '" + t.name + "' shape: " + shape_text(t.shape) +
              " (expected " + shape_text(expected) + " from config.json)");
}

QuantMatrix bind_matrix(const HfFolder& folder, const std::string& name, int rows, int cols) {
  const SafetensorsTensor& t = require_float_tensor(folder, name);
  const std::vector<uint64_t> expected = {static_cast<uint64_t>(rows), static_cast<uint64_t>(cols)};
  if (t.shape != expected) shape_error(folder, t, expected);
  return QuantMatrix::view(t.type, rows, cols, t.data);
}

std::vector<float> bind_vector(const HfFolder& folder, const std::string& name, int length) {
  const SafetensorsTensor& t = require_float_tensor(folder, name);
  const std::vector<uint64_t> expected = {static_cast<uint64_t>(length)};
  if (t.shape != expected) shape_error(folder, t, expected);
  std::vector<float> values(static_cast<std::size_t>(length));
  kernels::dequantize_row(t.type, t.data, values.data(), length);
  return values;
}

}  // namespace

ModelWeights bind_weights(const HfFolder& folder, const ModelConfig& config) {
  const auto matrix = [&](const std::string& name, int rows, int cols) {
    return bind_matrix(folder, name, rows, cols);
  };
  const auto vector = [&](const std::string& name, int length) { return bind_vector(folder, name, length); };
  // transformers 4 and 5 both save one tensor per expert (model.layers.N.mlp.experts.E.gate_proj.weight ...).
  const auto experts = [&](const std::string& pattern, int n_experts, int rows, int cols) {
    std::vector<QuantMatrix> matrices;
    for (int e = 0; e < n_experts; ++e)
      matrices.push_back(bind_matrix(folder, expert_tensor_name(pattern, e), rows, cols));
    return matrices;
  };
  const bool gpt_oss = config.attention_sinks;
  const auto layer_names = gpt_oss ? hf_gpt_oss_layer_names : config.post_norms ? hf_gemma_layer_names : hf_layer_names;
  // transformers ties the head to the embedding when config.json says so, whatever lm_head the files hold.
  ModelWeights weights = bind_model({config.hf_tensor_prefix + "embed_tokens.weight", config.hf_tensor_prefix + "norm.weight",
                                     config.hf_output_name, layer_names},
                                    config, !config.tied_embeddings, matrix, vector, experts);
  if (gpt_oss) bind_gpt_oss_folder_experts(folder, config, weights);
  return weights;
}

}  // namespace kvscope::model
