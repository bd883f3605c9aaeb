// ModelConfig from a Hugging Face config.json (the keys transformers' LlamaConfig and its relatives use).
#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "core/common/error.h"
#include "core/model/config.h"
#include "core/model/gemma.h"
#include "core/model/gpt_oss.h"
#include "core/model/hf_folder.h"
#include "core/model/json_config_reader.h"
#include "core/model/rope_scaling.h"

namespace kvscope::model {
namespace {

// What an architecture adds to Llama's computation. Tensor names are Llama's, but for Phi-3's fused projections
// and the experts of the mixture-of-experts families (weight_binding.h).
struct Architecture {
  const char* hf_class;
  bool qkv_bias;           // always (Qwen2), whatever attention_bias says
  bool qk_norm;            // per-head RMSNorm of q and k (Qwen3)
  bool fused_projections;  // qkv_proj and gate_up_proj (Phi-3)
  bool experts;            // routed experts (Mixtral, Qwen3-MoE, gpt-oss)
  int gemma;               // 2 or 3: a Gemma family (core/model/gemma.h), 0 otherwise
};
constexpr const char* kGptOss = "GptOssForCausalLM";  // core/model/gpt_oss.h
constexpr std::array<Architecture, 10> kSupported = {{{"LlamaForCausalLM", false, false, false, false, 0},
                                                     {"MistralForCausalLM", false, false, false, false, 0},
                                                     {"Qwen2ForCausalLM", true, false, false, false, 0},
                                                     {"Qwen3ForCausalLM", false, true, false, false, 0},
                                                     {"Phi3ForCausalLM", false, false, true, false, 0},
                                                     {"MixtralForCausalLM", false, false, false, true, 0},
                                                     {"Qwen3MoeForCausalLM", false, true, false, true, 0},
                                                     {"Gemma2ForCausalLM", false, false, false, false, 2},
                                                     {"Gemma3ForCausalLM", false, false, false, false, 3},
                                                     {kGptOss, false, false, false, true, 0}}};

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

std::vector<float> factor_list(const JsonConfigReader& reader, const std::string& key, const nlohmann::json& rope,
                               const char* field, int pairs) {
  const std::string name = key + "." + field;
  if (!rope.contains(field) || !rope[field].is_array() || rope[field].size() != static_cast<std::size_t>(pairs))
    reader.fail(name, (rope.contains(field) ? rope[field].dump() : std::string("missing")) + " (expected a list of " +
                          std::to_string(pairs) + " numbers, one per rotated pair)");
  std::vector<float> factors;
  for (const auto& v : rope[field]) {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0)
      reader.fail(name, v.dump() + " (expected positive numbers)");
    factors.push_back(static_cast<float>(v.get<double>()));
  }
  return factors;
}

// The original context a longrope or YaRN model was trained at and the factor it is extended by (absent:
// max_position_embeddings over the original). transformers 5 moves original_max_position_embeddings into
// rope_parameters; transformers 4 keeps it beside.
void read_context_extension(const JsonConfigReader& reader, const std::string& key, const nlohmann::json& rope,
                            RopeScaling& scaling) {
  const int max_positions = reader.integer("max_position_embeddings", 1, kMaxContext);
  scaling.original_context = rope.contains("original_max_position_embeddings")
                                 ? reader.integer_value(key + ".original_max_position_embeddings",
                                                        rope["original_max_position_embeddings"], 1, kMaxContext)
                                 : reader.integer("original_max_position_embeddings", 1, kMaxContext, max_positions);
  scaling.factor = number(reader, key, rope, "factor", static_cast<double>(max_positions) / scaling.original_context);
}

// Phi-3's longrope (transformers' _compute_longrope_parameters): short factors up to the original context, long
// beyond it, and cos/sin multiplied by attention_factor, by default sqrt(1 + ln(factor) / ln(original context))
// with factor = max_position_embeddings / original_max_position_embeddings.
void read_longrope(const JsonConfigReader& reader, const std::string& key, const nlohmann::json& rope,
                   ModelConfig& config, RopeScaling& scaling) {
  const int pairs = config.rope_dim / 2;
  scaling.short_factor = factor_list(reader, key, rope, "short_factor", pairs);
  scaling.long_factor = factor_list(reader, key, rope, "long_factor", pairs);
  read_context_extension(reader, key, rope, scaling);
  const double default_attention =
      scaling.factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(scaling.factor) / std::log(scaling.original_context));
  scaling.attention_factor = number(reader, key, rope, "attention_factor", default_attention);
  config.rope_freq_divisors = scaling.short_factor;
  config.rope_freq_divisors_long = scaling.long_factor;
  config.rope_long_after = scaling.original_context;
  config.rope_attention_factor = static_cast<float>(scaling.attention_factor);
  config.rope_scaling = scaling;
}

