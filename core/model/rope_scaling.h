#pragma once
// RoPE frequency scaling of long-context checkpoints, as per-pair divisors of the frequency (ModelConfig::
// rope_freq_divisors): "linear" (position interpolation), "llama3" (Llama 3.1/3.2) and "longrope" (Phi-3/3.5,
// transformers' _compute_longrope_parameters: short or long factors, and an attention factor on cos and sin) and
// "yarn" (gpt-oss, Qwen with long contexts: transformers' _compute_yarn_parameters).
#include <string>
#include <vector>

namespace kvscope::model {

struct RopeScaling {
  std::string type = "default";  // "default", "linear", "llama3", "longrope" or "yarn"
  double factor = 1.0;
  double low_freq_factor = 1.0;   // llama3 only
  double high_freq_factor = 4.0;  // llama3 only
  int original_context = 8192;    // llama3, longrope and yarn: original_max_position_embeddings
  // longrope only: per-pair frequency divisors for sequences up to original_context (short) and beyond (long),
  // and the factor multiplying cos and sin.
  std::vector<float> short_factor, long_factor;
  double attention_factor = 1.0;  // longrope and yarn
  // yarn only: the rotation counts bounding the ramp between interpolated (slow) and extrapolated (kept)
  // frequencies, and whether the ramp's ends are rounded outwards to whole dimensions.
  double beta_fast = 32.0, beta_slow = 1.0;
  bool truncate = true;
  // yarn only: llama.cpp's yarn_ext_factor in [0, 1], the weight of the ramp's extrapolation (rope_yarn's ramp_mix
  // is ramp * ext_factor): 1 is the whole ramp (transformers, which has no such field), 0 plain interpolation by
  // `factor` (and no YaRN attention factor, core/model/gguf_rope_scaling.cpp).
  double ext_factor = 1.0;
};

// YaRN's attention factor when a checkpoint gives none: 0.1 ln(factor) + 1 (1 for factor <= 1).
double yarn_default_attention_factor(double factor);

// One divisor per rotated pair (rope_dim / 2 values); empty for "default"; the short factors for "longrope".
std::vector<float> rope_freq_divisors(const RopeScaling& scaling, int rope_dim, double base);

}  // namespace kvscope::model
