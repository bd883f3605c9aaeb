#include "kernels/cpu/kivi_part.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/common/float16.h"
#include "kernels/common/kivi_math.h"
#include "kernels/error.h"

namespace kvscope::kernels::cpu {

namespace {

constexpr int kChunk = kivi::kChunk;  // channels a packed chunk of codes holds
using kivi::code_of;
using kivi::Range;
using kivi::range_of;

void pack(const uint8_t* codes, int d, int bits, uint8_t* out) {
  for (int byte = 0; byte < kivi::code_row_bytes(d, bits); ++byte)
    out[byte] = kivi::packed_byte(byte, bits, [codes](int c) { return codes[c]; });
}

void unpack(const uint8_t* in, int d, int bits, uint8_t* codes) {
  for (int c = 0; c < d; ++c) codes[c] = kivi::code_at(in, c, bits);
}

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
void store_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, sizeof v); }

// Keys: D scales, D zero points, then n code rows. x' = Q s + z; Q s is exact in float (4 + 11 bits), so fusing
// the multiply-add cannot change a value.
void write_key_group(const float* rows, std::size_t n, const KiviLayout& l, uint8_t* out) {
  const int d = l.head_dim;
  std::vector<Range> ranges(d);
  for (int c = 0; c < d; ++c) {
    ranges[c] = range_of(rows + c, static_cast<int>(n), d, l.bits);
    store_u16(out + 2 * c, ranges[c].scale_bits);
    store_u16(out + 2 * (d + c), ranges[c].zero_bits);
  }
  std::vector<uint8_t> codes(d);
  uint8_t* code_rows = out + l.key_group_meta_bytes();
  for (std::size_t j = 0; j < n; ++j) {
    for (int c = 0; c < d; ++c) codes[c] = code_of(rows[j * d + c], ranges[c], l.bits);
    pack(codes.data(), d, l.bits, code_rows + j * l.code_row_bytes());
  }
}

void read_key_group_rows(const uint8_t* group, std::size_t first, std::size_t count, const KiviLayout& l, float* out) {
  const int d = l.head_dim;
  std::vector<float> scale(d), zero(d);
  for (int c = 0; c < d; ++c) {
    scale[c] = half_to_float(load_u16(group + 2 * c));
    zero[c] = half_to_float(load_u16(group + 2 * (d + c)));
  }
  std::vector<uint8_t> codes(d);
  for (std::size_t j = 0; j < count; ++j) {
    unpack(group + l.key_group_meta_bytes() + (first + j) * l.code_row_bytes(), d, l.bits, codes.data());
    for (int c = 0; c < d; ++c) out[j * d + c] = static_cast<float>(codes[c]) * scale[c] + zero[c];
  }
}

// Values: D / G scales, D / G zero points, then the code row.
void write_value_row(const float* row, const KiviLayout& l, uint8_t* out) {
  const int d = l.head_dim, g = l.group, n_groups = d / g;
  std::vector<uint8_t> codes(d);
  for (int k = 0; k < n_groups; ++k) {
    const Range r = range_of(row + k * g, g, 1, l.bits);
    store_u16(out + 2 * k, r.scale_bits);
    store_u16(out + 2 * (n_groups + k), r.zero_bits);
    for (int c = k * g; c < (k + 1) * g; ++c) codes[c] = code_of(row[c], r, l.bits);
  }
  pack(codes.data(), d, l.bits, out + 4 * n_groups);
}

void read_value_row(const uint8_t* in, const KiviLayout& l, float* out) {
  const int d = l.head_dim, g = l.group, n_groups = d / g;
  std::vector<uint8_t> codes(d);
  unpack(in + 4 * n_groups, d, l.bits, codes.data());
  for (int c = 0; c < d; ++c) {
    const int k = c / g;
    out[c] = static_cast<float>(codes[c]) * half_to_float(load_u16(in + 2 * k)) +
             half_to_float(load_u16(in + 2 * (n_groups + k)));
  }
}

// Grows a vector's capacity by a quarter at least, so that decode appends do not reallocate every step and a
// doubling does not leave half the allocation unused.
template <typename T>
void make_room(std::vector<T>& v, std::size_t extra) {
  if (v.size() + extra <= v.capacity()) return;
  v.reserve(std::max(v.size() + extra, v.size() + v.size() / 4 + 64));
}

template <typename T>
void shrink_if_slack(std::vector<T>& v) {
  if (v.capacity() - v.size() <= v.capacity() / 4) return;
  std::vector<T> fresh;
  fresh.reserve(v.size());
  fresh.assign(v.begin(), v.end());
  v.swap(fresh);
}