// YaRN (transformers' _compute_yarn_parameters): factor (absent: max_position_embeddings / original), the
// original context, beta_fast / beta_slow (32 / 1), truncate (true), and the attention factor on cos and sin:
// attention_factor, else mscale / mscale_all_dim's ratio, else 0.1 ln(factor) + 1. transformers has no partial
// ramp: an `extrapolation_factor` (which llama.cpp's converter copies to yarn_ext_factor) is ignored there, so one
// other than 1 is refused rather than computed one way or the other.
void read_yarn(const JsonConfigReader& reader, const std::string& key, const nlohmann::json& rope, ModelConfig& config,
               RopeScaling& scaling) {
  if (rope.contains("extrapolation_factor") && !rope["extrapolation_factor"].is_null() &&
      !(rope["extrapolation_factor"].is_number() && rope["extrapolation_factor"].get<double>() == 1.0))
    reader.fail(key + ".extrapolation_factor",
                rope["extrapolation_factor"].dump() +
                    " is not supported in a folder (expected 1: transformers ignores the field and computes YaRN's "
                    "whole ramp, llama.cpp's converter writes it as yarn_ext_factor; convert the folder to a GGUF "
                    "for the partial ramp)");
  read_context_extension(reader, key, rope, scaling);
  scaling.beta_fast = number(reader, key, rope, "beta_fast", 32.0);
  scaling.beta_slow = number(reader, key, rope, "beta_slow", 1.0);
  if (rope.contains("truncate") && !rope["truncate"].is_null()) {
    if (!rope["truncate"].is_boolean()) reader.fail(key + ".truncate", rope["truncate"].dump() + " (expected true or false)");
    scaling.truncate = rope["truncate"].get<bool>();
  }
  const auto mscale = [&](double m) { return scaling.factor <= 1.0 ? 1.0 : 0.1 * m * std::log(scaling.factor) + 1.0; };
  const double m = number(reader, key, rope, "mscale", 0.0), m_all = number(reader, key, rope, "mscale_all_dim", 0.0);
  const double fallback =
      m > 0.0 && m_all > 0.0 ? mscale(m) / mscale(m_all) : yarn_default_attention_factor(scaling.factor);
  scaling.attention_factor = number(reader, key, rope, "attention_factor", fallback);
  config.rope_freq_divisors = rope_freq_divisors(scaling, config.rope_dim, config.rope_base);
  config.rope_attention_factor = static_cast<float>(scaling.attention_factor);
  config.rope_scaling = scaling;
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
  if (scaling.type == "su") scaling.type = "longrope";  // Phi-3's first configs; transformers reads it as longrope
  if (scaling.type != "default" && scaling.type != "linear" && scaling.type != "llama3" && scaling.type != "longrope" &&
      scaling.type != "yarn")
    reader.fail(key + ".rope_type",
                "\"" + scaling.type + "\" is not supported (supported: default, linear, llama3, longrope, yarn)");
  config.rope_freq_divisors.clear();
  config.rope_freq_divisors_long.clear();
  config.rope_long_after = 0;
  config.rope_attention_factor = 1.0f;
  config.rope_scaling = scaling;
  if (scaling.type == "default") return;
  if (scaling.type == "longrope") {
    read_longrope(reader, key, rope, config, scaling);
    return;
  }
  if (scaling.type == "yarn") {
    read_yarn(reader, key, rope, config, scaling);
    return;
  }
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

// Phi-3 (transformers' Phi3Attention) rotates only the first head_dim * partial_rotary_factor dimensions
// (rope_parameters in transformers 5, beside them in 4; Phi-4-mini uses 0.75).
void read_partial_rotary(const JsonConfigReader& reader, ModelConfig& config) {
  const char* rope_key = reader.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  double fraction = 1.0;
  std::string field = "partial_rotary_factor";
  if (reader.has(rope_key) && reader.at(rope_key).is_object() &&
      reader.at(rope_key).contains("partial_rotary_factor")) {
    fraction = number(reader, rope_key, reader.at(rope_key), "partial_rotary_factor", 1.0);
    field = std::string(rope_key) + ".partial_rotary_factor";
  } else {
    fraction = reader.has(field) ? reader.positive(field, 1.0, 1.0) : 1.0;
  }
  config.rope_dim = static_cast<int>(config.head_dim * fraction);
  if (fraction > 1.0 || config.rope_dim < 2 || config.rope_dim % 2 != 0)
    reader.fail(field, std::to_string(fraction) + " rotates " + std::to_string(config.rope_dim) + " of " +
                           std::to_string(config.head_dim) + " dimensions (expected an even number >= 2)");
}

// Mixtral (num_local_experts, every layer routed, always renormalised) and Qwen3-MoE (num_experts in transformers
// 4, num_local_experts in 5; moe_intermediate_size; norm_topk_prob). A Qwen3-MoE with dense layers among the routed
// ones (mlp_only_layers, decoder_sparse_step) is refused.
void read_experts(const JsonConfigReader& reader, ModelConfig& config) {
  const char* count_key = reader.has("num_local_experts") ? "num_local_experts" : "num_experts";
  config.n_experts = reader.integer(count_key, 1, kMaxExperts);
  config.n_experts_used = reader.integer("num_experts_per_tok", 1, config.n_experts);
  const bool mixtral = config.architecture == "MixtralForCausalLM";
  config.expert_weights_norm = mixtral || reader.boolean("norm_topk_prob", false);
  if (mixtral || config.architecture == kGptOss) return;  // their experts are intermediate_size wide
  config.ffn_dim = reader.integer("moe_intermediate_size", 1, kMaxFfnDim);
  if (reader.integer("decoder_sparse_step", 1, kMaxLayers, 1) != 1)
    reader.fail("decoder_sparse_step", "only 1 (every layer routed) is supported");
  if (reader.has("mlp_only_layers") &&
      !(reader.at("mlp_only_layers").is_array() && reader.at("mlp_only_layers").empty()))
    reader.fail("mlp_only_layers",
                reader.at("mlp_only_layers").dump() + " is not supported (expected [], every layer routed)");
}

// rope_scaling (transformers 4) or rope_parameters (transformers 5, which also holds rope_theta).
void read_rope(const JsonConfigReader& reader, ModelConfig& config) {
  const char* key = reader.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  config.rope_base = reader.positive("rope_theta", 10000.0, 1e12);
  if (reader.has(key)) read_rope_object(reader, key, reader.at(key), config);
}

}  // namespace

