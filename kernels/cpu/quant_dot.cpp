#include "kernels/cpu/quant_dot.h"

#include <immintrin.h>

#include "kernels/common/quant_blocks.h"

namespace kvscope::kernels {

namespace {

inline float half_at(const uint8_t* p) {
  return _cvtsh_ss(blocks::load_u16(p));
}

inline float horizontal_sum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

// Sum over a block's 32 elements of q_j * x_j, with q the unsigned nibbles of qs[16]: elements 0..15 are
// the low nibbles, 16..31 the high nibbles (ggml's layout).
inline __m256 nibble_dot(const uint8_t* qs, const float* x) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i low = _mm_and_si128(bytes, mask);
  const __m128i high = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
  __m256 acc = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(low)), _mm256_loadu_ps(x));
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(low, 8))), _mm256_loadu_ps(x + 8), acc);
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(high)), _mm256_loadu_ps(x + 16), acc);
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(high, 8))), _mm256_loadu_ps(x + 24), acc);
  return acc;
}

}  // namespace

void block_sums32(const float* x, int n, float* sums) {
  for (int b = 0; b < n / 32; ++b) {
    __m256 s = _mm256_loadu_ps(x + 32 * b);
    s = _mm256_add_ps(s, _mm256_loadu_ps(x + 32 * b + 8));
    s = _mm256_add_ps(s, _mm256_loadu_ps(x + 32 * b + 16));
    s = _mm256_add_ps(s, _mm256_loadu_ps(x + 32 * b + 24));
    sums[b] = horizontal_sum(s);
  }
}

// x = d*q + m per element (Q4_1), so the dot is d * sum(q x) + m * sum(x).
float dot_q4_1(const uint8_t* row, const float* x, const float* x_block_sums, int n) {
  __m256 acc = _mm256_setzero_ps();
  float offset = 0.0f;
  for (int b = 0; b < n / 32; ++b) {
    const uint8_t* block = row + b * blocks::kQ4_1Bytes;
    acc = _mm256_fmadd_ps(_mm256_set1_ps(half_at(block)), nibble_dot(block + 4, x + 32 * b), acc);
    offset += half_at(block + 2) * x_block_sums[b];
  }
  return horizontal_sum(acc) + offset;
}

// x = d*(q - 8) per element (Q4_0).
float dot_q4_0(const uint8_t* row, const float* x, const float* x_block_sums, int n) {
  __m256 acc = _mm256_setzero_ps();
  float offset = 0.0f;
  for (int b = 0; b < n / 32; ++b) {
    const uint8_t* block = row + b * blocks::kQ4_0Bytes;
    const float d = half_at(block);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), nibble_dot(block + 2, x + 32 * b), acc);
    offset -= 8.0f * d * x_block_sums[b];
  }
  return horizontal_sum(acc) + offset;
}

// x = d*q per element, q a signed byte (Q8_0).
float dot_q8_0(const uint8_t* row, const float* x, int n) {
  __m256 acc = _mm256_setzero_ps();
  for (int b = 0; b < n / 32; ++b) {
    const uint8_t* block = row + b * blocks::kQ8_0Bytes;
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2));
    const __m128i q_lo = _mm256_castsi256_si128(q), q_hi = _mm256_extracti128_si256(q, 1);
    const float* xb = x + 32 * b;
    __m256 s = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q_lo)), _mm256_loadu_ps(xb));
    s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q_lo, 8))), _mm256_loadu_ps(xb + 8), s);
    s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q_hi)), _mm256_loadu_ps(xb + 16), s);
    s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q_hi, 8))), _mm256_loadu_ps(xb + 24), s);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(half_at(block)), s, acc);
  }
  return horizontal_sum(acc);
}

}  // namespace kvscope::kernels
