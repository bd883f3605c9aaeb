#pragma once
// Exact causal attention over one layer's device cache, with the side outputs the policies and the recorder
// read (the CUDA mirror of the CPU attention: per-row log-sum-exp, column sums over all queries and over the
// last-w window, the window's rows, the last row, every row for a recorded map). Query i attends to the
// entries of its KV head whose original position is <= its own; entries are ordered by position.
// Host reference: attention_reference.h (a direct O(n^2) loop). Device pointers throughout.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/cache_rows.h"
#include "kernels/cuda/kivi_tasks.h"

namespace kvscope::kernels::cuda {

// The heads kernels handle: one warp's lanes hold a query row, 32 keys per tile.
constexpr int kMaxAttentionHeadDim = 128;

struct AttentionShape {
  int n_queries = 0;
  int n_heads = 0;  // query heads; head h reads KV head h / (n_heads / n_kv_heads)
  int n_kv_heads = 0;
  int head_dim = 0;    // <= kMaxAttentionHeadDim
  float scale = 1.0f;  // 1/sqrt(head_dim)
};

// One layer's cache: KV head g's entry j lives at [g * capacity + j]. Keys and values are rows of key_type and
// value_type (kernels/common/cache_rows.h): float32 rows, or f16, bf16, q8_0, q4_0, q4_1 rows of
// stored_row_bytes(type, head_dim) bytes, which the kernels dequantize a tile at a time in shared memory (each
// thread one 32-value block), never into a copy of the cache. A KIVI cache (kivi_keys set; keys and values both
// KIVI) is read the same way through kivi_entry_value: each tile's entries from their key groups, value rows or
// float32 residual rows.
struct DeviceLayerCache {
  const void* keys = nullptr;          // [n_kv_heads][capacity][row], after RoPE
  const void* values = nullptr;        // [n_kv_heads][capacity][row]
  const int32_t* positions = nullptr;  // [n_kv_heads][capacity], increasing within a head
  const int32_t* lengths = nullptr;    // [n_kv_heads] entries in use
  int capacity = 0;
  int max_length = 0;  // the largest of lengths (sizes the grids)
  RowType key_type = RowType::F32, value_type = RowType::F32;
  // KIVI, keys and values both, when kivi_keys is set (keys, values, key_type and value_type are then unused).
  const DeviceKiviHead* kivi_keys = nullptr;    // [n_kv_heads]
  const DeviceKiviHead* kivi_values = nullptr;  // [n_kv_heads]
  int kivi_key_bits = 2, kivi_value_bits = 2, kivi_group = 32;
};

// Null pointers are side outputs nobody asked for. Per-head outputs have row stride `capacity`; a head's
// values beyond its own length are left untouched.
struct AttentionOutputs {
  float* out = nullptr;          // [n_queries][n_heads][head_dim] (required)
  float* log_sum_exp = nullptr;  // [n_heads][n_queries] (required; -inf for a row that sees no key)
  int window = 0;                // w: the step's last min(w, n_queries) queries
  float* column_sums = nullptr;  // [n_heads][capacity]
  float* window_sums = nullptr;  // [n_heads][capacity]
  float* window_rows = nullptr;  // [n_heads][window][capacity]
  float* last_row = nullptr;     // [n_heads][capacity]
  float* rows = nullptr;         // [n_heads][n_queries][capacity]: the full map, only when recorded
  // Split-K: the keys in key_splits slices, each block leaving a partial softmax state that a second kernel
  // combines. split_partials: [key_splits][n_heads][n_queries][head_dim + 2] floats.
  int key_splits = 1;
  float* split_partials = nullptr;
};

constexpr int kMaxKeySplits = 64;

// How many key slices suit a call: more than 1 only for decode-sized calls over long caches.
int attention_key_splits(int n_queries, int max_length);

// Throws Error for a head_dim above kMaxAttentionHeadDim or heads that do not divide into groups.
void attention(const float* q, const int32_t* query_positions, const DeviceLayerCache& cache,
               const AttentionShape& shape, const AttentionOutputs& outputs, cudaStream_t stream);

}  // namespace kvscope::kernels::cuda
