#pragma once
// K/V rows in host memory per (layer, KV head), in ragged vectors: float32, IEEE half, bfloat16, llama.cpp
// blocks (q8_0, q4_0, q4_1) or KIVI's groups (kivi_part.h), keys and values each in their own CacheType.
#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "kernels/common/float16.h"
#include "kernels/cpu/kivi_part.h"
#include "kernels/kv_storage.h"

namespace kvscope::kernels::cpu {

class CpuKVStorage final : public KVStorage {
 public:
  CpuKVStorage(int n_layers, int n_kv_heads, int head_dim, KVCacheTypes type);

  int size(int layer, int kv_head) const override { return static_cast<int>(at(layer, kv_head).positions.size()); }
  std::span<const int32_t> positions(int layer, int kv_head) const override { return at(layer, kv_head).positions; }
  void append(int layer, const float* k, const float* v, int n, const int32_t* positions) override;
  void edit(int layer, int kv_head, std::span<const int32_t> keep, std::span<const RowMerge> merges,
            std::span<const ValueMerge> value_merges) override;
  void read_rows(int layer, int kv_head, KVPart part, int first, int count, float* host_out) const override;
  const float* host_f32_rows(int layer, int kv_head, KVPart part) const override;
  std::size_t layer_bytes(int layer) const override;
  std::size_t entry_bytes(int layer, int kv_head) const override;
  std::size_t paged_bytes(int layer, int kv_head, int page_tokens) const override;
  StorageError storage_error(int layer, KVPart part, bool as_merged) const override;

  // The stored rows of one head's part, [size][head_dim]: f32() when its type is F32, f16() when F16, bf16()
  // when BF16, blocks() (row_bytes(part) bytes a row) for a block format; the others are empty.
  const float* f32(int layer, int kv_head, KVPart part) const;
  const uint16_t* f16(int layer, int kv_head, KVPart part) const;
  const BFloat16* bf16(int layer, int kv_head, KVPart part) const;
  const uint8_t* blocks(int layer, int kv_head, KVPart part) const;
  // Rows [first, first + count) of a part as float in the frame they are stored in: Hadamard-rotated when the
  // part is (KVCacheTypes::rotated; what attention multiplies a rotated query with), else as read_rows.
  void read_stored_rows(int layer, int kv_head, KVPart part, int first, int count, float* out) const;
  // The rotation block of a part (common/hadamard.h), 0 when the part is stored as computed.
  int rotation_block(KVPart part) const { return rotation_block_[part == KVPart::Values]; }
  // The part when its type is KIVI2 or KIVI4.
  const KiviPart& kivi(int layer, int kv_head, KVPart part) const { return *at(layer, kv_head).part(part).kivi; }

 private:
  // One part's rows in the vector its type uses.
  struct PartRows {
    std::vector<float> f32;
    std::vector<uint16_t> f16;
    std::vector<BFloat16> bf16;
    std::vector<uint8_t> blocks;
    std::optional<KiviPart> kivi;
  };
  struct HeadRows {
    PartRows keys, values;
    std::vector<int32_t> positions;
    PartRows& part(KVPart p) { return p == KVPart::Keys ? keys : values; }
    const PartRows& part(KVPart p) const { return p == KVPart::Keys ? keys : values; }
  };
  HeadRows& at(int layer, int kv_head) { return heads_[static_cast<std::size_t>(layer) * n_kv_heads() + kv_head]; }
  const HeadRows& at(int layer, int kv_head) const {
    return heads_[static_cast<std::size_t>(layer) * n_kv_heads() + kv_head];
  }
  void reserve_for(HeadRows& head, std::size_t entries);
  void release_slack(HeadRows& head);
  // Rows [first, first + count) of a part as float (a copy, widened or dequantized, rotated back when the part
  // is stored rotated) and one row back (rotated first when it is). load_stored_rows leaves the rotation on.
  void load_rows(const HeadRows& head, KVPart part, std::size_t first, std::size_t count, float* out) const;
  void load_stored_rows(const HeadRows& head, KVPart part, std::size_t first, std::size_t count, float* out) const;
  void store_row(HeadRows& head, KVPart part, std::size_t i, const float* row);
  // Adds `count` rows, row t at rows + t * row_stride floats.
  void push_rows(int layer, HeadRows& head, KVPart part, const float* rows, std::size_t row_stride, int count);

  std::vector<HeadRows> heads_;
  int rotation_block_[2] = {0, 0};  // keys, values
  // [layer][keys, values][appended, merged]; heads of one layer append in one call, so a layer's sums are
  // written by one thread.
  std::vector<std::array<std::array<StorageError, 2>, 2>> errors_;
};

}  // namespace kvscope::kernels::cpu
