#include "kernels/cuda/cache_ops_reference.h"

#include <algorithm>

#include "kernels/common/merge_math.h"

namespace kvscope::kernels::cuda {

std::vector<float> merge_and_compact_reference(const std::vector<float>& rows, int row_length,
                                               const std::vector<HostMergeGroup>& groups,
                                               const std::vector<int32_t>& keep) {
  std::vector<float> merged = rows;
  for (const HostMergeGroup& g : groups)
    for (int c = 0; c < row_length; ++c) {
      double sum = 0.0;
      for (std::size_t m = 0; m < g.members.size(); ++m)
        sum += static_cast<double>(g.weights[m]) * rows[static_cast<std::size_t>(g.members[m]) * row_length + c];
      merged[static_cast<std::size_t>(g.members[0]) * row_length + c] = static_cast<float>(sum);
    }
  std::vector<float> out;
  out.reserve(keep.size() * row_length);
  for (int32_t k : keep)
    out.insert(out.end(), merged.begin() + static_cast<std::ptrdiff_t>(k) * row_length,
               merged.begin() + static_cast<std::ptrdiff_t>(k + 1) * row_length);
  return out;
}

void append_rows_reference(const std::vector<float>& k, const std::vector<float>& v,
                           const std::vector<int32_t>& new_positions, int n_kv_heads, int head_dim,
                           HostLayerCache& cache) {
  const int n = static_cast<int>(new_positions.size()), d = head_dim;
  for (int g = 0; g < n_kv_heads; ++g) {
    for (int row = 0; row < n; ++row) {
      const std::size_t slot = static_cast<std::size_t>(g) * cache.capacity + cache.lengths[g] + row;
      const std::size_t source = (static_cast<std::size_t>(row) * n_kv_heads + g) * d;
      for (int e = 0; e < d; ++e) {
        cache.keys[slot * d + e] = k[source + e];
        cache.values[slot * d + e] = v[source + e];
      }
      cache.positions[slot] = new_positions[row];
    }
    cache.lengths[g] += n;
  }
}

HostStoredLayer::HostStoredLayer(RowType keys_type, RowType values_type, int heads, int d, int rows)
    : key_type(keys_type), value_type(values_type), n_kv_heads(heads), head_dim(d), capacity(rows),
      keys(static_cast<std::size_t>(heads) * rows * stored_row_bytes(keys_type, d)),
      values(static_cast<std::size_t>(heads) * rows * stored_row_bytes(values_type, d)),
      positions(static_cast<std::size_t>(heads) * rows, -1), lengths(heads, 0) {}

std::span<const uint8_t> HostStoredLayer::row(KVPart part, int g, int j) const {
  const std::size_t bytes = row_bytes(part);
  const auto& rows = part == KVPart::Keys ? keys : values;
  return {rows.data() + (static_cast<std::size_t>(g) * capacity + j) * bytes, bytes};
}

std::vector<double> append_stored_rows_reference(const std::vector<float>& k, const std::vector<float>& v,
                                                 const std::vector<int32_t>& new_positions, HostStoredLayer& cache) {
  const int n = static_cast<int>(new_positions.size()), d = cache.head_dim;
  std::vector<double> sums(4, 0.0);
  std::vector<float> back(d);
  for (int g = 0; g < cache.n_kv_heads; ++g) {
    for (int row = 0; row < n; ++row) {
      const std::size_t slot = static_cast<std::size_t>(g) * cache.capacity + cache.lengths[g] + row;
      const float* source[2] = {k.data() + (static_cast<std::size_t>(row) * cache.n_kv_heads + g) * d,
                                v.data() + (static_cast<std::size_t>(row) * cache.n_kv_heads + g) * d};
      for (int p = 0; p < 2; ++p) {
        const RowType type = p == 0 ? cache.key_type : cache.value_type;
        const std::size_t bytes = stored_row_bytes(type, d);
        uint8_t* stored = (p == 0 ? cache.keys : cache.values).data() + slot * bytes;
        quantize_cache_row(type, source[p], d, stored);
        if (type == RowType::F32) continue;
        dequantize_cache_row(type, stored, d, back.data());
        for (int e = 0; e < d; ++e) {
          const double x = source[p][e], diff = x - back[e];
          sums[2 * p] += diff * diff;
          sums[2 * p + 1] += x * x;
        }
      }
      cache.positions[slot] = new_positions[row];
    }
    cache.lengths[g] += n;
  }
  return sums;
}

HostLayerCache dequantized_layer(const HostStoredLayer& cache) {
  HostLayerCache out;
  const int d = cache.head_dim;
  out.capacity = cache.capacity;
  out.positions = cache.positions;
  out.lengths = cache.lengths;
  for (KVPart part : {KVPart::Keys, KVPart::Values}) {
    std::vector<float>& rows = part == KVPart::Keys ? out.keys : out.values;
    rows.assign(static_cast<std::size_t>(cache.n_kv_heads) * cache.capacity * d, 0.0f);
    for (int g = 0; g < cache.n_kv_heads; ++g)
      for (int j = 0; j < cache.lengths[g]; ++j)
        dequantize_cache_row(part == KVPart::Keys ? cache.key_type : cache.value_type, cache.row(part, g, j).data(), d,
                             rows.data() + (static_cast<std::size_t>(g) * cache.capacity + j) * d);
  }
  return out;
}

void edit_stored_reference(HostStoredLayer& cache, int kv_head, std::span<const int32_t> keep,
                           std::span<const RowMerge> merges, std::span<const ValueMerge> value_merges) {
  const int d = cache.head_dim, n = cache.lengths[kv_head];
  for (KVPart part : {KVPart::Keys, KVPart::Values}) {
    const RowType type = part == KVPart::Keys ? cache.key_type : cache.value_type;
    const std::size_t bytes = cache.row_bytes(part);
    uint8_t* head = (part == KVPart::Keys ? cache.keys : cache.values).data() +
                    static_cast<std::size_t>(kv_head) * cache.capacity * bytes;
    std::vector<float> rows(static_cast<std::size_t>(n) * d);
    for (int j = 0; j < n; ++j)
      dequantize_cache_row(type, head + j * bytes, d, rows.data() + static_cast<std::size_t>(j) * d);
    std::vector<bool> merged(n, false);
    if (part == KVPart::Values)
      for (const ValueMerge& m : value_merges)
        for (int32_t t : m.targets) {
          const int32_t members[2] = {t, m.source};
          const float weights[2] = {1.0f, m.weight};
          for (int c = 0; c < d; ++c)
            rows[static_cast<std::size_t>(t) * d + c] = merged_element(rows.data(), d, members, weights, 2, c);
          merged[t] = true;
        }
    for (const RowMerge& m : merges) {
      std::vector<int32_t> members{m.target};
      members.insert(members.end(), m.sources.begin(), m.sources.end());
      std::vector<float> result(d);
      for (int c = 0; c < d; ++c)
        result[c] =
            merged_element(rows.data(), d, members.data(), m.weights.data(), static_cast<int>(members.size()), c);
      std::copy(result.begin(), result.end(), rows.begin() + static_cast<std::ptrdiff_t>(m.target) * d);
      merged[m.target] = true;
    }
    for (int j = 0; j < n; ++j)
      if (merged[j]) quantize_cache_row(type, rows.data() + static_cast<std::size_t>(j) * d, d, head + j * bytes);
    for (std::size_t j = 0; j < keep.size(); ++j)
      std::copy_n(head + static_cast<std::size_t>(keep[j]) * bytes, bytes, head + j * bytes);
  }
  int32_t* positions = cache.positions.data() + static_cast<std::size_t>(kv_head) * cache.capacity;
  for (std::size_t j = 0; j < keep.size(); ++j) positions[j] = positions[keep[j]];
  cache.lengths[kv_head] = static_cast<int32_t>(keep.size());
}

HostKiviLayer::HostKiviLayer(const KVCacheTypes& types, int heads, int d)
    : n_kv_heads(heads), head_dim(d), group(types.kivi.group), positions(heads) {
  for (KVPart p : {KVPart::Keys, KVPart::Values}) {
    parts[p == KVPart::Values].resize(heads);
    for (KiviHostPart& part : parts[p == KVPart::Values])
      part.state.layout = KiviLayout{kivi_bits(types.of(p)), types.kivi.group, types.kivi.residual, d, p == KVPart::Keys};
  }
}

std::vector<double> kivi_append_reference(HostKiviLayer& cache, const std::vector<float>& k, const std::vector<float>& v,
                                          const std::vector<int32_t>& new_positions) {
  const int n = static_cast<int>(new_positions.size()), d = cache.head_dim;
  std::vector<double> sums(4, 0.0);
  for (KVPart p : {KVPart::Keys, KVPart::Values})
    for (int g = 0; g < cache.n_kv_heads; ++g) {
      KiviHostPart& part = cache.part(p, g);
      const KiviAppendShape shape = kivi_append_shape(part.state, n);
      part.packed.resize(part.state.packed_bytes + shape.packed_growth);
      std::vector<KiviQuantizeTask> tasks;
      std::vector<ByteCopy> copies;
      const float* fresh = (p == KVPart::Keys ? k : v).data() + static_cast<std::size_t>(g) * d;
      double* error_sums = sums.data() + 2 * (p == KVPart::Values);
      // As the device: in place when nothing leaves the residual, else into a second buffer.
      std::vector<float> moved;
      if (shape.ready == 0) {
        part.residual.resize(shape.residual_after * d);
        kivi_plan_append(part.state, shape, part.packed.data(), part.residual.data(), fresh, cache.n_kv_heads * d,
                         part.residual.data(), error_sums, tasks, copies);
      } else {
        moved.resize(shape.residual_after * d);
        kivi_plan_append(part.state, shape, part.packed.data(), part.residual.data(), fresh, cache.n_kv_heads * d,
                         moved.data(), error_sums, tasks, copies);
      }
      kivi_quantize_reference(tasks, d, cache.group);
      copy_byte_ranges_reference(copies);
      if (shape.ready > 0) part.residual.swap(moved);
    }
  for (auto& positions : cache.positions) positions.insert(positions.end(), new_positions.begin(), new_positions.end());
  return sums;
}

void kivi_edit_reference(HostKiviLayer& cache, int kv_head, std::span<const int32_t> keep,
                         std::span<const RowMerge> merges, std::span<const ValueMerge> value_merges,
                         StorageError merge_errors[2]) {
  KiviHostPart& keys = cache.part(KVPart::Keys, kv_head);
  KiviHostPart& values = cache.part(KVPart::Values, kv_head);
  if (!merges.empty() || !value_merges.empty()) {
    kivi_edit_on_host(keys, values, keep, merges, value_merges, merge_errors);
  } else {
    for (KiviHostPart* part : {&keys, &values}) {
      std::vector<uint8_t> packed(part->state.packed_bytes);
      std::vector<float> residual(part->residual.size());
      std::vector<ByteCopy> copies;
      kivi_plan_compact(part->state, keep, part->packed.data(), packed.data(), part->residual.data(), residual.data(),
                        copies);
      copy_byte_ranges_reference(copies);
      packed.resize(part->state.packed_bytes);
      residual.resize(part->state.residual_rows * cache.head_dim);
      part->packed.swap(packed);
      part->residual.swap(residual);
    }
  }
  std::vector<int32_t>& positions = cache.positions[kv_head];
  std::vector<int32_t> kept;
  for (int32_t i : keep) kept.push_back(positions[i]);
  positions.swap(kept);
}

HostLayerCache kivi_dequantized_layer(const HostKiviLayer& cache) {
  HostLayerCache out;
  const int d = cache.head_dim;
  for (const auto& positions : cache.positions) out.capacity = std::max(out.capacity, static_cast<int>(positions.size()));
  out.positions.assign(static_cast<std::size_t>(cache.n_kv_heads) * out.capacity, 0);
  out.lengths.assign(cache.n_kv_heads, 0);
  for (KVPart p : {KVPart::Keys, KVPart::Values}) {
    std::vector<float>& rows = p == KVPart::Keys ? out.keys : out.values;
    rows.assign(static_cast<std::size_t>(cache.n_kv_heads) * out.capacity * d, 0.0f);
    for (int g = 0; g < cache.n_kv_heads; ++g) {
      const KiviHostPart& part = cache.part(p, g);
      kivi_load_rows(part.state, part.packed.data(), part.residual.data(), 0, part.state.size(),
                     rows.data() + static_cast<std::size_t>(g) * out.capacity * d);
    }
  }
  for (int g = 0; g < cache.n_kv_heads; ++g) {
    const auto& positions = cache.positions[g];
    out.lengths[g] = static_cast<int32_t>(positions.size());
    std::copy(positions.begin(), positions.end(), out.positions.begin() + static_cast<std::ptrdiff_t>(g) * out.capacity);
  }
  return out;
}

}  // namespace kvscope::kernels::cuda
