#include "kernels/cpu/cpu_kv_storage.h"

#include <algorithm>

#include "kernels/common/cache_rows.h"
#include "kernels/common/float16.h"
#include "kernels/common/hadamard.h"
#include "kernels/error.h"

namespace kvscope::kernels::cpu {

namespace {
// After an edit a head gives memory back when more than this share of its allocation is unused, so evicting
// really shrinks the footprint while decode appends do not reallocate every step.
constexpr double kMaxSlackShare = 0.25;
constexpr std::size_t kMinSlackEntries = 16;

template <typename Vec>
void shrink_to(Vec& vec, std::size_t capacity) {
  Vec fresh;
  fresh.reserve(capacity);
  fresh.assign(vec.begin(), vec.end());
  vec.swap(fresh);
}

// Calls fn(vector, elements per row) on the vector a part of `type` keeps its rows in.
template <typename Part, typename Fn>
void on_stored(Part& rows, CacheType type, int head_dim, Fn&& fn) {
  switch (type) {
    case CacheType::F32: fn(rows.f32, static_cast<std::size_t>(head_dim)); break;
    case CacheType::F16: fn(rows.f16, static_cast<std::size_t>(head_dim)); break;
    case CacheType::BF16: fn(rows.bf16, static_cast<std::size_t>(head_dim)); break;
    default: fn(rows.blocks, cache_row_bytes(type, head_dim)); break;
  }
}

}  // namespace

CpuKVStorage::CpuKVStorage(int n_layers, int n_kv_heads, int head_dim, KVCacheTypes type)
    : KVStorage(n_layers, n_kv_heads, head_dim, type), heads_(static_cast<std::size_t>(n_layers) * n_kv_heads),
      errors_(static_cast<std::size_t>(n_layers)) {
  check_cache_types(type, head_dim);
  for (KVPart part : {KVPart::Keys, KVPart::Values})
    if (type.rotated(part)) rotation_block_[part == KVPart::Values] = hadamard_block(part == KVPart::Keys, head_dim);
  for (KVPart part : {KVPart::Keys, KVPart::Values}) {
    if (!is_kivi(type.of(part))) continue;
    const KiviLayout layout{kivi_bits(type.of(part)), type.kivi.group, type.kivi.residual, head_dim,
                            part == KVPart::Keys};
    for (HeadRows& head : heads_) head.part(part).kivi.emplace(layout);
  }
}

const float* CpuKVStorage::f32(int layer, int kv_head, KVPart part) const {
  return at(layer, kv_head).part(part).f32.data();
}

const uint16_t* CpuKVStorage::f16(int layer, int kv_head, KVPart part) const {
  return at(layer, kv_head).part(part).f16.data();
}

const BFloat16* CpuKVStorage::bf16(int layer, int kv_head, KVPart part) const {
  return at(layer, kv_head).part(part).bf16.data();
}

const uint8_t* CpuKVStorage::blocks(int layer, int kv_head, KVPart part) const {
  return at(layer, kv_head).part(part).blocks.data();
}

const float* CpuKVStorage::host_f32_rows(int layer, int kv_head, KVPart part) const {
  // Rotated float32 rows are not the model's rows: readers take read_rows' copy, rotated back.
  return type().of(part) == CacheType::F32 && rotation_block(part) == 0 ? f32(layer, kv_head, part) : nullptr;
}

void CpuKVStorage::reserve_for(HeadRows& head, std::size_t entries) {
  // Growing one token at a time would double capacity; reserving exactly keeps the byte count honest after
  // prefill.
  if (head.positions.capacity() >= entries) return;
  const std::size_t target =
      head.positions.empty() ? entries
                             : std::max(entries, head.positions.size() + head.positions.size() / 4 + kMinSlackEntries);
  for (KVPart part : {KVPart::Keys, KVPart::Values}) {
    if (head.part(part).kivi) {
      head.part(part).kivi->reserve(target);
      continue;
    }
    on_stored(head.part(part), type().of(part), head_dim(), [&](auto& rows, std::size_t width) {
      rows.reserve(target * width);
    });
  }
  head.positions.reserve(target);
}

void CpuKVStorage::push_rows(int layer, HeadRows& head, KVPart part, const float* rows, std::size_t row_stride,
                             int count) {
  const int d = head_dim();
  const CacheType t = type().of(part);
  PartRows& stored = head.part(part);
  StorageError& error = errors_[layer][part == KVPart::Values][0];
  const float* computed = rows;
  const std::size_t computed_stride = row_stride;
  std::vector<float> rotated;
  if (const int block = rotation_block(part)) {
    rotated.resize(static_cast<std::size_t>(count) * d);
    for (int r = 0; r < count; ++r)
      std::copy_n(rows + r * row_stride, d, rotated.data() + static_cast<std::size_t>(r) * d);
    hadamard_rotate_rows(rotated.data(), count, d, d, block);
    rows = rotated.data();
    row_stride = d;
  }
  // KIVI measures its error in the stored frame, which equals the model frame's: the rotation keeps norms.
  if (stored.kivi) return stored.kivi->append(rows, row_stride, count, &error);
  const std::size_t first = head.positions.size();
  for (int r = 0; r < count; ++r) {
    const float* row = rows + r * row_stride;
    if (t == CacheType::F32) {
      stored.f32.insert(stored.f32.end(), row, row + d);
    } else if (t == CacheType::F16) {
      const std::size_t end = stored.f16.size();
      stored.f16.resize(end + d);
      floats_to_half(row, d, stored.f16.data() + end);
    } else if (t == CacheType::BF16) {
      const std::size_t end = stored.bf16.size();
      stored.bf16.resize(end + d);
      floats_to_bf16(row, d, stored.bf16.data() + end);
    } else {
      const std::size_t end = stored.blocks.size();
      stored.blocks.resize(end + cache_row_bytes(t, d));
      quantize_cache_row(row_type(t), row, d, stored.blocks.data() + end);
    }
  }
  if (t == CacheType::F32) return;
  std::vector<float> back(static_cast<std::size_t>(d));
  for (int r = 0; r < count; ++r) {
    load_rows(head, part, first + r, 1, back.data());
    error.add(computed + r * computed_stride, back.data(), d);
  }
}

void CpuKVStorage::append(int layer, const float* k, const float* v, int n, const int32_t* positions) {
  const std::size_t d = head_dim();
  const std::size_t token_stride = static_cast<std::size_t>(n_kv_heads()) * d;
  for (int h = 0; h < n_kv_heads(); ++h) {
    HeadRows& head = at(layer, h);
    reserve_for(head, head.positions.size() + n);
    push_rows(layer, head, KVPart::Keys, k + h * d, token_stride, n);
    push_rows(layer, head, KVPart::Values, v + h * d, token_stride, n);
    head.positions.insert(head.positions.end(), positions, positions + n);
  }
}

void CpuKVStorage::load_rows(const HeadRows& head, KVPart part, std::size_t first, std::size_t count,
                             float* out) const {
  load_stored_rows(head, part, first, count, out);
  if (const int block = rotation_block(part))
    hadamard_rotate_rows(out, static_cast<int>(count), head_dim(), head_dim(), block);
}

void CpuKVStorage::load_stored_rows(const HeadRows& head, KVPart part, std::size_t first, std::size_t count,
                                    float* out) const {
  const int d = head_dim();
  const CacheType t = type().of(part);
  const PartRows& stored = head.part(part);
  if (stored.kivi) {
    stored.kivi->load(first, count, out);
  } else if (t == CacheType::F32) {
    std::copy_n(stored.f32.data() + first * d, count * d, out);
  } else if (t == CacheType::F16) {
    halves_to_float(stored.f16.data() + first * d, count * d, out);
  } else if (t == CacheType::BF16) {
    bf16s_to_float(stored.bf16.data() + first * d, count * d, out);
  } else {
    const std::size_t row_bytes = cache_row_bytes(t, d);
    for (std::size_t r = 0; r < count; ++r)
      dequantize_cache_row(row_type(t), stored.blocks.data() + (first + r) * row_bytes, d, out + r * d);
  }
}

void CpuKVStorage::store_row(HeadRows& head, KVPart part, std::size_t i, const float* row) {
  const int d = head_dim();
  const CacheType t = type().of(part);
  PartRows& stored = head.part(part);
  std::vector<float> rotated;
  if (const int block = rotation_block(part)) {
    rotated.assign(row, row + d);
    hadamard_rotate(rotated.data(), d, block);
    row = rotated.data();
  }
  if (t == CacheType::F32)
    std::copy_n(row, d, stored.f32.data() + i * d);
  else if (t == CacheType::F16)
    floats_to_half(row, d, stored.f16.data() + i * d);
  else if (t == CacheType::BF16)
    floats_to_bf16(row, d, stored.bf16.data() + i * d);
  else
    quantize_cache_row(row_type(t), row, d, stored.blocks.data() + i * cache_row_bytes(t, d));
}

void CpuKVStorage::edit(int layer, int kv_head, std::span<const int32_t> keep, std::span<const RowMerge> merges,
                        std::span<const ValueMerge> value_merges) {
  HeadRows& head = at(layer, kv_head);
  const std::size_t d = head_dim();
  // Merges first, while source indices still refer to the old layout; float32 whatever the storage (a quantized
  // row is dequantized). Results are kept in float32 until all merges are done, so a later merge reads an earlier
  // one's result exactly and each merged row is stored (rounded or quantized) once.
  const auto merged = merge_results(static_cast<int>(d), merges, value_merges,
                                    [&](KVPart part, int32_t i, float* out) { load_rows(head, part, i, 1, out); });
  std::vector<float> row(d);
  for (KVPart part : {KVPart::Keys, KVPart::Values}) {
    const auto& results = merged[part == KVPart::Values];
    StorageError& error = errors_[layer][part == KVPart::Values][1];
    if (KiviPart* kivi = head.part(part).kivi ? &*head.part(part).kivi : nullptr) {
      std::vector<std::pair<int32_t, std::vector<float>>> rows(results.begin(), results.end());
      if (const int block = rotation_block(part))
        for (auto& [i, values] : rows) hadamard_rotate(values.data(), static_cast<int>(d), block);
      kivi->store(rows, &error);
    } else {
      for (const auto& [i, values] : results) {
        store_row(head, part, i, values.data());
        if (type().of(part) == CacheType::F32) continue;
        load_rows(head, part, i, 1, row.data());
        error.add(values.data(), row.data(), d);
      }
    }
  }
  // Compaction in place: keep is increasing, so each kept row moves down or stays. A block row moves whole
  // (its scales with it), so evicting frees an entry's payload and scales together; a KIVI part re-packs its
  // groups (kivi_part.h).
  auto compact = [&](auto& rows, std::size_t width) {
    std::size_t out = 0;
    for (int32_t i : keep) {
      if (static_cast<std::size_t>(i) != out) std::copy_n(rows.begin() + i * width, width, rows.begin() + out * width);
      ++out;
    }
    rows.resize(out * width);
  };
  for (KVPart part : {KVPart::Keys, KVPart::Values}) {
    if (head.part(part).kivi)
      head.part(part).kivi->compact(keep);
    else
      on_stored(head.part(part), type().of(part), head_dim(), compact);
  }
  compact(head.positions, 1);
  release_slack(head);
}

void CpuKVStorage::release_slack(HeadRows& head) {
  for (KVPart part : {KVPart::Keys, KVPart::Values})
    if (head.part(part).kivi) head.part(part).kivi->release_slack();
  const std::size_t n = head.positions.size();
  const std::size_t capacity = head.positions.capacity();
  if (capacity - n <= kMinSlackEntries || static_cast<double>(capacity - n) <= kMaxSlackShare * capacity) return;
  const std::size_t keep_capacity = n + kMinSlackEntries;
  for (KVPart part : {KVPart::Keys, KVPart::Values}) {
    if (head.part(part).kivi) continue;
    on_stored(head.part(part), type().of(part), head_dim(), [&](auto& rows, std::size_t width) {
      shrink_to(rows, keep_capacity * width);
    });
  }
  shrink_to(head.positions, keep_capacity);
}

void CpuKVStorage::read_rows(int layer, int kv_head, KVPart part, int first, int count, float* host_out) const {
  load_rows(at(layer, kv_head), part, first, count, host_out);
}

void CpuKVStorage::read_stored_rows(int layer, int kv_head, KVPart part, int first, int count, float* out) const {
  load_stored_rows(at(layer, kv_head), part, first, count, out);
}

std::size_t CpuKVStorage::layer_bytes(int layer) const {
  std::size_t total = 0;
  for (int h = 0; h < n_kv_heads(); ++h)
    for (KVPart part : {KVPart::Keys, KVPart::Values}) {
      const PartRows& rows = at(layer, h).part(part);
      total += rows.f32.capacity() * sizeof(float) + rows.f16.capacity() * sizeof(uint16_t) +
               rows.bf16.capacity() * sizeof(BFloat16) + rows.blocks.capacity() +
               (rows.kivi ? rows.kivi->allocated_bytes() : 0);
    }
  return total;
}

StorageError CpuKVStorage::storage_error(int layer, KVPart part, bool as_merged) const {
  return errors_[layer][part == KVPart::Values][as_merged ? 1 : 0];
}

std::size_t CpuKVStorage::entry_bytes(int layer, int kv_head) const {
  const HeadRows& head = at(layer, kv_head);
  std::size_t total = 0;
  for (KVPart part : {KVPart::Keys, KVPart::Values})
    total += head.part(part).kivi ? head.part(part).kivi->entry_bytes() : head.positions.size() * row_bytes(part);
  return total;
}

std::size_t CpuKVStorage::paged_bytes(int layer, int kv_head, int page_tokens) const {
  const HeadRows& head = at(layer, kv_head);
  std::size_t total = 0;
  for (KVPart part : {KVPart::Keys, KVPart::Values})
    total += head.part(part).kivi
                 ? head.part(part).kivi->paged_bytes(page_tokens)
                 : pages_for(head.positions.size(), page_tokens) * cache_page_bytes(type(), part, head_dim(), page_tokens);
  return total;
}

}  // namespace kvscope::kernels::cpu
