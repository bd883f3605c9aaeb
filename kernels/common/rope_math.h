#pragma once
// RoPE per-pair math shared by CPU and CUDA: theta_i = position * base^(-2i/rope_dim) / divisor_i (RoFormer eq. 34;
// the divisor is 1 without rope scaling).
#include <cmath>

#if defined(__CUDACC__)
#define KVSCOPE_HD __host__ __device__
#else
#define KVSCOPE_HD
#endif

namespace kvscope::kernels {

KVSCOPE_HD inline void rope_rotate_pair(float& a, float& b, int pair, int rope_dim, int position, float base,
                                        float divisor = 1.0f) {
  const float freq = powf(base, -2.0f * static_cast<float>(pair) / static_cast<float>(rope_dim)) / divisor;
  const float angle = static_cast<float>(position) * freq;
  const float c = cosf(angle), s = sinf(angle);
  const float ra = a * c - b * s;
  const float rb = a * s + b * c;
  a = ra;
  b = rb;
}

}  // namespace kvscope::kernels
