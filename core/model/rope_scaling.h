#pragma once
// RoPE frequency scaling of long-context checkpoints, as per-pair divisors of the frequency (ModelConfig::
// rope_freq_divisors): "linear" (position interpolation) and "llama3" (Llama 3.1/3.2).
#include <string>
#include <vector>

namespace kvscope::model {

struct RopeScaling {
  std::string type = "default";  // "default", "linear" or "llama3"
  double factor = 1.0;
  double low_freq_factor = 1.0;   // llama3 only
  double high_freq_factor = 4.0;  // llama3 only
  int original_context = 8192;    // llama3 only: original_max_position_embeddings
};

// One divisor per rotated pair (rope_dim / 2 values); empty for "default".
std::vector<float> rope_freq_divisors(const RopeScaling& scaling, int rope_dim, double base);

}  // namespace kvscope::model
