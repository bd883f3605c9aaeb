#include "kernels/cpu/quant_dot.h"

#include <immintrin.h>

#include "kernels/common/quant_blocks.h"
#include "kernels/cpu/row_groups.h"
#include "kernels/error.h"

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

// The 4-bit formats. Q4_1: w = d*q + m per element, so a row times x is the sum over blocks of
// d * (q . x) + m * sum(x_block). Q4_0: w = d*(q - 8), the sum of d * (q . x) - 8 * d * sum(x_block).
template <bool kHasMin>
struct Q4Rows {
  static constexpr int kBlockBytes = kHasMin ? blocks::kQ4_1Bytes : blocks::kQ4_0Bytes;
  static constexpr int kNibblesAt = kHasMin ? 4 : 2;  // after d (and m)

  template <int R>
  static void run(const uint8_t* row0, std::size_t stride, const float* x, const float* sums, int n_blocks, float* y) {
    __m256 acc[R];
    float offset[R];  // sum of m * sum(x_block) (Q4_1), or of d * sum(x_block) (Q4_0)
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps(), offset[r] = 0.0f;
    for (int b = 0; b < n_blocks; ++b)
      for (int r = 0; r < R; ++r) {
        const uint8_t* block = row0 + r * stride + b * kBlockBytes;
        prefetch_next_group(block, stride, R);
        const float d = half_at(block);
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), nibble_dot(block + kNibblesAt, x + 32 * b), acc[r]);
        offset[r] += (kHasMin ? half_at(block + 2) : d) * sums[b];
      }
    for (int r = 0; r < R; ++r) y[r] = horizontal_sum(acc[r]) + (kHasMin ? offset[r] : -8.0f * offset[r]);
  }
};

// w = d*q per element, q a signed byte (Q8_0).
struct Q8_0Rows {
  template <int R>
  static void run(const uint8_t* row0, std::size_t stride, const float* x, const float*, int n_blocks, float* y) {
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int b = 0; b < n_blocks; ++b) {
      const float* xb = x + 32 * b;
      for (int r = 0; r < R; ++r) {
        const uint8_t* block = row0 + r * stride + b * blocks::kQ8_0Bytes;
        prefetch_next_group(block, stride, R);
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2));
        const __m128i q_lo = _mm256_castsi256_si128(q), q_hi = _mm256_extracti128_si256(q, 1);
        __m256 s = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q_lo)), _mm256_loadu_ps(xb));
        s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q_lo, 8))), _mm256_loadu_ps(xb + 8), s);
        s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q_hi)), _mm256_loadu_ps(xb + 16), s);
        s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q_hi, 8))), _mm256_loadu_ps(xb + 24), s);
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(half_at(block)), s, acc[r]);
      }
    }
    for (int r = 0; r < R; ++r) y[r] = horizontal_sum(acc[r]);
  }
};

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}

}  // namespace

DotIsa quant_dot_isa() {
  static const DotIsa isa = cpu_has_avx512() ? DotIsa::Avx512 : DotIsa::Avx2;
  return isa;
}

const char* dot_isa_name(DotIsa isa) { return isa == DotIsa::Avx512 ? "AVX-512" : "AVX2"; }

bool has_quant_dot(const QuantMatrix& w) {
  return w.cols % 32 == 0 &&
         (w.type == GgmlType::Q4_1 || w.type == GgmlType::Q4_0 || w.type == GgmlType::Q8_0);
}

void block_sums32(const float* x, int n, float* sums) {
  for (int b = 0; b < n / 32; ++b) {
    __m256 s = _mm256_loadu_ps(x + 32 * b);
    s = _mm256_add_ps(s, _mm256_loadu_ps(x + 32 * b + 8));
    s = _mm256_add_ps(s, _mm256_loadu_ps(x + 32 * b + 16));
    s = _mm256_add_ps(s, _mm256_loadu_ps(x + 32 * b + 24));
    sums[b] = horizontal_sum(s);
  }
}

namespace avx2 {
void quant_dot_rows(const QuantMatrix& w, int r0, int r1, const float* x, const float* x_block_sums, float* y) {
  switch (w.type) {
    case GgmlType::Q4_1: dot_rows_in_groups<Q4Rows<true>>(w, r0, r1, x, x_block_sums, y); break;
    case GgmlType::Q4_0: dot_rows_in_groups<Q4Rows<false>>(w, r0, r1, x, x_block_sums, y); break;
    case GgmlType::Q8_0: dot_rows_in_groups<Q8_0Rows>(w, r0, r1, x, x_block_sums, y); break;
    default: throw Error("quant_dot_rows: no block dot product for this weight type");
  }
}
}  // namespace avx2

void quant_dot_rows(DotIsa isa, const QuantMatrix& w, int r0, int r1, const float* x, const float* x_block_sums,
                    float* y) {
  if (isa == DotIsa::Avx512)
    avx512::quant_dot_rows(w, r0, r1, x, x_block_sums, y);
  else
    avx2::quant_dot_rows(w, r0, r1, x, x_block_sums, y);
}

void quant_dot_rows(const QuantMatrix& w, int r0, int r1, const float* x, const float* x_block_sums, float* y) {
  quant_dot_rows(quant_dot_isa(), w, r0, r1, x, x_block_sums, y);
}

}  // namespace kvscope::kernels
