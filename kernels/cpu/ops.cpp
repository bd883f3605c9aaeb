// Element-wise CPU ops. Matrix products live in matmul.cpp.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/common/dequantize.h"
#include "kernels/common/rope_math.h"
#include "kernels/common/softmax_math.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/vector_exp.h"

namespace kvscope::kernels {

void embedding_row(const QuantMatrix& table, int id, float* out) {
  dequantize_row(table.type, table.row(id), out, table.cols);
}

void rmsnorm(const float* x, const float* weight, int dim, float eps, float* out) {
  double sum_sq = 0.0;
  for (int i = 0; i < dim; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  const float scale = rms_inverse(sum_sq, dim, eps);
  for (int i = 0; i < dim; ++i) out[i] = x[i] * scale * weight[i];
}

void rope(float* heads, int n_heads, int head_dim, int rope_dim, int position, float base, RopeStyle style,
          const float* freq_divisors, float scale) {
  for (int h = 0; h < n_heads; ++h) {
    float* v = heads + static_cast<long>(h) * head_dim;
    for (int pair = 0; pair < rope_dim / 2; ++pair) {
      const float divisor = freq_divisors ? freq_divisors[pair] : 1.0f;
      int first, second;
      rope_pair_indices(style == RopeStyle::AdjacentPairs, pair, rope_dim, &first, &second);
      rope_rotate_pair(v[first], v[second], pair, rope_dim, position, base, divisor, scale);
    }
  }
}

void add_bias(float* x, const float* bias, int rows, int width) {
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < width; ++j) x[static_cast<std::size_t>(i) * width + j] += bias[j];
}

float dot(const float* a, const float* b, int n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void softmax(float* x, int n) { softmax_lse(x, n); }

float softmax_lse(float* x, int n) {
  if (n <= 0) return -std::numeric_limits<float>::infinity();
  const float max_value = *std::max_element(x, x + n);
  // Eight exps at a time; the sum is kept in double (two lanes of four) so long rows lose nothing to rounding.
  const __m256 shift = _mm256_set1_ps(max_value);
  __m256d sum_low = _mm256_setzero_pd(), sum_high = _mm256_setzero_pd();
  auto accumulate = [&](__m256 e) {
    sum_low = _mm256_add_pd(sum_low, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    sum_high = _mm256_add_pd(sum_high, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  };
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = cpu::exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), shift));
    _mm256_storeu_ps(x + i, e);
    accumulate(e);
  }
  if (i < n) {  // the tail, padded with -infinity (exp gives 0)
    alignas(32) float tail[8];
    std::fill(tail, tail + 8, -std::numeric_limits<float>::infinity());
    std::copy(x + i, x + n, tail);
    const __m256 e = cpu::exp8(_mm256_sub_ps(_mm256_load_ps(tail), shift));
    _mm256_store_ps(tail, e);
    std::copy(tail, tail + (n - i), x + i);
    accumulate(e);
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(sum_low, sum_high));
  const double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  const float inv = static_cast<float>(1.0 / sum);
  for (int j = 0; j < n; ++j) x[j] *= inv;
  return max_value + static_cast<float>(std::log(sum));
}

void swiglu(const float* gate, const float* up, float* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = swiglu_element(gate[i], up[i]);
}

}  // namespace kvscope::kernels
