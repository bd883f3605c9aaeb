#pragma once
// RoPE per-pair math shared by CPU and CUDA: theta_i = position * base^(-2i/rope_dim) / divisor_i (RoFormer eq. 34;
// the divisor is 1 without rope scaling). `scale` multiplies cos and sin (longrope's attention factor; 1 otherwise).
#include <cmath>

#include "kernels/common/host_device.h"

namespace kvscope::kernels {

// cos and sin of pair `pair`'s angle at `position`, times `scale`: the first half of rope_rotate_pair, which a
// caller rotating many vectors to one position computes once (core/policy/rope_rotation.h).
KVSCOPE_HD inline void rope_pair_cos_sin(int pair, int rope_dim, int position, float base, float divisor, float scale,
                                         float& c, float& s) {
  const float freq = powf(base, -2.0f * static_cast<float>(pair) / static_cast<float>(rope_dim)) / divisor;
  const float angle = static_cast<float>(position) * freq;
  c = cosf(angle) * scale;
  s = sinf(angle) * scale;
}

// (a, b) turned by the angle whose cos and sin are given: the second half of rope_rotate_pair.
KVSCOPE_HD inline void rope_turn_pair(float& a, float& b, float c, float s) {
  const float ra = a * c - b * s;
  const float rb = a * s + b * c;
  a = ra;
  b = rb;
}

KVSCOPE_HD inline void rope_rotate_pair(float& a, float& b, int pair, int rope_dim, int position, float base,
                                        float divisor = 1.0f, float scale = 1.0f) {
  float c = 0.0f, s = 0.0f;
  rope_pair_cos_sin(pair, rope_dim, position, base, divisor, scale, c, s);
  rope_turn_pair(a, b, c, s);
}

// Which two elements of a head vector form pair `pair`: neighbours (2i, 2i+1) in the original Llama
// layout, or halves (i, i + rope_dim/2) in the NeoX / Hugging Face layout.
KVSCOPE_HD inline void rope_pair_indices(bool adjacent_pairs, int pair, int rope_dim, int* first, int* second) {
  *first = adjacent_pairs ? 2 * pair : pair;
  *second = adjacent_pairs ? 2 * pair + 1 : pair + rope_dim / 2;
}

}  // namespace kvscope::kernels
