#pragma once
// exp of eight floats at once (AVX2 + FMA), for softmax: attention evaluates one exp per visible key and query
// head, ~270 000 per decode step at 1K tokens on the default model, which glibc's scalar expf makes a fifth of
// the step. Cephes' expf: x = n ln2 + r with ln2 split in two for an exact reduction, a degree-6 polynomial for
// e^r on [-ln2/2, ln2/2], and 2^n built in the exponent bits. Relative error within 2 ulp of the true value
// (tests/kernels/ops_test.cpp checks against std::exp in double); inputs below -87 give 0 (e^-87 is at the
// bottom of the normal floats, and softmax inputs are <= 0).
#include <immintrin.h>

namespace kvscope::kernels::cpu {

inline __m256 exp8(__m256 x) {
  const __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.0f)), _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  x = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_add_ps(_mm256_fmadd_ps(y, _mm256_mul_ps(x, x), x), _mm256_set1_ps(1.0f));
  const __m256i exponent = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(y, _mm256_castsi256_ps(exponent)));
}

}  // namespace kvscope::kernels::cpu
