#pragma once
// The model's RoPE as the engine applies it to keys and queries (kernels/common/rope_math.h: per-pair frequency,
// pair layout, the rope scaling's per-pair divisors), for code outside the attention kernels that rotates a head
// vector to a position: `obs.rope.rotate` of a Python scorer and the built-in kvpress ports that re-project queries.
#include <vector>

#include "core/model/config.h"

namespace kvscope::policy {

struct RopeRotation {
  int head_dim = 0, rope_dim = 0;
  float base = 0.0f;
  bool adjacent = true;         // pairs (2i, 2i+1) as in a llama GGUF; false: (i, i + rope_dim/2)
  std::vector<float> divisors;  // one per rotated pair; empty: all 1
  // What the engine multiplies cos and sin by (ModelConfig::rope_attention_factor: YaRN's and longrope's attention
  // factor, 1 otherwise), so that a rotated query or key is the engine's.
  float scale = 1.0f;

  RopeRotation() = default;
  explicit RopeRotation(const model::ModelConfig& config);

  float divisor(int pair) const { return divisors.empty() ? 1.0f : divisors[pair]; }
  // v[0..head_dim) rotated in place to `position` in float32 as the engine does, or with `inverse` back from it
  // (the rotation by -position, divided by `scale`).
  void rotate(float* v, int position, bool inverse = false) const;
  // What rotate(v, position, inverse) computes per pair before turning it: cos_sin[0, rope_dim/2) the cosines,
  // then the sines (both times the magnitude). Many vectors rotated to one position share it (the angles cost
  // powf, cosf and sinf per pair).
  void angles(int position, float* cos_sin, bool inverse = false) const;
  // v rotated in place by angles(position, cos_sin, inverse): rotate(v, position, inverse) bit for bit.
  void rotate(float* v, const float* cos_sin) const;
};

}  // namespace kvscope::policy
