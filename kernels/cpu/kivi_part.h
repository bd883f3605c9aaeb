#pragma once
// One (layer, KV head)'s keys or values stored as KIVI stores them (Liu et al. 2024, "KIVI: A Tuning-Free
// Asymmetric 2bit Quantization for KV Cache", section 3): asymmetric min/max quantization to B bits over a
// group of values X,
//   z = min X,  s = (max X - min X) / (2^B - 1),  Q(x) = clamp(round((x - z) / s), 0, 2^B - 1),  x' = Q(x) s + z,
// with s and z stored as IEEE halves (and Q computed with the stored halves). Keys are quantized per channel: a
// group is G consecutive entries, one (s, z) per channel. Values are quantized per token: a group is G
// consecutive channels of one entry. The newest entries stay in full precision (float32, kvscope's reference),
// by one rule for both parts: after an append, the newest R entries are never quantized; values older than that
// are quantized one entry at a time, keys G entries at a time once G of them are older than the newest R
// (so R to R + G - 1 keys are in full precision). KIVI's Algorithm 1 flushes its key residual in whole chunks
// of R instead; this rule keeps the newest R tokens exact at every step.
//
// Eviction re-packs a key group in place: the survivors keep their codes and the group's (s, z), which still
// cover them, so eviction never changes a kept entry; the group's codes shrink to its survivors, and a group
// with none left is freed with its scales. A merge (KVMerger, D2O, CaM, a user merge) replaces rows: a value
// row is quantized again alone, a key group holding a merged entry is dequantized and quantized again whole
// (new min/max per channel). Code rows pack 32 channels at a time (head_dim a multiple of 32): 2 bits, byte b
// of a chunk holds channels b, b + 8, b + 16, b + 24 from its low bits up; 4 bits, byte b holds channel b (low
// nibble) and b + 16 (high).
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "kernels/kv_storage.h"

namespace kvscope::kernels::cpu {

struct KiviLayout {
  int bits = 2;      // B
  int group = 32;    // G
  int residual = 128;  // R
  int head_dim = 64;   // D
  bool per_channel = true;  // keys (groups of entries); values are per token (groups of channels)

  std::size_t code_row_bytes() const { return static_cast<std::size_t>(head_dim) * bits / 8; }
  // A key group: D half scales, D half zero points, then its entries' code rows.
  std::size_t key_group_meta_bytes() const { return static_cast<std::size_t>(head_dim) * 2 * sizeof(uint16_t); }
  // A value row: D / G half scales, D / G half zero points, then its code row.
  std::size_t value_row_bytes() const {
    return static_cast<std::size_t>(head_dim / group) * 2 * sizeof(uint16_t) + code_row_bytes();
  }
};

// KiviPart::paged_bytes of a part holding `groups` key groups (keys) or `quantized` rows (values) and
// `residual_rows` full-precision rows; the CUDA cache counts its pages with it too.
std::size_t kivi_paged_bytes(const KiviLayout& layout, std::size_t groups, std::size_t quantized,
                             std::size_t residual_rows, int page_tokens);

class KiviPart {
 public:
  explicit KiviPart(KiviLayout layout) : layout_(layout) {}

  const KiviLayout& layout() const { return layout_; }
  std::size_t size() const { return quantized_ + residual_rows(); }
  std::size_t quantized() const { return quantized_; }
  std::size_t residual_rows() const { return residual_.size() / layout_.head_dim; }

  // Appends n rows (row t at rows + t * stride floats), then quantizes what the residual rule says; the error of
  // the rows quantized now is added to `error` when given.
  void append(const float* rows, std::size_t stride, int n, StorageError* error = nullptr);
  // Rows [first, first + count) dequantized (full-precision rows copied).
  void load(std::size_t first, std::size_t count, float* out) const;
  // Replaces entries with new float rows (merge results), each entry once; the merged rows' error as stored is
  // added to `error` when given.
  void store(std::span<const std::pair<int32_t, std::vector<float>>> rows, StorageError* error = nullptr);
  // Keeps the entries `keep` (strictly increasing), in order.
  void compact(std::span<const int32_t> keep);

  // Payload, scales and zero points, and full-precision rows of the entries.
  std::size_t entry_bytes() const { return packed_.size() + residual_.size() * sizeof(float); }
  // In pages of N tokens (kv_storage.h, check_cache_page): key pages of N / G group slots (one per group, full or
  // partly evicted) or value pages of N quantized rows, and the float32 residual in pages of N rows.
  std::size_t paged_bytes(int page_tokens) const;
  std::size_t allocated_bytes() const { return packed_.capacity() + residual_.capacity() * sizeof(float); }
  void reserve(std::size_t entries);
  void release_slack();

  // The stored state itself: key groups or value rows in entry order, the keys' group sizes, the full-precision
  // rows after the quantized ones. The CUDA cache's host side (kernels/cuda/kivi_plan.h) reads and sets it to
  // run this class's merges on a head's bytes, and its reference test compares its bytes with these.
  const std::vector<uint8_t>& packed() const { return packed_; }
  const std::vector<uint16_t>& group_sizes() const { return group_sizes_; }
  const std::vector<float>& residual() const { return residual_; }
  void assign(std::vector<uint8_t> packed, std::vector<uint16_t> group_sizes, std::vector<float> residual,
              std::size_t quantized);

  // Attention over the entries as stored, no dequantized copy: out[j] = scale * q . k_j (keys), and
  // out = sum_j p[j] v_j (values).
  void scores(const float* q, float scale, float* out) const;
  void weighted_sum(const float* p, float* out) const;

 private:
  // Quantizes rows [n][D] (contiguous) onto the end of packed_: keys as one group, values row by row.
  void quantize_onto(const float* rows, std::size_t n);
  // Key groups as (first entry, byte offset) pairs, in order.
  std::vector<std::pair<std::size_t, std::size_t>> key_group_starts() const;

  KiviLayout layout_;
  std::vector<uint8_t> packed_;            // key groups or value rows, in entry order
  std::vector<uint16_t> group_sizes_;      // keys: entries of each group (G, fewer after an eviction)
  std::vector<float> residual_;            // the full-precision entries after the quantized ones
  std::size_t quantized_ = 0;
};

}  // namespace kvscope::kernels::cpu
