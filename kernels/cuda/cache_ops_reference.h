#pragma once
// The host reference of cache_ops.cu: merges then compaction of one KV head's rows, by direct loops; of the
// CUDA cache of stored rows (f16, bf16, q8_0, q4_0, q4_1: append, edit, and the floats attention reads); and of
// its KIVI cache (kivi2, kivi4: the same, planned by kivi_plan.h and run by the kernels' host references).
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/common/cache_rows.h"
#include "kernels/cuda/attention_reference.h"  // HostLayerCache
#include "kernels/cuda/kivi_plan.h"
#include "kernels/kv_storage.h"  // RowMerge, ValueMerge

namespace kvscope::kernels::cuda {

struct HostMergeGroup {
  std::vector<int32_t> members;  // the target first, then its sources
  std::vector<float> weights;    // one per member
};

// rows: [n][row_length]. Applies every merge (each group reads rows as they were before any merge), then
// returns the rows listed in keep, in order.
std::vector<float> merge_and_compact_reference(const std::vector<float>& rows, int row_length,
                                               const std::vector<HostMergeGroup>& groups,
                                               const std::vector<int32_t>& keep);

// The reference of append_rows: k, v [n][n_kv_heads][head_dim], new_positions [n], each head's rows placed after
// its current length, which grows by n.
void append_rows_reference(const std::vector<float>& k, const std::vector<float>& v,
                           const std::vector<int32_t>& new_positions, int n_kv_heads, int head_dim,
                           HostLayerCache& cache);

// One layer's cache of stored rows in CudaKVStorage's layout: keys [n_kv_heads][capacity][stored_row_bytes(
// key_type, head_dim)] bytes, values likewise, positions [n_kv_heads][capacity], lengths [n_kv_heads].
struct HostStoredLayer {
  RowType key_type = RowType::F32, value_type = RowType::F32;
  int n_kv_heads = 0, head_dim = 0, capacity = 0;
  std::vector<uint8_t> keys, values;
  std::vector<int32_t> positions, lengths;
  HostStoredLayer(RowType key_type, RowType value_type, int n_kv_heads, int head_dim, int capacity);
  int row_bytes(KVPart part) const { return stored_row_bytes(part == KVPart::Keys ? key_type : value_type, head_dim); }
  // Head g's row j of a part, its bytes.
  std::span<const uint8_t> row(KVPart part, int g, int j) const;
};

// The reference of append_stored_rows: k, v [n][n_kv_heads][head_dim], each row quantized once
// (quantize_cache_row) after its head's current length. Returns [keys error, keys reference, values error, values
// reference] as append_stored_rows adds them to error_sums (nothing for an f32 part).
std::vector<double> append_stored_rows_reference(const std::vector<float>& k, const std::vector<float>& v,
                                                 const std::vector<int32_t>& new_positions, HostStoredLayer& cache);

// The floats attention reads from the stored rows (dequantize_cache_row); attention_reference over it is the
// reference of attention.cu over a stored cache.
HostLayerCache dequantized_layer(const HostStoredLayer& cache);

// The reference of CudaKVStorage's edit of one head of stored rows, by direct loops over every row: value merges in
// list order (V[t] = 1 * V[t] + w * V[source], merged_element), then the row merges reading those results, each
// computed in float32 from the dequantized rows and stored once; then the kept rows, whole, in order.
void edit_stored_reference(HostStoredLayer& cache, int kv_head, std::span<const int32_t> keep,
                           std::span<const RowMerge> merges, std::span<const ValueMerge> value_merges);

// One layer's KIVI cache as CudaKVStorage keeps it, in host memory: per part and KV head the state, packed bytes
// and residual rows, and each head's positions.
struct HostKiviLayer {
  int n_kv_heads = 0, head_dim = 0, group = 0;
  std::vector<KiviHostPart> parts[2];  // [keys, values][n_kv_heads]
  std::vector<std::vector<int32_t>> positions;
  HostKiviLayer(const KVCacheTypes& types, int n_kv_heads, int head_dim);
  KiviHostPart& part(KVPart p, int g) { return parts[p == KVPart::Values][g]; }
  const KiviHostPart& part(KVPart p, int g) const { return parts[p == KVPart::Values][g]; }
};

// The reference of CudaKVStorage::append on a KIVI cache: k, v [n][n_kv_heads][head_dim]; every head's part
// planned by kivi_plan_append and run by kivi_quantize_reference and copy_byte_ranges_reference. Returns [keys
// error, keys reference, values error, values reference] as the kernel adds them.
std::vector<double> kivi_append_reference(HostKiviLayer& cache, const std::vector<float>& k,
                                          const std::vector<float>& v, const std::vector<int32_t>& new_positions);

// The reference of CudaKVStorage::edit of one head of a KIVI cache: with merges, kivi_edit_on_host (the CPU cache's
// code; the merged rows' error added to merge_errors[keys, values]); without, kivi_plan_compact's copies run by
// copy_byte_ranges_reference.
void kivi_edit_reference(HostKiviLayer& cache, int kv_head, std::span<const int32_t> keep,
                         std::span<const RowMerge> merges, std::span<const ValueMerge> value_merges,
                         StorageError merge_errors[2]);

// The floats attention.cu reads from a KIVI cache (kivi_entry_value over every entry), capacity the longest head;
// attention_reference over it is the reference of attention.cu over that cache.
HostLayerCache kivi_dequantized_layer(const HostKiviLayer& cache);

}  // namespace kvscope::kernels::cuda