// One chunk of 32 codes widened to floats in four registers, channels 8c..8c+7 in x[c].
template <int Bits>
inline void widen_codes(const uint8_t* codes, __m256 x[4]) {
  if constexpr (Bits == 2) {
    const __m256i w = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes)));
    const __m256i mask = _mm256_set1_epi32(3);
    x[0] = _mm256_cvtepi32_ps(_mm256_and_si256(w, mask));
    x[1] = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(w, 2), mask));
    x[2] = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(w, 4), mask));
    x[3] = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(w, 6), mask));
  } else {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(raw, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), mask);
    x[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
    x[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
    x[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
    x[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
  }
}

inline float horizontal_sum(__m256 a) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  return _mm_cvtss_f32(lo);
}

inline __m256 load_halves8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// sum_c w[c] * code[c] over one code row.
template <int Bits>
inline float code_dot(const float* w, const uint8_t* codes, int d) {
  __m256 a[4], x[4];
  for (__m256& r : a) r = _mm256_setzero_ps();
  for (int c0 = 0; c0 < d; c0 += kChunk, codes += kChunk * Bits / 8) {
    widen_codes<Bits>(codes, x);
    for (int c = 0; c < 4; ++c) a[c] = _mm256_fmadd_ps(_mm256_loadu_ps(w + c0 + 8 * c), x[c], a[c]);
  }
  return horizontal_sum(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
}

inline float float_dot(const float* a, const float* b, int d) {
  __m256 acc = _mm256_setzero_ps();
  for (int t = 0; t < d; t += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + t), _mm256_loadu_ps(b + t), acc);
  return horizontal_sum(acc);
}

// Keys: per group, q . k_j = sum_c (q_c s_c) Q_jc + sum_c q_c z_c, so each group costs D products once and each
// entry one dot product of codes; four entries at a time keep four independent FMA chains in flight and share
// one horizontal reduction.
template <int Bits>
void key_scores(const std::vector<uint8_t>& packed, const std::vector<uint16_t>& group_sizes, const KiviLayout& l,
                const float* q, float scale, float* out) {
  const int d = l.head_dim;
  const std::size_t code_row = l.code_row_bytes();
  std::vector<float> weights(d);
  const uint8_t* group = packed.data();
  for (uint16_t n : group_sizes) {
    __m256 zero_sum = _mm256_setzero_ps();
    for (int c = 0; c < d; c += 8) {
      const __m256 qc = _mm256_loadu_ps(q + c);
      _mm256_storeu_ps(weights.data() + c, _mm256_mul_ps(qc, load_halves8(group + 2 * c)));
      zero_sum = _mm256_fmadd_ps(qc, load_halves8(group + 2 * (d + c)), zero_sum);
    }
    const float offset = horizontal_sum(zero_sum);
    const __m128 offset4 = _mm_set1_ps(offset), scale4 = _mm_set1_ps(scale);
    const uint8_t* codes = group + l.key_group_meta_bytes();
    int j = 0;
    for (; j + 4 <= n; j += 4, codes += 4 * code_row, out += 4) {
      __m256 a[4], x[4];
      for (__m256& r : a) r = _mm256_setzero_ps();
      for (int c0 = 0; c0 < d; c0 += kChunk) {
        const std::size_t at = static_cast<std::size_t>(c0) * Bits / 8;
        const __m256 w0 = _mm256_loadu_ps(weights.data() + c0), w1 = _mm256_loadu_ps(weights.data() + c0 + 8);
        const __m256 w2 = _mm256_loadu_ps(weights.data() + c0 + 16), w3 = _mm256_loadu_ps(weights.data() + c0 + 24);
        for (int r = 0; r < 4; ++r) {
          widen_codes<Bits>(codes + r * code_row + at, x);
          a[r] = _mm256_fmadd_ps(w0, x[0], a[r]);
          a[r] = _mm256_fmadd_ps(w1, x[1], a[r]);
          a[r] = _mm256_fmadd_ps(w2, x[2], a[r]);
          a[r] = _mm256_fmadd_ps(w3, x[3], a[r]);
        }
      }
      const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
      const __m128 sums = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
      _mm_storeu_ps(out, _mm_mul_ps(_mm_add_ps(sums, offset4), scale4));
    }
    for (; j < n; ++j, codes += code_row) *out++ = (offset + code_dot<Bits>(weights.data(), codes, d)) * scale;
    group = codes;
  }
}

// Values: out_c = sum_j (p_j s_jk) Q_jc + sum_j p_j z_jk for channel c of group k, so a row costs one product
// per group and one FMA per eight channels; 64 output channels at a time stay in registers across all rows.
template <int Bits>
void value_sum(const std::vector<uint8_t>& packed, std::size_t rows, const KiviLayout& l, const float* p, float* out) {
  const int d = l.head_dim, g = l.group, n_groups = d / g;
  const std::size_t row_bytes = l.value_row_bytes();
  const int chunk_bytes = kChunk * Bits / 8;
  std::vector<double> zero_sums(n_groups, 0.0);
  std::vector<float> weighted(n_groups);
  for (int c0 = 0; c0 < d; c0 += 2 * kChunk) {
    const int chunks = std::min(2, (d - c0) / kChunk);
    __m256 a[8], x[4];
    for (__m256& r : a) r = _mm256_setzero_ps();
    for (std::size_t j = 0; j < rows; ++j) {
      const uint8_t* row = packed.data() + j * row_bytes;
      for (int k = 0; k < n_groups; ++k) weighted[k] = p[j] * _cvtsh_ss(load_u16(row + 2 * k));
      if (c0 == 0)
        for (int k = 0; k < n_groups; ++k) zero_sums[k] += p[j] * _cvtsh_ss(load_u16(row + 2 * (n_groups + k)));
      for (int w = 0; w < chunks; ++w) {
        widen_codes<Bits>(row + 4 * n_groups + (c0 / kChunk + w) * chunk_bytes, x);
        for (int c = 0; c < 4; ++c)
          a[4 * w + c] = _mm256_fmadd_ps(_mm256_set1_ps(weighted[(c0 + w * kChunk + 8 * c) / g]), x[c], a[4 * w + c]);
      }
    }
    for (int c = 0; c < 4 * chunks; ++c) _mm256_storeu_ps(out + c0 + 8 * c, a[c]);
  }
  for (int c = 0; c < d; ++c) out[c] += static_cast<float>(zero_sums[c / g]);
}

}  // namespace

