#pragma once
// K/V rows in host memory, float32 or IEEE half per CacheType, per (layer, KV head) in ragged vectors.
#include <cstdint>
#include <vector>

#include "kernels/kv_storage.h"

namespace kvscope::kernels::cpu {

class CpuKVStorage final : public KVStorage {
 public:
  CpuKVStorage(int n_layers, int n_kv_heads, int head_dim, CacheType type);

  int size(int layer, int kv_head) const override { return static_cast<int>(at(layer, kv_head).positions.size()); }
  std::span<const int32_t> positions(int layer, int kv_head) const override { return at(layer, kv_head).positions; }
  void append(int layer, const float* k, const float* v, int n, const int32_t* positions) override;
  void edit(int layer, int kv_head, std::span<const int32_t> keep, std::span<const RowMerge> merges) override;
  void read_rows(int layer, int kv_head, KVPart part, int first, int count, float* host_out) const override;
  const float* host_f32_rows(int layer, int kv_head, KVPart part) const override;
  std::size_t layer_bytes(int layer) const override;

  // The stored rows of one head, [size][head_dim]: f32() when type() is F32, f16() when F16 (else empty).
  const float* f32(int layer, int kv_head, KVPart part) const;
  const uint16_t* f16(int layer, int kv_head, KVPart part) const;

 private:
  struct HeadRows {
    std::vector<float> keys, values;         // CacheType::F32
    std::vector<uint16_t> keys16, values16;  // CacheType::F16
    std::vector<int32_t> positions;
  };
  HeadRows& at(int layer, int kv_head) { return heads_[static_cast<std::size_t>(layer) * n_kv_heads() + kv_head]; }
  const HeadRows& at(int layer, int kv_head) const {
    return heads_[static_cast<std::size_t>(layer) * n_kv_heads() + kv_head];
  }
  void reserve_for(HeadRows& head, std::size_t entries);
  void release_slack(HeadRows& head);
  // Row i of a head as float (a copy for f16) and back.
  void load_row(const HeadRows& head, KVPart part, std::size_t i, float* out) const;
  void store_row(HeadRows& head, KVPart part, std::size_t i, const float* row);

  std::vector<HeadRows> heads_;
};

}  // namespace kvscope::kernels::cpu
