#include "kernels/cpu/attention.h"

#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <vector>

#include "kernels/common/block_quantize.h"
#include "kernels/common/float16.h"
#include "kernels/common/hadamard.h"
#include "kernels/common/quant_blocks.h"
#include "kernels/common/softmax_math.h"
#include "kernels/cpu/cpu_ops.h"

namespace kvscope::kernels::cpu {

namespace {

// Queries per block in prefill: bounds the score scratch to block x keys while keeping BLAS efficient.
constexpr int kQueryBlock = 64;

// Fills the requested reductions row by row, in query order within a head.
struct Reductions {
  const AttentionRequest& request;
  AttentionSideOutputs& side;
  int n;

  void allocate(int head, int n_keys) {
    if (request.column_sums) side.column_sums[head].assign(n_keys, 0.0f);
    if (request.window_sums) side.window_sums[head].assign(n_keys, 0.0f);
    if (request.window_rows) side.window_rows[head].assign(static_cast<std::size_t>(side.window) * n_keys, 0.0f);
    if (request.last_row) side.last_row[head].assign(n_keys, 0.0f);
    if (request.log_sum_exp) side.log_sum_exp[head].assign(n, 0.0f);
  }

  // Row `row` of the call (0-based) with probabilities over its first n_cols keys.
  void add_row(int head, int row, const float* p, int n_cols, int n_keys, float lse) {
    if (request.column_sums) {
      float* sums = side.column_sums[head].data();
      for (int j = 0; j < n_cols; ++j) sums[j] += p[j];
    }
    const int window_row = row - (n - side.window);
    if (window_row >= 0) {
      if (request.window_sums) {
        float* sums = side.window_sums[head].data();
        for (int j = 0; j < n_cols; ++j) sums[j] += p[j];
      }
      if (request.window_rows)
        std::copy(p, p + n_cols, side.window_rows[head].begin() + static_cast<std::size_t>(window_row) * n_keys);
    }
    if (request.last_row && row == n - 1) std::copy(p, p + n_cols, side.last_row[head].begin());
    if (request.log_sum_exp) side.log_sum_exp[head][row] = lse;
  }
};

// Streams rows to the sink from the attention threads. A sink exception must not leave an OpenMP region: the
// first one is kept, later rows are dropped, and rethrow() raises it once the threads have joined.
class RowDelivery {
 public:
  explicit RowDelivery(AttentionRowSink* sink) : sink_(sink) {}
  void deliver(int head, int first_row, int n_rows, int n_cols, const float* probs) {
    if (!sink_ || failed_.load(std::memory_order_relaxed)) return;
    try {
      if (sink_->concurrent_across_heads()) {
        sink_->on_rows(head, first_row, n_rows, n_cols, probs);
      } else {
        std::lock_guard<std::mutex> lock(serial_);
        sink_->on_rows(head, first_row, n_rows, n_cols, probs);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
      failed_ = true;
    }
  }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  AttentionRowSink* sink_;
  std::mutex serial_, error_mutex_;
  std::exception_ptr error_;
  std::atomic<bool> failed_{false};
};

// Eight values of a float32 or half row, as floats.
inline __m256 load8(const float* row) { return _mm256_loadu_ps(row); }
inline __m256 load8(const uint16_t* row) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row)));
}
// bfloat16 is the top half of a float32: widen to 32 bits and shift into place.
inline __m256 load8(const BFloat16* row) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
// Decode streams the cache from memory once per step; the hardware prefetcher alone leaves the loads waiting
// (the same holds for the weights, quant_dot.h), so each loop asks for the rows it reaches kRowsAhead rows
// later.
constexpr int kRowsAhead = 8;
template <typename Row>
inline void prefetch(const Row* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
}
inline float widen(float x) { return x; }
inline float widen(uint16_t x) { return half_to_float(x); }
inline float widen(BFloat16 x) { return blocks::bf16_to_float(x.bits); }

