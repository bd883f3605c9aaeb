// The gpt-oss fields of a config.json (GptOssConfig) and the experts of a gpt-oss folder, which transformers
// stores transposed with gate and up interleaved (GptOssExperts).
#include <string>

#include "core/common/error.h"
#include "core/common/shape_text.h"
#include "core/model/gemma.h"
#include "core/model/gpt_oss.h"
#include "core/model/hf_folder.h"
#include "core/model/json_config_reader.h"
#include "kernels/common/dequantize.h"

namespace kvscope::model {

void read_gpt_oss_fields(const JsonConfigReader& reader, ModelConfig& config) {
  apply_gpt_oss_architecture(config);
  if (!reader.boolean("attention_bias", true)) reader.fail("attention_bias", "false is not supported (expected true)");
  config.sliding_window = reader.integer("sliding_window", 1, kMaxContext, 128);
  config.layer_is_local = read_layer_types(reader, config.n_layers, 2);  // GptOssConfig: sliding first, alternating
  config.swiglu_limit = reader.positive("swiglu_limit", 7.0, 1e6);
  config.swiglu_alpha = reader.positive("swiglu_alpha", 1.702, 1e6);
}

namespace {

// A tensor of the folder with the expected shape, in a type kvscope widens (F32, F16, BF16).
const SafetensorsTensor& expert_tensor(const HfFolder& folder, const std::string& name,
                                       const std::vector<uint64_t>& expected) {
  const SafetensorsTensor* t = folder.find_tensor(name);
  if (!t) {
    const bool blocks = folder.find_tensor(name + "_blocks") != nullptr;
    throw Error(folder.dir().string() + ": tensor '" + name + "' is in none of the safetensors files" +
                (blocks ? " (it is stored as MXFP4 '_blocks' / '_scales', which kvscope does not read from folders; "
                          "load the folder with transformers' Mxfp4Config(dequantize=True) and save it, or use a "
                          "GGUF)"
                        : " (expected by GptOssForCausalLM)"));
  }
  if (t->shape != expected)
    throw Error(folder.shard_of(name).path().string() + ": tensor '" + name + "' shape: " + shape_text(t->shape) +
                " (expected " + shape_text(expected) + " from config.json)");
  return *t;
}

// Row r of a tensor whose rows hold `cols` values, widened to float32.
std::vector<float> widened_row(const SafetensorsTensor& t, uint64_t r, uint64_t cols) {
  std::vector<float> row(cols);
  const std::size_t element = ggml_row_bytes(t.type, 1);
  kernels::dequantize_row(t.type, t.data + r * cols * element, row.data(), static_cast<int64_t>(cols));
  return row;
}

}  // namespace

void bind_gpt_oss_folder_experts(const HfFolder& folder, const ModelConfig& c, ModelWeights& weights) {
  const auto E = static_cast<uint64_t>(c.n_experts), D = static_cast<uint64_t>(c.dim),
             I = static_cast<uint64_t>(c.ffn_dim);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts.";
    const SafetensorsTensor& gate_up = expert_tensor(folder, p + "gate_up_proj", {E, D, 2 * I});
    const SafetensorsTensor& gate_up_bias = expert_tensor(folder, p + "gate_up_proj_bias", {E, 2 * I});
    const SafetensorsTensor& down = expert_tensor(folder, p + "down_proj", {E, I, D});
    const SafetensorsTensor& down_bias = expert_tensor(folder, p + "down_proj_bias", {E, D});
    // Per expert: gate rows [I][D], up rows [I][D], down rows [D][I], one float32 buffer for the layer.
    auto buffer = std::make_shared<std::vector<float>>(E * 3 * I * D);
    LayerWeights& lw = weights.layers[l];
    lw.expert_gate.clear();
    lw.expert_up.clear();
    lw.expert_down.clear();
    for (uint64_t e = 0; e < E; ++e) {
      float* gate = buffer->data() + e * 3 * I * D;
      float* up = gate + I * D;
      float* down_rows = up + I * D;
      for (uint64_t d = 0; d < D; ++d) {  // gate_up[e][d] holds gate_i at 2i and up_i at 2i + 1
        const std::vector<float> row = widened_row(gate_up, e * D + d, 2 * I);
        for (uint64_t i = 0; i < I; ++i) {
          gate[i * D + d] = row[2 * i];
          up[i * D + d] = row[2 * i + 1];
        }
      }
      for (uint64_t i = 0; i < I; ++i) {  // down[e][i] is column i of the [D][I] matrix
        const std::vector<float> row = widened_row(down, e * I + i, D);
        for (uint64_t d = 0; d < D; ++d) down_rows[d * I + i] = row[d];
      }
      const auto as_matrix = [](const float* data, uint64_t rows, uint64_t cols) {
        return QuantMatrix::view(kernels::GgmlType::F32, static_cast<int>(rows), static_cast<int>(cols),
                                 reinterpret_cast<const uint8_t*>(data));
      };
      lw.expert_gate.push_back(as_matrix(gate, I, D));
      lw.expert_up.push_back(as_matrix(up, I, D));
      lw.expert_down.push_back(as_matrix(down_rows, D, I));
      const std::vector<float> bias = widened_row(gate_up_bias, e, 2 * I);
      std::vector<float> gate_bias(I), up_bias(I);
      for (uint64_t i = 0; i < I; ++i) {
        gate_bias[i] = bias[2 * i];
        up_bias[i] = bias[2 * i + 1];
      }
      lw.expert_gate_bias.push_back(std::move(gate_bias));
      lw.expert_up_bias.push_back(std::move(up_bias));
      lw.expert_down_bias.push_back(widened_row(down_bias, e, D));
    }
    weights.repacked.push_back(std::move(buffer));
  }
}

}  // namespace kvscope::model
