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

void RopeRotation::angles(int position, float* cos_sin, bool inverse) const {
  const float magnitude = inverse ? 1.0f / scale : scale;
  const int pairs = rope_dim / 2;
  for (int pair = 0; pair < pairs; ++pair)
    kernels::rope_pair_cos_sin(pair, rope_dim, inverse ? -position : position, base, divisor(pair), magnitude,
                               cos_sin[pair], cos_sin[pairs + pair]);
}

void RopeRotation::rotate(float* v, const float* cos_sin) const {
  const int pairs = rope_dim / 2;
  for (int pair = 0; pair < pairs; ++pair) {
    int first = 0, second = 0;
    kernels::rope_pair_indices(adjacent, pair, rope_dim, &first, &second);
    kernels::rope_turn_pair(v[first], v[second], cos_sin[pair], cos_sin[pairs + pair]);
  }
}

}  // namespace kvscope::policy
