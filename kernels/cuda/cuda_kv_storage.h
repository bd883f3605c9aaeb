#pragma once
// K/V rows in device memory (the CUDA KVStorage). Per layer one allocation of [n_kv_heads][capacity][head_dim]
// for keys and one for values, so attention.cu reads a layer's heads at fixed strides; the capacity doubles on
// demand and shrinks after an edit once more than a quarter of it is unused. Positions live on the device (the
// kernels mask by them) and on the host (KVStorage::positions). float32 rows only for now.
#include <cuda_runtime_api.h>

#include <vector>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/pinned_staging.h"
#include "kernels/kv_storage.h"

namespace kvscope::kernels::cuda {

class CudaKVStorage final : public KVStorage {
 public:
  // Throws UsageError for any cache type but f32 (not implemented on the device yet).
  CudaKVStorage(int n_layers, int n_kv_heads, int head_dim, KVCacheTypes type, cudaStream_t stream);

  int size(int layer, int kv_head) const override;
  std::span<const int32_t> positions(int layer, int kv_head) const override;
  void append(int layer, const float* k, const float* v, int n, const int32_t* positions) override;
  void edit(int layer, int kv_head, std::span<const int32_t> keep, std::span<const RowMerge> merges,
            std::span<const ValueMerge> value_merges) override;
  void read_rows(int layer, int kv_head, KVPart part, int first, int count, float* host_out) const override;
  std::size_t layer_bytes(int layer) const override;

  // What attention.cu reads for one layer.
  DeviceLayerCache layer_view(int layer) const;

 private:
  struct Layer {
    int capacity = 0;
    DeviceBuffer<float> keys, values;                  // [n_kv_heads][capacity][head_dim]
    DeviceBuffer<int32_t> positions;                   // [n_kv_heads][capacity]
    DeviceBuffer<int32_t> lengths;                     // [n_kv_heads]
    std::vector<std::vector<int32_t>> host_positions;  // [n_kv_heads][length]
  };
  void reallocate(Layer& layer, int capacity);
  void upload_lengths(Layer& layer);
  Layer& checked(int layer, int kv_head, const char* what);
  const Layer& checked(int layer, int kv_head, const char* what) const;

  static constexpr std::size_t kStagingBytes = std::size_t{1} << 20;
  cudaStream_t stream_;
  PinnedStaging staging_;  // positions, lengths and edit lists: uploads that must not stall the stream
  std::vector<Layer> layers_;
  // Edit scratch: merge groups in CSR form and the kept indices, reused across edits.
  DeviceBuffer<int32_t> edit_offsets_, edit_members_, edit_keep_;
  DeviceBuffer<float> edit_weights_, edit_rows_;
  DeviceBuffer<int32_t> edit_positions_;
  DeviceBuffer<int32_t> append_positions_;  // the appended rows' positions, read by append_rows
};

}  // namespace kvscope::kernels::cuda
