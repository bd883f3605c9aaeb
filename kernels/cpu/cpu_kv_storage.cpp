#include "kernels/cpu/cpu_kv_storage.h"

#include <algorithm>

#include "kernels/common/float16.h"

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
}  // namespace

CpuKVStorage::CpuKVStorage(int n_layers, int n_kv_heads, int head_dim, CacheType type)
    : KVStorage(n_layers, n_kv_heads, head_dim, type), heads_(static_cast<std::size_t>(n_layers) * n_kv_heads) {}

const float* CpuKVStorage::f32(int layer, int kv_head, KVPart part) const {
  const HeadRows& head = at(layer, kv_head);
  return part == KVPart::Keys ? head.keys.data() : head.values.data();
}

const uint16_t* CpuKVStorage::f16(int layer, int kv_head, KVPart part) const {
  const HeadRows& head = at(layer, kv_head);
  return part == KVPart::Keys ? head.keys16.data() : head.values16.data();
}

const float* CpuKVStorage::host_f32_rows(int layer, int kv_head, KVPart part) const {
  return type() == CacheType::F32 ? f32(layer, kv_head, part) : nullptr;
}

void CpuKVStorage::reserve_for(HeadRows& head, std::size_t entries) {
  // Growing one token at a time would double capacity; reserving exactly keeps the byte count honest after
  // prefill.
  if (head.positions.capacity() >= entries) return;
  const std::size_t target =
      head.positions.empty() ? entries
                             : std::max(entries, head.positions.size() + head.positions.size() / 4 + kMinSlackEntries);
  const std::size_t d = head_dim();
  if (type() == CacheType::F32) {
    head.keys.reserve(target * d);
    head.values.reserve(target * d);
  } else {
    head.keys16.reserve(target * d);
    head.values16.reserve(target * d);
  }
  head.positions.reserve(target);
}

void CpuKVStorage::append(int layer, const float* k, const float* v, int n, const int32_t* positions) {
  const std::size_t d = head_dim();
  for (int h = 0; h < n_kv_heads(); ++h) {
    HeadRows& head = at(layer, h);
    reserve_for(head, head.positions.size() + n);
    for (int t = 0; t < n; ++t) {
      const std::size_t offset = (static_cast<std::size_t>(t) * n_kv_heads() + h) * d;
      if (type() == CacheType::F32) {
        head.keys.insert(head.keys.end(), k + offset, k + offset + d);
        head.values.insert(head.values.end(), v + offset, v + offset + d);
      } else {
        const std::size_t at_row = head.keys16.size();
        head.keys16.resize(at_row + d);
        head.values16.resize(at_row + d);
        floats_to_half(k + offset, d, head.keys16.data() + at_row);
        floats_to_half(v + offset, d, head.values16.data() + at_row);
      }
      head.positions.push_back(positions[t]);
    }
  }
}

void CpuKVStorage::load_row(const HeadRows& head, KVPart part, std::size_t i, float* out) const {
  const std::size_t d = head_dim();
  if (type() == CacheType::F32) {
    const float* rows = part == KVPart::Keys ? head.keys.data() : head.values.data();
    std::copy_n(rows + i * d, d, out);
  } else {
    halves_to_float((part == KVPart::Keys ? head.keys16.data() : head.values16.data()) + i * d, d, out);
  }
}

void CpuKVStorage::store_row(HeadRows& head, KVPart part, std::size_t i, const float* row) {
  const std::size_t d = head_dim();
  if (type() == CacheType::F32)
    std::copy_n(row, d, (part == KVPart::Keys ? head.keys.data() : head.values.data()) + i * d);
  else
    floats_to_half(row, d, (part == KVPart::Keys ? head.keys16.data() : head.values16.data()) + i * d);
}

void CpuKVStorage::edit(int layer, int kv_head, std::span<const int32_t> keep, std::span<const RowMerge> merges) {
  HeadRows& head = at(layer, kv_head);
  const std::size_t d = head_dim();
  // Merges first, while source indices still refer to the old layout; float32 whatever the storage.
  std::vector<float> row(d), merged(d);
  for (const RowMerge& g : merges)
    for (KVPart part : {KVPart::Keys, KVPart::Values}) {
      load_row(head, part, g.target, row.data());
      for (std::size_t j = 0; j < d; ++j) merged[j] = g.weights[0] * row[j];
      for (std::size_t s = 0; s < g.sources.size(); ++s) {
        load_row(head, part, g.sources[s], row.data());
        for (std::size_t j = 0; j < d; ++j) merged[j] += g.weights[s + 1] * row[j];
      }
      store_row(head, part, g.target, merged.data());
    }
  // Compaction in place: keep is increasing, so each kept row moves down or stays.
  auto compact = [&](auto& rows, std::size_t width) {
    std::size_t out = 0;
    for (int32_t i : keep) {
      if (static_cast<std::size_t>(i) != out) std::copy_n(rows.begin() + i * width, width, rows.begin() + out * width);
      ++out;
    }
    rows.resize(out * width);
  };
  if (type() == CacheType::F32) {
    compact(head.keys, d);
    compact(head.values, d);
  } else {
    compact(head.keys16, d);
    compact(head.values16, d);
  }
  compact(head.positions, 1);
  release_slack(head);
}

void CpuKVStorage::release_slack(HeadRows& head) {
  const std::size_t n = head.positions.size();
  const std::size_t capacity = head.positions.capacity();
  if (capacity - n <= kMinSlackEntries || static_cast<double>(capacity - n) <= kMaxSlackShare * capacity) return;
  const std::size_t keep_capacity = n + kMinSlackEntries;
  const std::size_t d = head_dim();
  if (type() == CacheType::F32) {
    shrink_to(head.keys, keep_capacity * d);
    shrink_to(head.values, keep_capacity * d);
  } else {
    shrink_to(head.keys16, keep_capacity * d);
    shrink_to(head.values16, keep_capacity * d);
  }
  shrink_to(head.positions, keep_capacity);
}

void CpuKVStorage::read_rows(int layer, int kv_head, KVPart part, int first, int count, float* host_out) const {
  const HeadRows& head = at(layer, kv_head);
  const std::size_t d = head_dim();
  if (type() == CacheType::F32) {
    const float* rows = part == KVPart::Keys ? head.keys.data() : head.values.data();
    std::copy_n(rows + first * d, count * d, host_out);
  } else {
    halves_to_float((part == KVPart::Keys ? head.keys16.data() : head.values16.data()) + first * d, count * d,
                    host_out);
  }
}

std::size_t CpuKVStorage::layer_bytes(int layer) const {
  std::size_t total = 0;
  for (int h = 0; h < n_kv_heads(); ++h) {
    const HeadRows& head = at(layer, h);
    total += (head.keys.capacity() + head.values.capacity()) * sizeof(float) +
             (head.keys16.capacity() + head.values16.capacity()) * sizeof(uint16_t);
  }
  return total;
}

}  // namespace kvscope::kernels::cpu