void KiviPart::quantize_onto(const float* rows, std::size_t n) {
  if (layout_.per_channel) {
    const std::size_t bytes = layout_.key_group_meta_bytes() + n * layout_.code_row_bytes();
    make_room(packed_, bytes);
    const std::size_t at = packed_.size();
    packed_.resize(at + bytes);
    write_key_group(rows, n, layout_, packed_.data() + at);
    group_sizes_.push_back(static_cast<uint16_t>(n));
  } else {
    const std::size_t row_bytes = layout_.value_row_bytes();
    make_room(packed_, n * row_bytes);
    const std::size_t at = packed_.size();
    packed_.resize(at + n * row_bytes);
    for (std::size_t j = 0; j < n; ++j)
      write_value_row(rows + j * layout_.head_dim, layout_, packed_.data() + at + j * row_bytes);
  }
  quantized_ += n;
}

void KiviPart::append(const float* rows, std::size_t stride, int n, StorageError* error) {
  const std::size_t d = layout_.head_dim, g = layout_.group, r = layout_.residual;
  const std::size_t held = residual_rows(), total = held + n;
  // The oldest `ready` of the residual and the new rows leave full precision.
  std::size_t ready = 0;
  if (layout_.per_channel)
    while (total - ready >= r + g) ready += g;
  else
    ready = total > r ? total - r : 0;
  auto row_at = [&](std::size_t i) { return i < held ? residual_.data() + i * d : rows + (i - held) * stride; };
  if (ready > 0) {
    std::vector<float> oldest(ready * d);
    for (std::size_t i = 0; i < ready; ++i) std::copy_n(row_at(i), d, oldest.data() + i * d);
    const std::size_t before = quantized_;
    if (layout_.per_channel)
      for (std::size_t i = 0; i < ready; i += g) quantize_onto(oldest.data() + i * d, g);
    else
      quantize_onto(oldest.data(), ready);
    if (error) {
      std::vector<float> stored(ready * d);
      load(before, ready, stored.data());
      error->add(oldest.data(), stored.data(), ready * d);
    }
  }
  const std::size_t dropped = std::min(ready, held);
  residual_.erase(residual_.begin(), residual_.begin() + static_cast<std::ptrdiff_t>(dropped * d));
  make_room(residual_, (total - ready - (held - dropped)) * d);
  for (std::size_t i = std::max(ready, held); i < total; ++i) {
    const float* row = row_at(i);
    residual_.insert(residual_.end(), row, row + d);
  }
}

