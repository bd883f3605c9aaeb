#pragma once
// Softmax, RMSNorm and SwiGLU pieces shared by the CPU and CUDA kernels. The online softmax keeps a running
// maximum m and a sum s of exp(x - m) (Milakov & Gimelshein 2018), so attention over keys that arrive in
// tiles never needs the whole score row: adding x, or combining two partial states, rescales the older sum.
#include <cmath>

#include "kernels/common/host_device.h"

namespace kvscope::kernels {

struct OnlineSoftmax {
  float max = -INFINITY;
  float sum = 0.0f;  // sum of exp(x - max) over the values seen

  // log(sum_i exp(x_i)), -inf when nothing was seen.
  KVSCOPE_HD float log_sum_exp() const { return sum > 0.0f ? max + logf(sum) : -INFINITY; }
};

// The factor that rescales a sum kept relative to old_max onto new_max (0 when nothing was kept yet).
KVSCOPE_HD inline float online_softmax_rescale(float old_max, float new_max) {
  return old_max == -INFINITY ? 0.0f : expf(old_max - new_max);
}

KVSCOPE_HD inline void online_softmax_add(OnlineSoftmax& state, float x) {
  if (x == -INFINITY) return;
  if (x > state.max) {
    state.sum = state.sum * online_softmax_rescale(state.max, x) + 1.0f;
    state.max = x;
  } else {
    state.sum += expf(x - state.max);
  }
}

KVSCOPE_HD inline OnlineSoftmax online_softmax_combine(const OnlineSoftmax& a, const OnlineSoftmax& b) {
  OnlineSoftmax out;
  out.max = a.max > b.max ? a.max : b.max;
  if (out.max == -INFINITY) return out;
  out.sum = a.sum * online_softmax_rescale(a.max, out.max) + b.sum * online_softmax_rescale(b.max, out.max);
  return out;
}

// The probability of a score once the row's log-sum-exp is known (0 for a masked score).
KVSCOPE_HD inline float softmax_probability(float x, float log_sum_exp) {
  return x == -INFINITY ? 0.0f : expf(x - log_sum_exp);
}

// 1 / rms(x) from the sum of squares of dim values: the RMSNorm scale (Zhang & Sennrich 2019).
KVSCOPE_HD inline float rms_inverse(double sum_of_squares, int dim, float eps) {
  return 1.0f / sqrtf(static_cast<float>(sum_of_squares / dim) + eps);
}

// SiLU(gate) * up, the SwiGLU feed-forward's element (Shazeer 2020).
KVSCOPE_HD inline float swiglu_element(float gate, float up) { return gate / (1.0f + expf(-gate)) * up; }

// gpt-oss's clamped SwiGLU (GptOssExperts._apply_gate): the gate clamped from above and up on both sides at
// `limit`, then (up + 1) * gate * sigmoid(alpha * gate).
KVSCOPE_HD inline float clamped_swiglu_element(float gate, float up, float alpha, float limit) {
  gate = gate < limit ? gate : limit;
  up = up < -limit ? -limit : (up > limit ? limit : up);
  return (up + 1.0f) * gate / (1.0f + expf(-alpha * gate));
}

// GELU with the tanh approximation (PyTorch's gelu(approximate="tanh")) times up: Gemma's GeGLU element.
KVSCOPE_HD inline float geglu_element(float gate, float up) {
  const float inner = 0.7978845608028654f * (gate + 0.044715f * gate * gate * gate);
  return 0.5f * gate * (1.0f + tanhf(inner)) * up;
}

// log(exp(lse) + exp(sink)): a row's log-sum-exp once gpt-oss's sink logit joins its denominator.
KVSCOPE_HD inline float with_sink(float lse, float sink) {
  if (lse == -INFINITY) return sink;
  return lse > sink ? lse + log1pf(expf(sink - lse)) : sink + log1pf(expf(lse - sink));
}

// Gemma 2's soft-capping of a score: cap * tanh(x / cap), or x itself when cap is 0.
KVSCOPE_HD inline float softcap(float x, float cap) { return cap > 0.0f ? cap * tanhf(x / cap) : x; }

}  // namespace kvscope::kernels