namespace {

// A multimodal Gemma 3 (4B and up) whose text part kvscope runs: its config under text_config, its tensors under
// language_model.model. (the layout transformers 4 and 5 both save), the head tied to the embedding.
constexpr const char* kGemma3Multimodal = "Gemma3ForConditionalGeneration";

bool is_gemma3_multimodal(const JsonConfigReader& top) {
  return top.has("architectures") && top.at("architectures").is_array() && !top.at("architectures").empty() &&
         top.at("architectures")[0] == kGemma3Multimodal;
}

const Architecture& gemma3_text_architecture() {
  for (const Architecture& a : kSupported)
    if (a.gemma == 3) return a;
  throw Error("internal: no Gemma 3 architecture");
}

ModelConfig read_text_config(const JsonConfigReader& reader, const Architecture& architecture, const HfFolder& folder);

}  // namespace

namespace {

// A quantized folder (transformers' quantizers: GPTQ, AWQ, bitsandbytes, compressed-tensors, FP8, ...) holds other
// tensors than the float ones the loaders bind, so it is refused by its quantization_config rather than by whichever
// tensor is found missing or mistyped first. gpt-oss's MXFP4 experts are read (hf_gpt_oss.cpp); transformers'
// Mxfp4 quantizer converts nothing but gpt-oss's experts, so no other architecture's folder says mxfp4.
void check_quantization(const JsonConfigReader& reader, const std::string& architecture) {
  if (!reader.present("quantization_config")) return;
  if (!reader.at("quantization_config").is_object())
    reader.fail("quantization_config", reader.at("quantization_config").dump() + " (expected an object)");
  const std::string method = reader.nested("quantization_config").text("quant_method");
  if (architecture == kGptOss && method == "mxfp4") return;
  reader.fail("quantization_config",
              "quant_method \"" + method + "\" is not supported (kvscope reads " + architecture +
                  " folders' weights as F32, F16 or BF16 tensors, and \"mxfp4\" only in " + kGptOss +
                  "'s experts; run a quantized checkpoint as a GGUF of its unquantized folder instead)");
}

}  // namespace