// scores[j] = scale * q . k_j for the m rows of k. Decode reads every cached key once per query head, so this
// and weighted_sum are what a long context costs: four keys at a time keep four independent FMA chains in
// flight (one chain per key would wait on the FMA latency at every step). float32 accumulation for either row
// type; head_dim a multiple of 8 (the scalar loop below takes any other).
template <typename Row>
void scores(const float* q, const Row* k, int m, int d, float scale, float* out) {
  if (d % 8 != 0) {
    for (int j = 0; j < m; ++j) {
      float sum = 0.0f;
      for (int t = 0; t < d; ++t) sum += q[t] * widen(k[static_cast<std::size_t>(j) * d + t]);
      out[j] = sum * scale;
    }
    return;
  }
  const std::size_t stride = d;
  int j = 0;
  for (; j + 4 <= m; j += 4) {
    const Row* k0 = k + j * stride;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int t = 0; t < d; t += 8) {
      const __m256 qt = _mm256_loadu_ps(q + t);
      prefetch(k0 + kRowsAhead * stride + t);
      prefetch(k0 + (kRowsAhead + 2) * stride + t);
      a0 = _mm256_fmadd_ps(qt, load8(k0 + t), a0);
      a1 = _mm256_fmadd_ps(qt, load8(k0 + stride + t), a1);
      a2 = _mm256_fmadd_ps(qt, load8(k0 + 2 * stride + t), a2);
      a3 = _mm256_fmadd_ps(qt, load8(k0 + 3 * stride + t), a3);
    }
    // Horizontal sums of the four accumulators at once: lanes [a0, a1, a2, a3].
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    const __m128 sums = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    _mm_storeu_ps(out + j, _mm_mul_ps(sums, _mm_set1_ps(scale)));
  }
  for (; j < m; ++j) {
    __m256 a = _mm256_setzero_ps();
    for (int t = 0; t < d; t += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q + t), load8(k + j * stride + t), a);
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    out[j] = _mm_cvtss_f32(lo) * scale;
  }
}

// out = sum_j p[j] v_j over the m rows of v, 64 output dimensions at a time held in registers across all rows
// (a 64-wide head reads each row of v in one pass, in order).
template <typename Row>
void weighted_sum(const float* p, const Row* v, int m, int d, float* out) {
  if (d % 8 != 0) {
    std::fill(out, out + d, 0.0f);
    for (int j = 0; j < m; ++j)
      for (int t = 0; t < d; ++t) out[t] += p[j] * widen(v[static_cast<std::size_t>(j) * d + t]);
    return;
  }
  const std::size_t stride = d;
  int t0 = 0;
  for (; t0 + 64 <= d; t0 += 64) {
    __m256 a[8];
    for (__m256& x : a) x = _mm256_setzero_ps();
    for (int j = 0; j < m; ++j) {
      const __m256 pj = _mm256_set1_ps(p[j]);
      const Row* row = v + j * stride + t0;
      prefetch(row + kRowsAhead * stride);
      prefetch(row + kRowsAhead * stride + 32);
      for (int c = 0; c < 8; ++c) a[c] = _mm256_fmadd_ps(pj, load8(row + 8 * c), a[c]);
    }
    for (int c = 0; c < 8; ++c) _mm256_storeu_ps(out + t0 + 8 * c, a[c]);
  }
  for (; t0 < d; t0 += 8) {
    __m256 a = _mm256_setzero_ps();
    for (int j = 0; j < m; ++j) a = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), load8(v + j * stride + t0), a);
    _mm256_storeu_ps(out + t0, a);
  }
}

// A block of a llama.cpp format widened to 32 floats in four registers, x = d * (q - 8) (q4_0), d * q + m (q4_1)
// or d * q (q8_0): the same values as quant_blocks.h's dequantize_block_*, formed in registers so that
// attention reads the stored blocks and never a dequantized copy of the cache.
struct Q8_0Block {
  static constexpr int kBytes = blocks::kQ8_0Bytes;
  static void widen(const uint8_t* block, __m256 x[4]) {
    const __m256 d = _mm256_set1_ps(blocks::load_half(block));
    for (int c = 0; c < 4; ++c) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + 2 + 8 * c));
      x[c] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
    }
  }
};
// The 16 code bytes of a 4-bit block as four groups of eight codes in element order: low nibbles are
// elements 0..15, high nibbles 16..31.
inline void nibbles(const uint8_t* qs, __m256 q[4]) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(raw, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), mask);
  q[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
  q[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
  q[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
  q[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
}
struct Q4_0Block {
  static constexpr int kBytes = blocks::kQ4_0Bytes;
  static void widen(const uint8_t* block, __m256 x[4]) {
    // d * q - 8 d in one fused step: -8 d is exact, so this rounds d (q - 8) once, as the reference does.
    const float d = blocks::load_half(block);
    const __m256 scale = _mm256_set1_ps(d), offset = _mm256_set1_ps(-8.0f * d);
    nibbles(block + 2, x);
    for (int c = 0; c < 4; ++c) x[c] = _mm256_fmadd_ps(x[c], scale, offset);
  }
};
struct Q4_1Block {
  static constexpr int kBytes = blocks::kQ4_1Bytes;
  static void widen(const uint8_t* block, __m256 x[4]) {
    const __m256 d = _mm256_set1_ps(blocks::load_half(block));
    const __m256 m = _mm256_set1_ps(blocks::load_half(block + 2));
    nibbles(block + 4, x);
    for (int c = 0; c < 4; ++c) x[c] = _mm256_fmadd_ps(x[c], d, m);
  }
};

inline float horizontal_sum(__m256 a) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  return _mm_cvtss_f32(lo);
}

// scores() over keys stored in a block format (head_dim a multiple of 32): each block is widened in registers
// and multiplied into four accumulators, one per eight dimensions (four independent FMA chains per key).
template <typename Block>
void block_scores(const float* q, const uint8_t* k, int m, int d, float scale, float* out) {
  const int n_blocks = d / blocks::kQuantBlockElements;
  const std::size_t row_bytes = static_cast<std::size_t>(n_blocks) * Block::kBytes;
  for (int j = 0; j < m; ++j) {
    const uint8_t* row = k + j * row_bytes;
    for (std::size_t ahead = 0; ahead < row_bytes; ahead += 64) prefetch(row + kRowsAhead * row_bytes + ahead);
    __m256 a[4], x[4];
    for (__m256& r : a) r = _mm256_setzero_ps();
    for (int b = 0; b < n_blocks; ++b) {
      Block::widen(row + b * Block::kBytes, x);
      const float* qb = q + b * blocks::kQuantBlockElements;
      for (int c = 0; c < 4; ++c) a[c] = _mm256_fmadd_ps(_mm256_loadu_ps(qb + 8 * c), x[c], a[c]);
    }
    out[j] = horizontal_sum(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3]))) * scale;
  }
}

