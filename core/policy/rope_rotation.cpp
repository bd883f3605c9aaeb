#include "core/policy/rope_rotation.h"

#include "kernels/common/rope_math.h"

namespace kvscope::policy {

RopeRotation::RopeRotation(const model::ModelConfig& config)
    : head_dim(config.head_dim),
      rope_dim(config.rope_dim),
      base(config.rope_base),
      adjacent(config.rope_style == model::RopeStyle::AdjacentPairs),
      divisors(config.rope_freq_divisors),
      scale(config.rope_attention_factor) {}

void RopeRotation::rotate(float* v, int position, bool inverse) const {
  const float magnitude = inverse ? 1.0f / scale : scale;
  for (int pair = 0; pair < rope_dim / 2; ++pair) {
    int first = 0, second = 0;
    kernels::rope_pair_indices(adjacent, pair, rope_dim, &first, &second);
    kernels::rope_rotate_pair(v[first], v[second], pair, rope_dim, inverse ? -position : position, base, divisor(pair),
                              magnitude);
  }
}

}  // namespace kvscope::policy
