// The AVX-512 versions of quant_dot.cpp's kernels: one block of 32 weights is two 16-lane vectors, half the
// conversions and multiplies of AVX2. Compiled for AVX-512 function by function (the project's baseline is
// x86-64-v3), and only called when the CPU has it (quant_dot_isa()). Nothing from the standard library is
// used inside the AVX-512 region, so no inline library code compiled for AVX-512 can be shared with callers
// on other CPUs.
#include <immintrin.h>

#include "kernels/common/quant_blocks.h"
#include "kernels/cpu/quant_dot.h"
#include "kernels/cpu/row_groups.h"
#include "kernels/error.h"

namespace kvscope::kernels::avx512 {

namespace {

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma")
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which its own uninitialized-use analysis
// flags once they are inlined here; the values are fully written by the instructions that use them.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// The block's scale d in lane 0 and, for Q4_1, its minimum m in lane 1 (other lanes zero).
template <bool kHasMin>
inline __m128 scale_and_min(const uint8_t* block) {
  const uint32_t halves = kHasMin ? blocks::load_u16(block) | (blocks::load_u16(block + 2) << 16) : blocks::load_u16(block);
  return _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(halves)));
}

// (q_j for j < 16, q_j for j >= 16) of a 4-bit block: the low nibbles of qs[16], then the high nibbles.
inline void nibbles(const uint8_t* qs, __m512& low, __m512& high) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  low = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(bytes, mask)));
  high = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(bytes, 4), mask)));
}

// The 4-bit formats. Q4_1: w = d*q + m per element, so a row times x is the sum over blocks of
// d * (q . x) + m * sum(x_block). Q4_0: w = d*(q - 8), the sum of d * (q . x) - 8 * d * sum(x_block).
template <bool kHasMin>
struct Q4Rows {
  static constexpr int kBlockBytes = kHasMin ? blocks::kQ4_1Bytes : blocks::kQ4_0Bytes;
  static constexpr int kNibblesAt = kHasMin ? 4 : 2;  // after d (and m)

  template <int R>
  static void run(const uint8_t* row0, std::size_t stride, const float* x, const float* sums, int n_blocks, float* y) {
    __m512 acc[R];
    __m128 offset[R];  // lane 0: sum of d * sum(x_block); lane 1: sum of m * sum(x_block)
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps(), offset[r] = _mm_setzero_ps();
    for (int b = 0; b < n_blocks; ++b) {
      const __m512 x_low = _mm512_loadu_ps(x + 32 * b), x_high = _mm512_loadu_ps(x + 32 * b + 16);
      const __m128 x_sum = _mm_set1_ps(sums[b]);
      for (int r = 0; r < R; ++r) {
        const uint8_t* block = row0 + r * stride + b * kBlockBytes;
        prefetch_next_group(block, stride, R);
        __m512 q_low, q_high;
        nibbles(block + kNibblesAt, q_low, q_high);
        const __m512 qx = _mm512_fmadd_ps(q_high, x_high, _mm512_mul_ps(q_low, x_low));
        const __m128 dm = scale_and_min<kHasMin>(block);
        acc[r] = _mm512_fmadd_ps(_mm512_broadcastss_ps(dm), qx, acc[r]);
        offset[r] = _mm_fmadd_ps(dm, x_sum, offset[r]);
      }
    }
    for (int r = 0; r < R; ++r)
      y[r] = _mm512_reduce_add_ps(acc[r]) +
             (kHasMin ? _mm_cvtss_f32(_mm_movehdup_ps(offset[r])) : -8.0f * _mm_cvtss_f32(offset[r]));
  }
};

// w = d*q per element, q a signed byte (Q8_0).
struct Q8_0Rows {
  template <int R>
  static void run(const uint8_t* row0, std::size_t stride, const float* x, const float*, int n_blocks, float* y) {
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    for (int b = 0; b < n_blocks; ++b) {
      const __m512 x_low = _mm512_loadu_ps(x + 32 * b), x_high = _mm512_loadu_ps(x + 32 * b + 16);
      for (int r = 0; r < R; ++r) {
        const uint8_t* block = row0 + r * stride + b * blocks::kQ8_0Bytes;
        prefetch_next_group(block, stride, R);
        const __m512 q_low = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2))));
        const __m512 q_high = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 18))));
        const __m512 qx = _mm512_fmadd_ps(q_high, x_high, _mm512_mul_ps(q_low, x_low));
        const __m128 d = _mm_cvtph_ps(_mm_cvtsi32_si128(blocks::load_u16(block)));
        acc[r] = _mm512_fmadd_ps(_mm512_broadcastss_ps(d), qx, acc[r]);
      }
    }
    for (int r = 0; r < R; ++r) y[r] = _mm512_reduce_add_ps(acc[r]);
  }
};

#pragma GCC diagnostic pop
#pragma GCC pop_options

}  // namespace

void quant_dot_rows(const QuantMatrix& w, int r0, int r1, const float* x, const float* x_block_sums, float* y) {
  switch (w.type) {
    case GgmlType::Q4_1: dot_rows_in_groups<Q4Rows<true>>(w, r0, r1, x, x_block_sums, y); break;
    case GgmlType::Q4_0: dot_rows_in_groups<Q4Rows<false>>(w, r0, r1, x, x_block_sums, y); break;
    case GgmlType::Q8_0: dot_rows_in_groups<Q8_0Rows>(w, r0, r1, x, x_block_sums, y); break;
    default: throw Error("quant_dot_rows: no block dot product for this weight type");
  }
}

}  // namespace kvscope::kernels::avx512