// weighted_sum() over values stored in a block format: two blocks (64 output dimensions) at a time held in
// registers across all rows, then a last single block.
template <typename Block>
void block_weighted_sum(const float* p, const uint8_t* v, int m, int d, float* out) {
  const int n_blocks = d / blocks::kQuantBlockElements;
  const std::size_t row_bytes = static_cast<std::size_t>(n_blocks) * Block::kBytes;
  int b0 = 0;
  for (; b0 < n_blocks; b0 += 2) {
    const int width = std::min(2, n_blocks - b0);
    __m256 a[8], x[4];
    for (__m256& r : a) r = _mm256_setzero_ps();
    for (int j = 0; j < m; ++j) {
      const __m256 pj = _mm256_set1_ps(p[j]);
      const uint8_t* row = v + j * row_bytes + b0 * Block::kBytes;
      prefetch(row + kRowsAhead * row_bytes);
      for (int w = 0; w < width; ++w) {
        Block::widen(row + w * Block::kBytes, x);
        for (int c = 0; c < 4; ++c) a[4 * w + c] = _mm256_fmadd_ps(pj, x[c], a[4 * w + c]);
      }
    }
    for (int c = 0; c < 4 * width; ++c) _mm256_storeu_ps(out + b0 * blocks::kQuantBlockElements + 8 * c, a[c]);
  }
}

// The keys' scores and the values' weighted sum of one (layer, KV head), reading each part as stored.
void key_scores(const CpuKVStorage& kv, int layer, int kv_head, const float* q, int m, float scale, float* out) {
  const int d = kv.head_dim();
  switch (kv.type().keys) {
    case CacheType::F32: return scores(q, kv.f32(layer, kv_head, KVPart::Keys), m, d, scale, out);
    case CacheType::F16: return scores(q, kv.f16(layer, kv_head, KVPart::Keys), m, d, scale, out);
    case CacheType::BF16: return scores(q, kv.bf16(layer, kv_head, KVPart::Keys), m, d, scale, out);
    case CacheType::Q8_0: return block_scores<Q8_0Block>(q, kv.blocks(layer, kv_head, KVPart::Keys), m, d, scale, out);
    case CacheType::Q4_0: return block_scores<Q4_0Block>(q, kv.blocks(layer, kv_head, KVPart::Keys), m, d, scale, out);
    case CacheType::Q4_1: return block_scores<Q4_1Block>(q, kv.blocks(layer, kv_head, KVPart::Keys), m, d, scale, out);
    case CacheType::KIVI2:
    case CacheType::KIVI4: return kv.kivi(layer, kv_head, KVPart::Keys).scores(q, scale, out);
  }
}

