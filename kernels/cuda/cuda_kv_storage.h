#pragma once
// K/V rows in device memory (the CUDA KVStorage). Per layer one allocation of [n_kv_heads][capacity][row] for
// keys and one for values, so attention.cu reads a layer's heads at fixed strides; the capacity doubles on
// demand and shrinks after an edit once more than a quarter of it is unused. Positions live on the device (the
// kernels mask by them) and on the host (KVStorage::positions).
//
// Rows are float32, or f16, bf16, q8_0, q4_0, q4_1 (keys and values each in their own type) in the CPU cache's
// byte layout (kernels/common/cache_rows.h): append quantizes each row once on the device, attention reads the
// blocks in place, an edit dequantizes only the rows its merges involve, merges them in float32 and stores each
// merged row once, and compaction moves whole rows.
//
// KIVI (kivi2, kivi4 for keys and values both) keeps per head and part a packed store and a float32 residual in
// the CPU cache's layout (kernels/cpu/kivi_part.h), and on the host the sizes that describe them
// (kivi_plan.h's KiviPartState). An append quantizes what the residual rule releases (kivi_ops.h: a block per key
// group or per run of value rows, every head and part in one launch) and rewrites the residual; an eviction
// re-packs the key groups and moves value and residual rows (one launch of byte copies); an edit with merges
// brings the head's bytes to the host and runs the CPU cache's own code on them (kivi_edit_on_host). Attention
// reads the groups, rows and residual in place. Entry and paged bytes are counted as on the CPU.
#include <cuda_runtime_api.h>

#include <array>
#include <vector>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/kivi_plan.h"
#include "kernels/cuda/pinned_staging.h"
#include "kernels/kv_storage.h"

namespace kvscope::kernels::cuda {

class CudaKVStorage final : public KVStorage {
 public:
  // Throws UsageError for KIVI in one part only (the device stores KIVI for keys and values together), a rotated
  // part, a block format whose blocks do not divide head_dim, a head_dim above kMaxAttentionHeadDim, or more than
  // kMaxAppendHeads KV heads in a non-f32, non-KIVI cache.
  CudaKVStorage(int n_layers, int n_kv_heads, int head_dim, KVCacheTypes type, cudaStream_t stream);

  int size(int layer, int kv_head) const override;
  std::span<const int32_t> positions(int layer, int kv_head) const override;
  void append(int layer, const float* k, const float* v, int n, const int32_t* positions) override;
  void edit(int layer, int kv_head, std::span<const int32_t> keep, std::span<const RowMerge> merges,
            std::span<const ValueMerge> value_merges) override;
  void read_rows(int layer, int kv_head, KVPart part, int first, int count, float* host_out) const override;
  std::size_t layer_bytes(int layer) const override;
  std::size_t entry_bytes(int layer, int kv_head) const override;
  std::size_t paged_bytes(int layer, int kv_head, int page_tokens) const override;
  StorageError storage_error(int layer, KVPart part, bool as_merged) const override;

  bool kivi() const { return kivi_; }
  // KIVI: one head's part as the host records it, with its bytes brought back from the device (the GPU tests
  // compare them with the host reference).
  KiviHostPart kivi_part(int layer, int kv_head, KVPart part) const;

  // One head's stored rows of a part as they are on the device, [size][row bytes] (the GPU tests compare them
  // with the host references byte for byte).
  std::vector<uint8_t> stored_bytes(int layer, int kv_head, KVPart part) const;

  // What attention.cu reads for one layer.
  DeviceLayerCache layer_view(int layer) const;

