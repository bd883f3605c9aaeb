// The gpt-oss fields of a config.json (GptOssConfig) and the experts of a gpt-oss folder, which transformers
// stores transposed with gate and up interleaved (GptOssExperts), in float or, as the released folders ship them,
// as MXFP4 blocks and scales (transformers' integrations/mxfp4.py).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/common/error.h"
#include "core/common/shape_text.h"
#include "core/model/gemma.h"
#include "core/model/gpt_oss.h"
#include "core/model/hf_folder.h"
#include "core/model/json_config_reader.h"
#include "core/model/mxfp4_experts.h"
#include "kernels/common/dequantize.h"
#include "kernels/common/quant_blocks.h"

namespace kvscope::model {

void read_gpt_oss_fields(const JsonConfigReader& reader, ModelConfig& config) {
  apply_gpt_oss_architecture(config);
  if (!reader.boolean("attention_bias", true)) reader.fail("attention_bias", "false is not supported (expected true)");
  config.sliding_window = reader.integer("sliding_window", 1, kMaxContext, 128);
  config.layer_is_local = read_layer_types(reader, config.n_layers, 2);  // GptOssConfig: sliding first, alternating
  config.swiglu_limit = reader.positive("swiglu_limit", 7.0, 1e6);
  config.swiglu_alpha = reader.positive("swiglu_alpha", 1.702, 1e6);
  // The released folders' quantization_config says mxfp4 (checked with every architecture's, hf_config.cpp);
  // which layers hold blocks the tensors themselves say (bind_gpt_oss_folder_experts), as modules_to_not_convert
  // may leave some in float.
}

namespace {

const uint64_t kMxfp4Values = static_cast<uint64_t>(kernels::blocks::kMXFP4Elements);  // per block and scale
const uint64_t kMxfp4CodeBytes = kMxfp4Values / 2;                                       // two E2M1 codes a byte

[[noreturn]] void tensor_error(const HfFolder& folder, const std::string& name, const std::string& what) {
  throw Error(folder.shard_of(name).path().string() + ": tensor '" + name + "' " + what);
}

// A tensor of the folder with the expected shape, in a type kvscope widens (F32, F16, BF16); `or_mxfp4` when the
// folder may hold it as MXFP4 blocks and scales instead.
const SafetensorsTensor& float_tensor(const HfFolder& folder, const std::string& name,
                                      const std::vector<uint64_t>& expected, bool or_mxfp4 = false) {
  const SafetensorsTensor* t = folder.find_tensor(name);
  if (!t)
    throw Error(folder.dir().string() + ": tensor '" + name + "' is in none of the safetensors files (expected by " +
                "GptOssForCausalLM" + (or_mxfp4 ? ", or as MXFP4 '" + name + "_blocks' and '_scales')" : ")"));
  if (!t->is_float()) tensor_error(folder, name, "dtype: " + t->dtype + " (expected F32, F16 or BF16)");
  if (t->shape != expected)
    tensor_error(folder, name, "shape: " + shape_text(t->shape) + " (expected " + shape_text(expected) +
                                   " from config.json)");
  return *t;
}

// Row r of a tensor whose rows hold `cols` values, widened to float32.
std::vector<float> widened_row(const SafetensorsTensor& t, uint64_t r, uint64_t cols) {
  std::vector<float> row(cols);
  const std::size_t element = ggml_row_bytes(t.type, 1);
  kernels::dequantize_row(t.type, t.data + r * cols * element, row.data(), static_cast<int64_t>(cols));
  return row;
}

// `<name>_blocks` and `<name>_scales` checked against config.json (E experts of `rows` rows of `cols` values), or
// nothing when the folder has neither (the experts are float).
std::optional<Mxfp4Experts> find_mxfp4_experts(const HfFolder& folder, const std::string& name, uint64_t E,
                                               uint64_t rows, uint64_t cols) {
  const std::string blocks_name = name + "_blocks", scales_name = name + "_scales";
  const SafetensorsTensor* blocks = folder.find_tensor(blocks_name);
  const SafetensorsTensor* scales = folder.find_tensor(scales_name);
  if (!blocks && !scales) return std::nullopt;
  const std::string pair = "MXFP4 experts are a '_blocks' tensor of E2M1 codes and a '_scales' tensor of one E8M0 "
                           "exponent per 32 values";
  if (!blocks)
    throw Error(folder.dir().string() + ": tensor '" + blocks_name + "' is in none of the safetensors files (" +
                pair + "; '" + scales_name + "' is there)");
  if (!scales)
    throw Error(folder.dir().string() + ": tensor '" + scales_name + "' is in none of the safetensors files (" +
                pair + "; '" + blocks_name + "' is there)");
  for (const SafetensorsTensor* t : {blocks, scales})
    if (t->dtype != "U8") tensor_error(folder, t->name, "dtype: " + t->dtype + " (expected U8: " + pair + ")");
  if (cols % kMxfp4Values != 0)
    tensor_error(folder, blocks_name, "holds rows of " + std::to_string(cols) +
                                          " values (from config.json), which MXFP4 cannot store (expected a "
                                          "multiple of 32)");
  const uint64_t groups = cols / kMxfp4Values;
  const std::vector<uint64_t> expected_blocks = {E, rows, groups, kMxfp4CodeBytes};
  if (blocks->shape != expected_blocks)
    tensor_error(folder, blocks_name, "shape: " + shape_text(blocks->shape) + " (expected " +
                                          shape_text(expected_blocks) + " from config.json: " + std::to_string(E) +
                                          " experts of " + std::to_string(rows) + " rows of " + std::to_string(cols) +
                                          " values, 32 a block of 16 bytes)");
  const std::vector<uint64_t> expected_scales = {E, rows, groups};
  if (scales->shape != expected_scales)
    tensor_error(folder, scales_name, "shape: " + shape_text(scales->shape) + " (expected " +
                                          shape_text(expected_scales) + ": one scale per block of '" + blocks_name +
                                          "' " + shape_text(blocks->shape) + ")");
  return Mxfp4Experts{blocks->data, scales->data, rows, groups};
}

// The experts' biases, de-interleaved as the matrices are.
void bind_expert_biases(const HfFolder& folder, const std::string& p, uint64_t E, uint64_t D, uint64_t I,
                        LayerWeights& lw) {
  const SafetensorsTensor& gate_up_bias = float_tensor(folder, p + "gate_up_proj_bias", {E, 2 * I});
  const SafetensorsTensor& down_bias = float_tensor(folder, p + "down_proj_bias", {E, D});
  for (uint64_t e = 0; e < E; ++e) {
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
}

// Float experts: gate_up_proj [E][D][2I] for x @ W, down_proj [E][I][D], laid out as float32 W[rows][cols].
std::shared_ptr<const void> bind_float_experts(const HfFolder& folder, const std::string& p, uint64_t E, uint64_t D,
                                               uint64_t I, LayerWeights& lw) {
  const SafetensorsTensor& gate_up = float_tensor(folder, p + "gate_up_proj", {E, D, 2 * I}, true);
  const SafetensorsTensor& down = float_tensor(folder, p + "down_proj", {E, I, D}, true);
  // Per expert: gate rows [I][D], up rows [I][D], down rows [D][I], one float32 buffer for the layer.
  auto buffer = std::make_shared<std::vector<float>>(E * 3 * I * D);
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
  }
  return buffer;
}

// MXFP4 experts, kept in MXFP4: each row's blocks rewritten in ggml's layout (the same 17 bytes per 32 values,
// core/model/mxfp4_experts.h), so that they run as a GGUF's MXFP4 experts do.
std::shared_ptr<const void> bind_mxfp4_experts(const Mxfp4Experts& gate_up, const Mxfp4Experts& down, uint64_t E,
                                               uint64_t D, uint64_t I, LayerWeights& lw) {
  const GgmlMxfp4Layout layout(D, I);
  // Left uninitialised: every byte is written, by the threads that first touch its pages.
  std::shared_ptr<uint8_t[]> buffer(new uint8_t[E * layout.expert_bytes]);
  write_ggml_mxfp4_experts(gate_up, down, E, D, I, buffer.get());
  const auto as_matrix = [](const uint8_t* data, uint64_t rows, uint64_t cols) {
    return QuantMatrix::view(GgmlType::MXFP4, static_cast<int>(rows), static_cast<int>(cols), data);
  };
  for (uint64_t e = 0; e < E; ++e) {
    const uint8_t* gate = buffer.get() + e * layout.expert_bytes;
    const uint8_t* up = gate + I * layout.gate_row;
    const uint8_t* down_rows = up + I * layout.gate_row;
    lw.expert_gate.push_back(as_matrix(gate, I, D));
    lw.expert_up.push_back(as_matrix(up, I, D));
    lw.expert_down.push_back(as_matrix(down_rows, D, I));
  }
  return buffer;
}

}  // namespace

void bind_gpt_oss_folder_experts(const HfFolder& folder, const ModelConfig& c, ModelWeights& weights) {
  const auto E = static_cast<uint64_t>(c.n_experts), D = static_cast<uint64_t>(c.dim),
             I = static_cast<uint64_t>(c.ffn_dim);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts.";
    LayerWeights& lw = weights.layers[l];
    lw.expert_gate.clear();
    lw.expert_up.clear();
    lw.expert_down.clear();
    const auto gate_up = find_mxfp4_experts(folder, p + "gate_up_proj", E, 2 * I, D);
    const auto down = find_mxfp4_experts(folder, p + "down_proj", E, D, I);
    if (gate_up.has_value() != down.has_value()) {
      const std::string mxfp4 = gate_up ? "gate_up_proj" : "down_proj", other = gate_up ? "down_proj" : "gate_up_proj";
      throw Error(folder.dir().string() + ": tensor '" + p + other + "_blocks' is in none of the safetensors files " +
                  "(expected beside '" + p + mxfp4 + "_blocks': a layer's experts are all MXFP4 or all float)");
    }
    weights.repacked.push_back(gate_up ? bind_mxfp4_experts(*gate_up, *down, E, D, I, lw)
                                       : bind_float_experts(folder, p, E, D, I, lw));
    bind_expert_biases(folder, p, E, D, I, lw);
  }
}

}  // namespace kvscope::model