void value_sum(const CpuKVStorage& kv, int layer, int kv_head, const float* p, int m, float* out) {
  const int d = kv.head_dim();
  switch (kv.type().values) {
    case CacheType::F32: return weighted_sum(p, kv.f32(layer, kv_head, KVPart::Values), m, d, out);
    case CacheType::F16: return weighted_sum(p, kv.f16(layer, kv_head, KVPart::Values), m, d, out);
    case CacheType::BF16: return weighted_sum(p, kv.bf16(layer, kv_head, KVPart::Values), m, d, out);
    case CacheType::Q8_0: return block_weighted_sum<Q8_0Block>(p, kv.blocks(layer, kv_head, KVPart::Values), m, d, out);
    case CacheType::Q4_0: return block_weighted_sum<Q4_0Block>(p, kv.blocks(layer, kv_head, KVPart::Values), m, d, out);
    case CacheType::Q4_1: return block_weighted_sum<Q4_1Block>(p, kv.blocks(layer, kv_head, KVPart::Values), m, d, out);
    case CacheType::KIVI2:
    case CacheType::KIVI4: return kv.kivi(layer, kv_head, KVPart::Values).weighted_sum(p, out);
  }
}

// The first of a query's `visible` keys (ordered by position) inside its sliding window: keys at positions
// <= position - window are out of it (transformers' sliding_window_overlay: kv > q - window). 0 without a window.
template <typename Positions>
int first_in_window(const Positions& positions, int visible, int32_t query_position, int window) {
  if (window <= 0) return 0;
  return static_cast<int>(std::upper_bound(positions.begin(), positions.begin() + visible, query_position - window) -
                          positions.begin());
}

// Softmax of row[first, end) after Gemma 2's soft-cap (cap 0: none); the keys before `first` get probability 0.
// A finite `sink` (gpt-oss) joins the denominator as one more logit with no value, as transformers concatenates
// it to the scores and drops its column after the softmax. Returns the log-sum-exp of the capped scores and the
// sink, so that every probability is exp(score - lse).
float capped_softmax(float* row, int first, int end, float cap, float sink) {
  if (cap > 0.0f)
    for (int j = first; j < end; ++j) row[j] = softcap(row[j], cap);
  std::fill(row, row + std::min(first, end), 0.0f);
  const float lse = softmax_lse(row + first, end - first);
  if (!std::isfinite(sink)) return lse;
  const float total = with_sink(lse, sink);
  const float keys_share = std::exp(lse - total);
  for (int j = first; j < end; ++j) row[j] *= keys_share;
  return total;
}

float sink_of(const AttentionCall& call, int head) { return call.sinks ? call.sinks[head] : -INFINITY; }

// Decode: one query per head; heads run in parallel over the rows as stored.
void decode(const CpuKVStorage& kv, const AttentionCall& call, Reductions& reductions, RowDelivery& delivery,
            float* out) {
  const int d = kv.head_dim();
  const int group = call.n_heads / kv.n_kv_heads();
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
#pragma omp parallel for schedule(static)
  for (int h = 0; h < call.n_heads; ++h) {
    const int g = h / group;
    const int m = reductions.side.n_keys[g];
    const float* qh = call.q + static_cast<std::size_t>(h) * d;
    // Rotated keys are H k: (H q) . (H k) = q . k.
    std::vector<float> rotated_q;
    if (const int block = kv.rotation_block(KVPart::Keys)) {
      rotated_q.assign(qh, qh + d);
      hadamard_rotate(rotated_q.data(), d, block);
      qh = rotated_q.data();
    }
    std::vector<float> p(m);
    key_scores(kv, call.layer, g, qh, m, scale, p.data());
    const int first = first_in_window(kv.positions(call.layer, g), m, call.query_positions[0], call.sliding_window);
    const float lse = capped_softmax(p.data(), first, m, call.logit_softcap, sink_of(call, h));
    float* oh = out + static_cast<std::size_t>(h) * d;
    value_sum(kv, call.layer, g, p.data(), m, oh);
    // Rotated values are H v: sum_j p_j H v_j = H sum_j p_j v_j, rotated back once (H H = I).
    if (const int block = kv.rotation_block(KVPart::Values)) hadamard_rotate(oh, d, block);
    reductions.allocate(h, m);
    reductions.add_row(h, 0, p.data(), m, m, lse);
    delivery.deliver(h, 0, 1, m, p.data());
  }
}