 private:
  // One head's KIVI part on the device: its packed store (state.packed_bytes used), its residual in one of two
  // buffers (an append writes the rows that stay float32 into the other), the keys' group tables.
  struct KiviHeadPart {
    KiviPartState state;
    DeviceBuffer<uint8_t> packed;
    DeviceBuffer<float> residual[2];
    int current = 0;
    DeviceBuffer<int32_t> group_first, group_offset;
  };
  struct Layer {
    int capacity = 0;
    std::vector<KiviHeadPart> kivi[2];                 // [keys, values][n_kv_heads] when the cache is KIVI
    DeviceBuffer<DeviceKiviHead> kivi_heads;           // [keys, values][n_kv_heads], what attention reads
    DeviceBuffer<uint8_t> keys, values;                // [n_kv_heads][capacity][row bytes of the part's type]
    DeviceBuffer<int32_t> positions;                   // [n_kv_heads][capacity]
    DeviceBuffer<int32_t> lengths;                     // [n_kv_heads]
    std::vector<std::vector<int32_t>> host_positions;  // [n_kv_heads][length]
  };
  void reallocate(Layer& layer, int capacity);
  bool all_f32() const { return !kivi_ && key_type_ == RowType::F32 && value_type_ == RowType::F32; }
  std::size_t part_row_bytes(KVPart part) const {
    return kivi_ ? 0 : stored_row_bytes(part == KVPart::Keys ? key_type_ : value_type_, head_dim());
  }
  void append_kivi(Layer& layer, int layer_index, const float* k, const float* v, int n);
  void edit_kivi(Layer& layer, int layer_index, int kv_head, std::span<const int32_t> keep,
                 std::span<const RowMerge> merges, std::span<const ValueMerge> value_merges);
  // The part's bytes on the host, and back onto the device (the merge path).
  KiviHostPart download_kivi(const KiviHeadPart& part) const;
  void upload_kivi(KiviHeadPart& part, const KiviHostPart& host);
  // After the state changed: the keys' group tables, then every head's DeviceKiviHead.
  void upload_group_tables(KiviHeadPart& part);
  void upload_kivi_heads(Layer& layer);
  static std::size_t error_offset(int layer, KVPart part, bool as_merged);
  void edit_f32(Layer& layer, int kv_head, std::span<const int32_t> keep, std::span<const RowMerge> merges,
                std::span<const ValueMerge> value_merges);
  void edit_stored(Layer& layer, int layer_index, int kv_head, std::span<const int32_t> keep,
                   std::span<const RowMerge> merges, std::span<const ValueMerge> value_merges);
  void upload_lengths(Layer& layer);
  Layer& checked(int layer, int kv_head, const char* what);
  const Layer& checked(int layer, int kv_head, const char* what) const;

  static constexpr std::size_t kStagingBytes = std::size_t{1} << 20;
  RowType key_type_ = RowType::F32, value_type_ = RowType::F32;
  bool kivi_ = false;
  cudaStream_t stream_;
  PinnedStaging staging_;  // positions, lengths and edit lists: uploads that must not stall the stream
  std::vector<Layer> layers_;
  // Edit scratch: merge groups in CSR form and the kept indices, reused across edits.
  DeviceBuffer<int32_t> edit_offsets_, edit_members_, edit_keep_;
  DeviceBuffer<float> edit_weights_, edit_rows_;
  DeviceBuffer<int32_t> edit_positions_;
  DeviceBuffer<int32_t> append_positions_;  // the appended rows' positions, read by append_rows
  // Stored types: the rows a merge involves, in float32 ([keys, values][involved][head_dim]), and their indices.
  DeviceBuffer<float> merge_keys_, merge_values_;
  DeviceBuffer<int32_t> merge_index_, merge_targets_, merge_target_slots_;
  DeviceBuffer<uint8_t> edit_bytes_;
  // [layer][appended, merged][keys, values][error, reference]: StorageError's sums, added on the device.
  DeviceBuffer<double> errors_;
  // KIVI: an append's or eviction's tasks, and the merged rows' storage errors (the merge path runs on the host).
  DeviceBuffer<KiviQuantizeTask> kivi_tasks_;
  DeviceBuffer<ByteCopy> kivi_copies_;
  std::vector<std::array<StorageError, 2>> kivi_merge_errors_;  // [layer][keys, values]
};

}  // namespace kvscope::kernels::cuda
