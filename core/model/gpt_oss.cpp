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

// llama.cpp's converter writes the sliding window and the expert sizes; llama.cpp itself fixes the pattern (even
// layers local) and the SwiGLU's alpha and limit, which are read here from keys when a file carries them
// (gpt-oss.swiglu_limit and gpt-oss.swiglu_alpha are kvscope's, for checkpoints that differ from the released
// ones).
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
  // The rope scaling was read as for every architecture (core/model/gguf_rope_scaling.h); gpt-oss's ramp is not
  // truncated, as the released config.json says (truncate false), where llama.cpp rounds its ends.
  if (config.rope_scaling.type == "yarn") {
    config.rope_scaling.truncate = false;
    config.rope_freq_divisors = rope_freq_divisors(config.rope_scaling, config.rope_dim, config.rope_base);
  }
}

}  // namespace kvscope::model