// Prefill: heads run in parallel, each with single-threaded BLAS on blocks of queries. Half and block-format
// rows are widened (dequantized) once per head and call into float scratch, which BLAS needs.
void prefill(const CpuKVStorage& kv, const AttentionCall& call, Reductions& reductions, RowDelivery& delivery,
             float* out) {
  const int d = kv.head_dim();
  const int group = call.n_heads / kv.n_kv_heads();
  const int q_stride = call.n_heads * d;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int n = call.n;
#pragma omp parallel
  {
    std::vector<float> scores, wide_keys, wide_values, rotated_q;
#pragma omp for schedule(dynamic, 1)
    for (int h = 0; h < call.n_heads; ++h) {
      const int g = h / group;
      const int m = reductions.side.n_keys[g];
      const auto positions = kv.positions(call.layer, g);
      // The rows in their stored frame (rotated or not); a rotated part is met by a rotated query (keys) or an
      // output rotated back (values), as in decode.
      auto stored = [&](KVPart part, std::vector<float>& wide) {
        if (kv.type().of(part) == CacheType::F32) return kv.f32(call.layer, g, part);
        wide.resize(static_cast<std::size_t>(m) * d);
        kv.read_stored_rows(call.layer, g, part, 0, m, wide.data());
        return static_cast<const float*>(wide.data());
      };
      const float* keys = stored(KVPart::Keys, wide_keys);
      const float* values = stored(KVPart::Values, wide_values);
      const float* q = call.q + static_cast<std::size_t>(h) * d;
      int q_step = q_stride;
      if (const int block = kv.rotation_block(KVPart::Keys)) {
        rotated_q.resize(static_cast<std::size_t>(n) * d);
        for (int i = 0; i < n; ++i)
          std::copy_n(q + static_cast<std::size_t>(i) * q_stride, d,
                      rotated_q.data() + static_cast<std::size_t>(i) * d);
        hadamard_rotate_rows(rotated_q.data(), n, d, d, block);
        q = rotated_q.data();
        q_step = d;
      }
      reductions.allocate(h, m);
      for (int i0 = 0; i0 < n; i0 += kQueryBlock) {
        const int rows = std::min(kQueryBlock, n - i0);
        // Entries are ordered by position, so the keys any query of this block may see form a prefix.
        const int m_block = static_cast<int>(
            std::upper_bound(positions.begin(), positions.begin() + m, call.query_positions[i0 + rows - 1]) -
            positions.begin());
        scores.assign(static_cast<std::size_t>(rows) * m_block, 0.0f);
        if (m_block > 0)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, m_block, d, scale,
                      q + static_cast<std::size_t>(i0) * q_step, q_step, keys, d, 0.0f, scores.data(), m_block);
        for (int r = 0; r < rows; ++r) {
          float* row = scores.data() + static_cast<std::size_t>(r) * m_block;
          const int visible = static_cast<int>(
              std::upper_bound(positions.begin(), positions.begin() + m_block, call.query_positions[i0 + r]) -
              positions.begin());
          const int first = first_in_window(positions, visible, call.query_positions[i0 + r], call.sliding_window);
          const float lse = capped_softmax(row, first, visible, call.logit_softcap, sink_of(call, h));
          std::fill(row + std::max(first, visible), row + m_block, 0.0f);
          reductions.add_row(h, i0 + r, row, m_block, m, lse);
        }
        delivery.deliver(h, i0, rows, m_block, scores.data());
        float* o_block = out + static_cast<std::size_t>(i0) * q_stride + static_cast<std::size_t>(h) * d;
        if (m_block > 0) {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, m_block, 1.0f, scores.data(), m_block, values,
                      d, 0.0f, o_block, q_stride);
          if (const int block = kv.rotation_block(KVPart::Values))
            hadamard_rotate_rows(o_block, rows, q_stride, d, block);
        } else
          for (int r = 0; r < rows; ++r) std::fill_n(o_block + static_cast<std::size_t>(r) * q_stride, d, 0.0f);
      }
    }
  }
}

}  // namespace

void attention(const CpuKVStorage& kv, const AttentionCall& call, const AttentionRequest& request,
               AttentionRowSink* rows, AttentionSideOutputs& side, float* out) {
  const int n_kv = kv.n_kv_heads();
  side.n_keys.resize(n_kv);
  for (int g = 0; g < n_kv; ++g) side.n_keys[g] = kv.size(call.layer, g);
  side.window = request.window > 0 ? std::min(request.window, call.n) : 0;
  const auto heads = static_cast<std::size_t>(call.n_heads);
  if (request.column_sums) side.column_sums.resize(heads);
  if (request.window_sums) side.window_sums.resize(heads);
  if (request.window_rows) side.window_rows.resize(heads);
  if (request.last_row) side.last_row.resize(heads);
  if (request.log_sum_exp) side.log_sum_exp.resize(heads);
  Reductions reductions{request, side, call.n};
  RowDelivery delivery(request.rows ? rows : nullptr);

  if (call.n == 1) {
    decode(kv, call, reductions, delivery, out);
  } else {
    prefill(kv, call, reductions, delivery, out);
  }
  delivery.rethrow();
}

}  // namespace kvscope::kernels::cpu
