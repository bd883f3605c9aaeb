#pragma once
// The KV cache: per (layer, KV head) a ragged list of entries, each with its post-RoPE key, value,
// original position, accumulated score and merge count. Shapes: [layers][kv_heads][entries][head_dim].
// Entries stay ordered by original position: appends go to the end and edits keep relative order.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "core/cache/cache_edit.h"
#include "kernels/backend.h"

namespace kvscope::cache {

// The K/V rows live in the backend's storage (kernels/kv_storage.h: host memory on the CPU, device memory on
// CUDA, float32 or half); this class keeps what policies read and write on the host (merge counts, scores),
// validates edits as a whole and accounts for memory. keys()/values() give policies float rows: the storage's own
// rows when they are host float32, otherwise a host copy made when first asked for after the rows changed (at an
// eviction, not on every decode step) and extended row by row as tokens are appended.
class KVCache {
 public:
  // A cache on `backend`'s storage; without one, the process-wide CPU backend's.
  KVCache(int n_layers, int n_kv_heads, int head_dim, kernels::KVCacheTypes type = kernels::CacheType::F32,
          kernels::Backend* backend = nullptr);

  int n_layers() const { return n_layers_; }
  int n_kv_heads() const { return n_kv_heads_; }
  int head_dim() const { return head_dim_; }
  kernels::KVCacheTypes type() const { return storage_->type(); }
  const kernels::KVStorage& storage() const { return *storage_; }

  int size(int layer, int kv_head) const { return storage_->size(layer, kv_head); }
  std::span<const float> keys(int layer, int kv_head) const { return rows(layer, kv_head, kernels::KVPart::Keys); }      // [size][head_dim]
  std::span<const float> values(int layer, int kv_head) const { return rows(layer, kv_head, kernels::KVPart::Values); }  // [size][head_dim]
  const float* key(int layer, int kv_head, int entry) const;
  const float* value(int layer, int kv_head, int entry) const;
  std::span<const int32_t> positions(int layer, int kv_head) const { return storage_->positions(layer, kv_head); }
  std::span<const int32_t> merge_counts(int layer, int kv_head) const { return at(layer, kv_head).merge_counts; }
  // A per-entry accumulator a policy may keep (H2O's accumulated attention). Merges add up the scores.
  std::span<const float> scores(int layer, int kv_head) const { return at(layer, kv_head).scores; }
  std::span<float> mutable_scores(int layer, int kv_head) { return at(layer, kv_head).scores; }

  // Appends n tokens to every KV head of a layer. k, v: [n][n_kv_heads][head_dim], in the backend's memory.
  void append(int layer, const float* k, const float* v, int n, const int32_t* positions);

  // Checks the edit (throws Error describing the first problem) and then applies it.
  void apply(const CacheEdit& edit);
  static void validate(const HeadEdit& edit, int current_size, int n_layers, int n_kv_heads);

  // Memory the cache holds now (allocated K/V bytes), the most it ever held, and per layer.
  std::size_t bytes() const { return bytes_; }
  std::size_t peak_bytes() const { return peak_bytes_; }
  std::size_t layer_bytes(int layer) const { return storage_->layer_bytes(layer); }
  std::size_t layer_peak_bytes(int layer) const { return layer_peak_bytes_[layer]; }
  // Bytes the entries themselves take (K and V rows as stored: a block format's payload and scales, KIVI's
  // payload, scales, zero points and full-precision residual), without allocation slack.
  std::size_t entry_bytes() const;
  // Bytes the same entries would take in a full (uncompressed) cache of seq_len tokens.
  std::size_t full_cache_bytes(int seq_len) const;
  int total_entries() const;
  // The entries in pages of page_tokens tokens per (layer, KV head), as a paged serving cache would allocate
  // them (kernels::check_cache_page): whole pages, the last of each head partly empty.
  std::size_t paged_bytes(int page_tokens) const;
  std::size_t layer_paged_bytes(int layer, int page_tokens) const;
  // From now on also follow the paged bytes at their largest (a post-prefill policy pages the whole prompt
  // before it compresses): in all and per layer, over every append and edit.
  void follow_paged_peak(int page_tokens);
  std::size_t paged_peak_bytes() const { return paged_peak_bytes_; }
  std::size_t layer_paged_peak_bytes(int layer) const { return layer_paged_peak_bytes_[layer]; }
  std::size_t layer_entry_bytes(int layer) const;

 private:
  struct HeadMeta {
    std::vector<int32_t> merge_counts;
    std::vector<float> scores;
  };
  // A float copy of one head's keys or values when the storage is not host float32; rows [0, valid) are current.
  struct RowCopy {
    std::vector<float> rows;
    int valid = 0;
  };
  HeadMeta& at(int layer, int kv_head) { return heads_[static_cast<std::size_t>(layer) * n_kv_heads_ + kv_head]; }
  const HeadMeta& at(int layer, int kv_head) const {
    return heads_[static_cast<std::size_t>(layer) * n_kv_heads_ + kv_head];
  }
  std::span<const float> rows(int layer, int kv_head, kernels::KVPart part) const;
  void apply_head(const HeadEdit& edit);
  // Counts the bytes of `layers` again (those an append or edit changed) and updates the totals and peaks.
  void update_bytes(std::span<const int> layers);

  int n_layers_, n_kv_heads_, head_dim_;
  std::unique_ptr<kernels::KVStorage> storage_;
  std::vector<HeadMeta> heads_;
  // [layer][kv_head][keys, values]; keys()/values() fill them lazily, under the mutex (the recorder reads
  // several heads from several threads).
  mutable std::vector<RowCopy> copies_;
  std::unique_ptr<std::mutex> copy_mutex_ = std::make_unique<std::mutex>();
  std::size_t bytes_ = 0, peak_bytes_ = 0;
  std::vector<std::size_t> layer_bytes_now_, layer_peak_bytes_;  // each layer's bytes as last counted, and at most
  int peak_page_tokens_ = 0;  // follow_paged_peak's page size; 0: not followed
  std::size_t paged_now_ = 0, paged_peak_bytes_ = 0;
  std::vector<std::size_t> layer_paged_now_, layer_paged_peak_bytes_;
};

}  // namespace kvscope::cache
