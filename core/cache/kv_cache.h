#pragma once
// The KV cache: per (layer, KV head) a ragged list of entries, each with its post-RoPE key, value,
// original position, accumulated score and merge count. Shapes: [layers][kv_heads][entries][head_dim].
// Entries stay ordered by original position: appends go to the end and edits keep relative order.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/cache/cache_edit.h"

namespace kvscope::cache {

class KVCache {
 public:
  KVCache(int n_layers, int n_kv_heads, int head_dim);

  int n_layers() const { return n_layers_; }
  int n_kv_heads() const { return n_kv_heads_; }
  int head_dim() const { return head_dim_; }

  int size(int layer, int kv_head) const { return static_cast<int>(at(layer, kv_head).positions.size()); }
  std::span<const float> keys(int layer, int kv_head) const { return at(layer, kv_head).keys; }      // [size][head_dim]
  std::span<const float> values(int layer, int kv_head) const { return at(layer, kv_head).values; }  // [size][head_dim]
  const float* key(int layer, int kv_head, int entry) const;
  const float* value(int layer, int kv_head, int entry) const;
  std::span<const int32_t> positions(int layer, int kv_head) const { return at(layer, kv_head).positions; }
  std::span<const int32_t> merge_counts(int layer, int kv_head) const { return at(layer, kv_head).merge_counts; }
  // A per-entry accumulator a policy may keep (H2O's accumulated attention). Merges add up the scores.
  std::span<const float> scores(int layer, int kv_head) const { return at(layer, kv_head).scores; }
  std::span<float> mutable_scores(int layer, int kv_head) { return at(layer, kv_head).scores; }

  // Appends n tokens to every KV head of a layer. k, v: [n][n_kv_heads][head_dim].
  void append(int layer, const float* k, const float* v, int n, const int32_t* positions);

  // Checks the edit (throws Error describing the first problem) and then applies it.
  void apply(const CacheEdit& edit);
  static void validate(const HeadEdit& edit, int current_size, int n_layers, int n_kv_heads);

  // Memory the cache holds now (allocated K/V bytes), the most it ever held, and per layer.
  std::size_t bytes() const { return bytes_; }
  std::size_t peak_bytes() const { return peak_bytes_; }
  std::size_t layer_bytes(int layer) const;
  std::size_t layer_peak_bytes(int layer) const { return layer_peak_bytes_[layer]; }
  // Bytes the entries themselves take (K and V rows), without allocation slack.
  std::size_t entry_bytes() const { return static_cast<std::size_t>(total_entries()) * head_dim_ * 2 * sizeof(float); }
  // Bytes the same entries would take in a full (uncompressed) cache of seq_len tokens.
  std::size_t full_cache_bytes(int seq_len) const;
  int total_entries() const;

 private:
  struct HeadEntries {
    std::vector<float> keys, values;
    std::vector<int32_t> positions;
    std::vector<int32_t> merge_counts;
    std::vector<float> scores;
  };
  HeadEntries& at(int layer, int kv_head) { return heads_[static_cast<std::size_t>(layer) * n_kv_heads_ + kv_head]; }
  const HeadEntries& at(int layer, int kv_head) const {
    return heads_[static_cast<std::size_t>(layer) * n_kv_heads_ + kv_head];
  }
  void apply_head(const HeadEdit& edit);
  void release_slack(HeadEntries& head);
  void reserve_for(HeadEntries& head, std::size_t entries);
  std::size_t head_bytes(const HeadEntries& head) const;
  void update_bytes();

  int n_layers_, n_kv_heads_, head_dim_;
  std::vector<HeadEntries> heads_;
  std::size_t bytes_ = 0, peak_bytes_ = 0;
  std::vector<std::size_t> layer_peak_bytes_;
};

}  // namespace kvscope::cache
