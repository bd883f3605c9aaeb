// ModelConfig from a Hugging Face config.json (the keys transformers' LlamaConfig and its relatives use).
#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "core/common/error.h"
#include "core/model/config.h"
#include "core/model/gemma.h"
#include "core/model/hf_folder.h"
#include "core/model/json_config_reader.h"
#include "core/model/rope_scaling.h"

namespace kvscope::model {
namespace {

// What an architecture adds to Llama's computation. Tensor names are Llama's for all of them.
struct Architecture {
  const char* hf_class;
  bool qkv_bias;  // always (Qwen2), whatever attention_bias says
  bool qk_norm;   // per-head RMSNorm of q and k (Qwen3)
  int gemma;      // 2 or 3: a Gemma family (core/model/gemma.h), 0 otherwise
};
constexpr std::array<Architecture, 6> kSupported = {{{"LlamaForCausalLM", false, false, 0},
                                                     {"MistralForCausalLM", false, false, 0},
                                                     {"Qwen2ForCausalLM", true, false, 0},
                                                     {"Qwen3ForCausalLM", false, true, 0},
                                                     {"Gemma2ForCausalLM", false, false, 2},
                                                     {"Gemma3ForCausalLM", false, false, 3}}};

const Architecture& read_architecture(const JsonConfigReader& reader) {
  if (!reader.has("architectures") || !reader.at("architectures").is_array() || reader.at("architectures").empty() ||
      !reader.at("architectures")[0].is_string())
    reader.fail("architectures", "missing (expected e.g. [\"LlamaForCausalLM\"])");
  const std::string name = reader.at("architectures")[0].get<std::string>();
  std::string supported;
  for (const Architecture& a : kSupported) {
    if (name == a.hf_class) return a;
    supported += (supported.empty() ? "" : ", ") + std::string(a.hf_class);
  }
  reader.fail("architectures", "\"" + name + "\" is not supported (supported: " + supported + ")");
}

// Features of these families that kvscope's forward pass does not compute are refused, never ignored.
void check_unsupported_features(const JsonConfigReader& reader, bool gemma) {
  if (reader.boolean("mlp_bias", false)) reader.fail("mlp_bias", "true is not supported (expected false)");
  if (!gemma && reader.has("hidden_act") && reader.text("hidden_act") != "silu")
    reader.fail("hidden_act", "\"" + reader.text("hidden_act") + "\" is not supported (expected \"silu\")");
}

double number(const JsonConfigReader& reader, const std::string& key, const nlohmann::json& object, const char* field,
              double fallback) {
  if (!object.contains(field) || object[field].is_null()) return fallback;
  if (!object[field].is_number() || !std::isfinite(object[field].get<double>()) || object[field].get<double>() <= 0)
    reader.fail(key + "." + field, object[field].dump() + " (expected a positive number)");
  return object[field].get<double>();
}

}  // namespace

void read_rope_object(const JsonConfigReader& reader, const std::string& key, const nlohmann::json& rope,
                      ModelConfig& config) {
  if (!rope.is_object()) reader.fail(key, rope.dump() + " (expected an object)");
  if (rope.contains("rope_theta"))
    config.rope_base = static_cast<float>(number(reader, key, rope, "rope_theta", 10000.0));
  RopeScaling scaling;
  const auto type = rope.contains("rope_type") ? rope["rope_type"] : rope.value("type", nlohmann::json("default"));
  if (!type.is_string()) reader.fail(key + ".rope_type", type.dump() + " (expected a string)");
  scaling.type = type.get<std::string>();
  if (scaling.type != "default" && scaling.type != "linear" && scaling.type != "llama3")
    reader.fail(key + ".rope_type", "\"" + scaling.type + "\" is not supported (supported: default, linear, llama3)");
  config.rope_freq_divisors.clear();
  config.rope_scaling = scaling;
  if (scaling.type == "default") return;
  scaling.factor = number(reader, key, rope, "factor", 0.0);
  if (scaling.factor < 1.0) reader.fail(key + ".factor", "missing or below 1 (expected the scaling factor >= 1)");
  if (scaling.type == "llama3") {
    scaling.low_freq_factor = number(reader, key, rope, "low_freq_factor", 1.0);
    scaling.high_freq_factor = number(reader, key, rope, "high_freq_factor", 4.0);
    scaling.original_context = static_cast<int>(number(reader, key, rope, "original_max_position_embeddings", 8192));
    if (scaling.high_freq_factor <= scaling.low_freq_factor)
      reader.fail(key + ".high_freq_factor", "not above low_freq_factor (expected high > low)");
  }
  config.rope_freq_divisors = rope_freq_divisors(scaling, config.rope_dim, config.rope_base);
  config.rope_scaling = scaling;
}

namespace {

// rope_scaling (transformers 4) or rope_parameters (transformers 5, which also holds rope_theta).
void read_rope(const JsonConfigReader& reader, ModelConfig& config) {
  const char* key = reader.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  config.rope_base = reader.positive("rope_theta", 10000.0, 1e12);
  if (reader.has(key)) read_rope_object(reader, key, reader.at(key), config);
}

}  // namespace

ModelConfig read_config(const HfFolder& folder) {
  const JsonConfigReader reader(folder);
  ModelConfig config;
  const Architecture& architecture = read_architecture(reader);
  config.architecture = architecture.hf_class;
  config.name = folder.dir().filename().string();
  if (config.name.empty()) config.name = folder.dir().parent_path().filename().string();  // "dir/" has no filename
  check_unsupported_features(reader, architecture.gemma != 0);
  config.n_layers = reader.integer("num_hidden_layers", 1, kMaxLayers);
  config.dim = reader.integer("hidden_size", 1, kMaxDim);
  config.ffn_dim = reader.integer("intermediate_size", 1, kMaxFfnDim);
  config.n_heads = reader.integer("num_attention_heads", 1, kMaxHeads);
  config.n_kv_heads = reader.integer("num_key_value_heads", 1, config.n_heads, config.n_heads);
  if (config.n_heads % config.n_kv_heads != 0)
    reader.fail("num_key_value_heads", std::to_string(config.n_kv_heads) + " does not divide num_attention_heads " +
                                           std::to_string(config.n_heads) + " (expected a divisor)");
  if (!reader.has("head_dim") && config.dim % config.n_heads != 0)
    reader.fail("num_attention_heads", std::to_string(config.n_heads) + " does not divide hidden_size " +
                                           std::to_string(config.dim) + " and there is no head_dim");
  config.head_dim = reader.integer("head_dim", 2, kMaxDim, config.dim / config.n_heads);
  if (config.head_dim % 2 != 0)
    reader.fail("head_dim", std::to_string(config.head_dim) + " is odd (expected even for RoPE)");
  config.vocab_size = reader.integer("vocab_size", 1, kMaxVocab);
  config.context_length = reader.integer("max_position_embeddings", 1, kMaxContext);
  // A sliding window is the same as full attention for sequences no longer than the window, so the usable
  // context is capped there rather than computing something the checkpoint was not trained with.
  if (architecture.gemma == 0 && reader.boolean("use_sliding_window", true) && reader.has("sliding_window"))
    config.context_length = std::min(config.context_length, reader.integer("sliding_window", 1, kMaxContext));
  config.rope_dim = config.head_dim;
  read_rope(reader, config);
  const bool attention_bias = reader.boolean("attention_bias", false);
  config.qkv_bias = architecture.qkv_bias || attention_bias;
  config.o_bias = attention_bias;
  config.qk_norm = architecture.qk_norm;
  config.rms_eps = reader.positive("rms_norm_eps", 1e-6, 1.0);
  config.tied_embeddings = reader.boolean("tie_word_embeddings", false);
  // Hugging Face's Llama rotates dimension i with i + head_dim/2 (rotate_half).
  config.rope_style = RopeStyle::HalfSplit;
  if (architecture.gemma != 0)
    read_gemma_fields(reader, architecture.gemma == 2 ? GemmaFamily::Gemma2 : GemmaFamily::Gemma3, config);
  return config;
}

}  // namespace kvscope::model
