#include "core/model/gpt_oss.h"

#include <cmath>
#include <string>

#include "core/common/error.h"
#include "core/model/gemma.h"
#include "core/model/gguf.h"

namespace kvscope::model {

void apply_gpt_oss_architecture(ModelConfig& config) {
  config.attention_sinks = true;
  config.router_softmax_after_topk = true;
  config.expert_biases = true;
  config.qkv_bias = true;
  config.o_bias = true;
  config.rope_style = RopeStyle::HalfSplit;
  config.swiglu_limit = 7.0f;  // GptOssConfig's defaults, which llama.cpp fixes for the architecture
  config.swiglu_alpha = 1.702f;
}

namespace {

[[noreturn]] void gguf_fail(const GgufFile& file, const std::string& key, const std::string& what) {
  throw Error(file.path().string() + ": metadata '" + key + "': " + what);
}

double gguf_positive(const GgufFile& file, const std::string& key, double fallback) {
  const double value = file.get_float(key, fallback);
  if (!std::isfinite(value) || value <= 0.0) gguf_fail(file, key, std::to_string(value) + " (expected a finite value > 0)");
  return value;
}

}  // namespace

// llama.cpp's converter writes the sliding window, the expert sizes and YaRN's type, factor and original context;
// llama.cpp itself fixes the pattern (even layers local), YaRN's betas (32, 1) and the SwiGLU's alpha and limit,
// which are read here from keys when a file carries them (gpt-oss.swiglu_limit and gpt-oss.swiglu_alpha are
// kvscope's, for checkpoints that differ from the released ones). YaRN's ramp is not truncated, as the released
// config.json says (truncate false), where llama.cpp rounds its ends.
void read_gpt_oss_fields(const GgufFile& file, ModelConfig& config) {
  const std::string arch = config.architecture;
  apply_gpt_oss_architecture(config);
  if (config.n_experts == 0) gguf_fail(file, arch + ".expert_count", "missing or 0 (expected the number of experts)");
  const std::string window_key = arch + ".attention.sliding_window";
  const int64_t window = file.get_int(window_key, 128);
  if (window < 1 || window > kMaxContext) gguf_fail(file, window_key, std::to_string(window) + " is out of range");
  config.sliding_window = static_cast<int>(window);
  config.layer_is_local = local_layers_from_pattern(config.n_layers, 2);
  config.swiglu_limit = static_cast<float>(gguf_positive(file, arch + ".swiglu_limit", 7.0));
  config.swiglu_alpha = static_cast<float>(gguf_positive(file, arch + ".swiglu_alpha", 1.702));
  const std::string type_key = arch + ".rope.scaling.type";
  const std::string type = file.get_string(type_key, "none");
  if (type == "none") return;
  if (type != "yarn") gguf_fail(file, type_key, "\"" + type + "\" is not supported (expected yarn or none)");
  RopeScaling& scaling = config.rope_scaling;
  scaling.type = "yarn";
  scaling.factor = gguf_positive(file, arch + ".rope.scaling.factor", 1.0);
  const std::string original_key = arch + ".rope.scaling.original_context_length";
  const int64_t original = file.get_int(original_key, 4096);
  if (original < 1 || original > kMaxContext) gguf_fail(file, original_key, std::to_string(original) + " is out of range");
  scaling.original_context = static_cast<int>(original);
  scaling.beta_fast = gguf_positive(file, arch + ".rope.scaling.yarn_beta_fast", 32.0);
  scaling.beta_slow = gguf_positive(file, arch + ".rope.scaling.yarn_beta_slow", 1.0);
  scaling.truncate = false;
  scaling.attention_factor = yarn_default_attention_factor(scaling.factor);
  config.rope_freq_divisors = rope_freq_divisors(scaling, config.rope_dim, config.rope_base);
  config.rope_attention_factor = static_cast<float>(scaling.attention_factor);
}

}  // namespace kvscope::model
