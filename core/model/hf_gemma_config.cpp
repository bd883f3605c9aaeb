// The Gemma 2 / Gemma 3 fields of a config.json (Gemma2Config, Gemma3TextConfig), in transformers 4's layout
// (rope_theta, rope_local_base_freq, rope_scaling, sliding_window_pattern) and transformers 5's (rope_parameters
// per layer type, layer_types).
#include <string>

#include "core/model/gemma.h"
#include "core/model/json_config_reader.h"

namespace kvscope::model {
namespace {

// A soft-cap: absent means the family's default, null means none.
float softcap_field(const JsonConfigReader& reader, const std::string& key, float fallback) {
  if (!reader.present(key)) return fallback;
  if (!reader.has(key)) return 0.0f;
  return reader.positive(key, fallback, 1e6);
}

}  // namespace

std::vector<bool> read_layer_types(const JsonConfigReader& reader, int n_layers, int default_pattern) {
  if (!reader.has("layer_types"))
    return local_layers_from_pattern(n_layers,
                                     reader.integer("sliding_window_pattern", 1, kMaxLayers, default_pattern));
  const nlohmann::json& types = reader.at("layer_types");
  if (!types.is_array() || static_cast<int>(types.size()) != n_layers)
    reader.fail("layer_types", types.dump() + " (expected one entry per layer, " + std::to_string(n_layers) + ")");
  std::vector<bool> local;
  for (const auto& t : types) {
    if (t == "sliding_attention")
      local.push_back(true);
    else if (t == "full_attention")
      local.push_back(false);
    else
      reader.fail("layer_types", t.dump() + " (expected \"sliding_attention\" or \"full_attention\")");
  }
  return local;
}

namespace {

// Gemma 3 rotates local layers with their own base and without the global layers' rope scaling.
void read_gemma3_rope(const JsonConfigReader& reader, ModelConfig& config) {
  constexpr double kGlobalBase = 1e6, kLocalBase = 1e4;  // Gemma3TextConfig.default_theta
  config.rope_base = reader.positive("rope_theta", kGlobalBase, 1e12);
  config.rope_local_base = reader.positive("rope_local_base_freq", kLocalBase, 1e12);
  config.rope_freq_divisors.clear();
  config.rope_scaling = {};
  if (reader.has("rope_parameters") && reader.at("rope_parameters").contains("full_attention")) {
    const nlohmann::json& per_type = reader.at("rope_parameters");
    read_rope_object(reader, "rope_parameters.full_attention", per_type["full_attention"], config);
    if (per_type.contains("sliding_attention")) {
      ModelConfig local = config;
      local.rope_base = static_cast<float>(kLocalBase);
      read_rope_object(reader, "rope_parameters.sliding_attention", per_type["sliding_attention"], local);
      if (local.rope_scaling.type != "default")
        reader.fail("rope_parameters.sliding_attention.rope_type",
                    "\"" + local.rope_scaling.type + "\" is not supported on local layers (expected \"default\")");
      config.rope_local_base = local.rope_base;
    }
  } else if (reader.has("rope_parameters") || reader.has("rope_scaling")) {
    const std::string key = reader.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
    read_rope_object(reader, key, reader.at(key), config);
  }
}

}  // namespace

void read_gemma_fields(const JsonConfigReader& reader, GemmaFamily family, ModelConfig& config) {
  apply_gemma_architecture(config, family);
  for (const char* key : {"hidden_activation", "hidden_act"})
    if (reader.has(key) && reader.text(key) != "gelu_pytorch_tanh")
      reader.fail(key, "\"" + reader.text(key) + "\" is not supported (expected \"gelu_pytorch_tanh\")");
  if (reader.boolean("attention_bias", false)) reader.fail("attention_bias", "true is not supported (expected false)");
  if (reader.boolean("use_bidirectional_attention", false))
    reader.fail("use_bidirectional_attention", "true is not supported (kvscope runs causal decoders)");
  config.norm_weight_offset = 1.0f;
  config.tied_embeddings = reader.boolean("tie_word_embeddings", true);
  config.query_pre_attn_scalar = reader.positive("query_pre_attn_scalar", 256.0, 1e9);
  config.query_scale = gemma_query_scale(config.head_dim, config.query_pre_attn_scalar);
  const bool gemma2 = family == GemmaFamily::Gemma2;
  config.attn_logit_softcap = softcap_field(reader, "attn_logit_softcapping", gemma2 ? 50.0f : 0.0f);
  config.final_logit_softcap = softcap_field(reader, "final_logit_softcapping", gemma2 ? 30.0f : 0.0f);
  config.sliding_window = reader.integer("sliding_window", 1, kMaxContext, 4096);
  config.layer_is_local = read_layer_types(reader, config.n_layers, default_window_pattern(family));
  if (family == GemmaFamily::Gemma3) read_gemma3_rope(reader, config);
}

}  // namespace kvscope::model