ModelConfig read_config(const HfFolder& folder) {
  const JsonConfigReader top(folder);
  if (!is_gemma3_multimodal(top)) {
    const Architecture& architecture = read_architecture(top);
    check_quantization(top, architecture.hf_class);
    return read_text_config(top, architecture, folder);
  }
  check_quantization(top, kGemma3Multimodal);
  ModelConfig config = read_text_config(top.nested("text_config"), gemma3_text_architecture(), folder);
  config.architecture = kGemma3Multimodal;
  config.hf_tensor_prefix = "language_model.model.";
  config.hf_output_name = "language_model.lm_head.weight";
  config.tied_embeddings = top.boolean("tie_word_embeddings", config.tied_embeddings);
  return config;
}

namespace {

ModelConfig read_text_config(const JsonConfigReader& reader, const Architecture& architecture, const HfFolder& folder) {
  ModelConfig config;
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
  const bool gpt_oss = config.architecture == kGptOss;
  if (architecture.gemma == 0 && !gpt_oss && reader.boolean("use_sliding_window", true) && reader.has("sliding_window"))
    config.context_length = std::min(config.context_length, reader.integer("sliding_window", 1, kMaxContext));
  config.rope_dim = config.head_dim;
  if (architecture.fused_projections) read_partial_rotary(reader, config);
  read_rope(reader, config);
  const bool attention_bias = reader.boolean("attention_bias", false);
  config.qkv_bias = architecture.qkv_bias || attention_bias;
  config.o_bias = attention_bias;
  config.qk_norm = architecture.qk_norm;
  config.fused_projections = architecture.fused_projections;
  if (architecture.experts) read_experts(reader, config);
  config.rms_eps = reader.positive("rms_norm_eps", 1e-6, 1.0);
  config.tied_embeddings = reader.boolean("tie_word_embeddings", false);
  // Hugging Face's Llama rotates dimension i with i + head_dim/2 (rotate_half).
  config.rope_style = RopeStyle::HalfSplit;
  if (architecture.gemma != 0)
    read_gemma_fields(reader, architecture.gemma == 2 ? GemmaFamily::Gemma2 : GemmaFamily::Gemma3, config);
  if (gpt_oss) read_gpt_oss_fields(reader, config);
  return config;
}

}  // namespace

}  // namespace kvscope::model