std::vector<std::pair<std::size_t, std::size_t>> KiviPart::key_group_starts() const {
  std::vector<std::pair<std::size_t, std::size_t>> starts;
  starts.reserve(group_sizes_.size());
  std::size_t entry = 0, offset = 0;
  for (uint16_t n : group_sizes_) {
    starts.emplace_back(entry, offset);
    entry += n;
    offset += layout_.key_group_meta_bytes() + n * layout_.code_row_bytes();
  }
  return starts;
}

void KiviPart::load(std::size_t first, std::size_t count, float* out) const {
  const std::size_t d = layout_.head_dim, end = first + count;
  if (first < quantized_) {
    if (layout_.per_channel) {
      const auto starts = key_group_starts();
      for (std::size_t k = 0; k < starts.size(); ++k) {
        const std::size_t begin = starts[k].first, stop = begin + group_sizes_[k];
        const std::size_t lo = std::max(begin, first), hi = std::min(stop, end);
        if (lo < hi) read_key_group_rows(packed_.data() + starts[k].second, lo - begin, hi - lo, layout_, out + (lo - first) * d);
      }
    } else {
      for (std::size_t i = first; i < std::min(end, quantized_); ++i)
        read_value_row(packed_.data() + i * layout_.value_row_bytes(), layout_, out + (i - first) * d);
    }
  }
  for (std::size_t i = std::max(first, quantized_); i < end; ++i)
    std::copy_n(residual_.data() + (i - quantized_) * d, d, out + (i - first) * d);
}

void KiviPart::store(std::span<const std::pair<int32_t, std::vector<float>>> rows, StorageError* error) {
  const std::size_t d = layout_.head_dim;
  std::vector<char> group_touched(group_sizes_.size(), 0);
  const auto starts = layout_.per_channel ? key_group_starts() : decltype(key_group_starts()){};
  auto group_of = [&](std::size_t entry) {
    return static_cast<std::size_t>(
        std::upper_bound(starts.begin(), starts.end(), entry, [](std::size_t e, const auto& s) { return e < s.first; }) -
        starts.begin() - 1);
  };
  for (const auto& [index, row] : rows) {
    const auto i = static_cast<std::size_t>(index);
    if (i >= quantized_)
      std::copy_n(row.data(), d, residual_.data() + (i - quantized_) * d);
    else if (!layout_.per_channel)
      write_value_row(row.data(), layout_, packed_.data() + i * layout_.value_row_bytes());
    else
      group_touched[group_of(i)] = 1;
  }
  // A key group with a merged entry is dequantized, given the new rows and quantized again whole.
  for (std::size_t k = 0; k < group_touched.size(); ++k) {
    if (!group_touched[k]) continue;
    const auto [begin, offset] = starts[k];
    const std::size_t n = group_sizes_[k];
    std::vector<float> group_rows(n * d);
    read_key_group_rows(packed_.data() + offset, 0, n, layout_, group_rows.data());
    for (const auto& [index, row] : rows) {
      const auto i = static_cast<std::size_t>(index);
      if (i >= begin && i < begin + n) std::copy_n(row.data(), d, group_rows.data() + (i - begin) * d);
    }
    write_key_group(group_rows.data(), n, layout_, packed_.data() + offset);
  }
  if (error) {
    std::vector<float> stored(d);
    for (const auto& [index, row] : rows) {
      load(static_cast<std::size_t>(index), 1, stored.data());
      error->add(row.data(), stored.data(), d);
    }
  }
}

void KiviPart::compact(std::span<const int32_t> keep) {
  const std::size_t d = layout_.head_dim;
  auto it = keep.begin();
  std::size_t kept_quantized = 0;
  if (layout_.per_channel) {
    const auto starts = key_group_starts();
    const std::size_t meta = layout_.key_group_meta_bytes(), code_row = layout_.code_row_bytes();
    std::size_t write = 0;
    std::vector<uint16_t> sizes;
    for (std::size_t k = 0; k < starts.size(); ++k) {
      const auto [begin, offset] = starts[k];
      const std::size_t stop = begin + group_sizes_[k];
      // Every move goes down (write <= offset), in order, so nothing is overwritten before it is read; a group
      // without survivors is not advanced over, freed with its scales.
      std::memmove(packed_.data() + write, packed_.data() + offset, meta);
      uint16_t survivors = 0;
      std::size_t group_write = write + meta;
      for (; it != keep.end() && static_cast<std::size_t>(*it) < stop; ++it, ++survivors) {
        const std::size_t from = offset + meta + (static_cast<std::size_t>(*it) - begin) * code_row;
        std::memmove(packed_.data() + group_write, packed_.data() + from, code_row);
        group_write += code_row;
      }
      if (survivors == 0) continue;
      write = group_write;
      sizes.push_back(survivors);
      kept_quantized += survivors;
    }
    packed_.resize(write);
    group_sizes_.swap(sizes);
  } else {
    const std::size_t row_bytes = layout_.value_row_bytes();
    for (; it != keep.end() && static_cast<std::size_t>(*it) < quantized_; ++it, ++kept_quantized)
      std::memmove(packed_.data() + kept_quantized * row_bytes, packed_.data() + static_cast<std::size_t>(*it) * row_bytes,
                   row_bytes);
    packed_.resize(kept_quantized * row_bytes);
  }
  std::size_t kept_residual = 0;
  for (; it != keep.end(); ++it, ++kept_residual)
    std::copy_n(residual_.data() + (static_cast<std::size_t>(*it) - quantized_) * d, d, residual_.data() + kept_residual * d);
  residual_.resize(kept_residual * d);
  quantized_ = kept_quantized;
}

std::size_t kivi_paged_bytes(const KiviLayout& layout, std::size_t groups, std::size_t quantized,
                             std::size_t residual_rows, int page_tokens) {
  const auto n = static_cast<std::size_t>(page_tokens), d = static_cast<std::size_t>(layout.head_dim);
  const std::size_t residual = pages_for(residual_rows, n) * n * d * sizeof(float);
  if (!layout.per_channel) return pages_for(quantized, n) * n * layout.value_row_bytes() + residual;
  const auto groups_per_page = n / static_cast<std::size_t>(layout.group);
  const std::size_t group_bytes = layout.key_group_meta_bytes() + layout.group * layout.code_row_bytes();
  return pages_for(groups, groups_per_page) * groups_per_page * group_bytes + residual;
}

std::size_t KiviPart::paged_bytes(int page_tokens) const {
  return kivi_paged_bytes(layout_, group_sizes_.size(), quantized_, residual_rows(), page_tokens);
}

void KiviPart::assign(std::vector<uint8_t> packed, std::vector<uint16_t> group_sizes, std::vector<float> residual,
                      std::size_t quantized) {
  packed_ = std::move(packed);
  group_sizes_ = std::move(group_sizes);
  residual_ = std::move(residual);
  quantized_ = quantized;
}

void KiviPart::reserve(std::size_t entries) {
  const std::size_t g = layout_.group, r = layout_.residual;
  if (layout_.per_channel) {
    const std::size_t residual = entries < r + g ? entries : r + (entries - r) % g;
    packed_.reserve((entries - residual) / g * (layout_.key_group_meta_bytes() + g * layout_.code_row_bytes()));
    residual_.reserve(residual * layout_.head_dim);
  } else {
    const std::size_t residual = std::min(entries, r);
    packed_.reserve((entries - residual) * layout_.value_row_bytes());
    residual_.reserve(residual * layout_.head_dim);
  }
}

void KiviPart::release_slack() {
  shrink_if_slack(packed_);
  shrink_if_slack(residual_);
}

void KiviPart::scores(const float* q, float scale, float* out) const {
  if (!layout_.per_channel) throw Error("KIVI scores: this part holds values (per token), not keys");
  if (layout_.bits == 2)
    key_scores<2>(packed_, group_sizes_, layout_, q, scale, out);
  else
    key_scores<4>(packed_, group_sizes_, layout_, q, scale, out);
  const int d = layout_.head_dim;
  for (std::size_t j = 0; j < residual_rows(); ++j)
    out[quantized_ + j] = float_dot(q, residual_.data() + j * d, d) * scale;
}

void KiviPart::weighted_sum(const float* p, float* out) const {
  if (layout_.per_channel) throw Error("KIVI weighted_sum: this part holds keys (per channel), not values");
  if (layout_.bits == 2)
    value_sum<2>(packed_, quantized_, layout_, p, out);
  else
    value_sum<4>(packed_, quantized_, layout_, p, out);
  const int d = layout_.head_dim;
  for (std::size_t j = 0; j < residual_rows(); ++j) {
    const __m256 pj = _mm256_set1_ps(p[quantized_ + j]);
    const float* row = residual_.data() + j * d;
    for (int t = 0; t < d; t += 8)
      _mm256_storeu_ps(out + t, _mm256_fmadd_ps(pj, _mm256_loadu_ps(row + t), _mm256_loadu_ps(out + t)));
  }
}

}  // namespace kvscope::kernels::cpu
