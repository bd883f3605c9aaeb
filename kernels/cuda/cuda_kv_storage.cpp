#include "kernels/cuda/cuda_kv_storage.h"

#include <algorithm>
#include <string>

#include "kernels/cuda/cache_ops.h"
#include "kernels/cuda/kivi_ops.h"
#include "kernels/error.h"

namespace kvscope::kernels::cuda {
namespace {

constexpr int kMinCapacity = 64;

template <typename T>
void upload_into(DeviceBuffer<T>& buffer, const std::vector<T>& host, PinnedStaging& staging) {
  if (buffer.size() < host.size()) buffer.resize(host.size());
  staging.upload(buffer.data(), host);
}

// Merge groups in the CSR form merge_rows takes, built on the host; `row` maps an entry index to the row of the
// buffer merge_rows works on (the entry itself for float32 rows, its slot in the dequantized scratch otherwise).
struct HostMergeGroups {
  std::vector<int32_t> offsets{0}, members;
  std::vector<float> weights;
};

// One group per row merge: its target, then its sources, with the merge's weights.
template <class RowOf>
HostMergeGroups row_merge_groups(std::span<const RowMerge> merges, RowOf row) {
  HostMergeGroups g;
  for (const RowMerge& m : merges) {
    g.members.push_back(row(m.target));
    for (int32_t source : m.sources) g.members.push_back(row(source));
    g.weights.insert(g.weights.end(), m.weights.begin(), m.weights.end());
    g.offsets.push_back(static_cast<int32_t>(g.members.size()));
  }
  return g;
}

// A value merge is one merge group per target, V[t] = 1 * V[t] + w * V[source].
template <class RowOf>
HostMergeGroups value_merge_groups(const ValueMerge& m, RowOf row) {
  HostMergeGroups g;
  for (int32_t t : m.targets) {
    g.members.insert(g.members.end(), {row(t), row(m.source)});
    g.weights.insert(g.weights.end(), {1.0f, m.weight});
    g.offsets.push_back(static_cast<int32_t>(g.members.size()));
  }
  return g;
}

DeviceMergeGroups upload_groups(const HostMergeGroups& g, DeviceBuffer<int32_t>& offsets,
                                DeviceBuffer<int32_t>& members, DeviceBuffer<float>& weights,
                                PinnedStaging& staging) {
  upload_into(offsets, g.offsets, staging);
  upload_into(members, g.members, staging);
  upload_into(weights, g.weights, staging);
  return {offsets.data(), members.data(), weights.data(), static_cast<int>(g.offsets.size()) - 1};
}

// Grows a buffer to at least n values, by half again at least, keeping its first `keep` values (a device copy,
// then a synchronisation before the old allocation is freed).
template <typename T>
void grow_keeping(DeviceBuffer<T>& buffer, std::size_t n, std::size_t keep, cudaStream_t stream) {
  if (buffer.size() >= n) return;
  DeviceBuffer<T> bigger(std::max(n, buffer.size() + buffer.size() / 2 + 64));
  if (keep > 0) {
    check_cuda(cudaMemcpyAsync(bigger.data(), buffer.data(), keep * sizeof(T), cudaMemcpyDeviceToDevice, stream),
               "KV grow");
    check_cuda(cudaStreamSynchronize(stream), "KV grow");
  }
  buffer = std::move(bigger);
}

}  // namespace

CudaKVStorage::CudaKVStorage(int n_layers, int n_kv_heads, int head_dim, KVCacheTypes type, cudaStream_t stream)
    : KVStorage(n_layers, n_kv_heads, head_dim, type), stream_(stream), staging_(stream, kStagingBytes),
      layers_(n_layers) {
  if (is_kivi(type.keys) != is_kivi(type.values))
    throw UsageError("cache type " + cache_type_name(type) +
                     " mixes KIVI with another type, which the CUDA backend does not store: its KIVI cache holds "
                     "keys and values both as KIVI (kivi2 or kivi4 each); use --device cpu for the mix, or KIVI "
                     "for both parts on cuda");
  if (type.rotate_keys || type.rotate_values)
    throw UsageError("cache type " + cache_type_name(type) +
                     " rotates the stored rows (Hadamard), which the CUDA backend does not do; use --device cpu, "
                     "or drop rot=hadamard / --cache-rotation on cuda");
  check_cache_types(type, head_dim);
  if (head_dim > kMaxAttentionHeadDim)
    throw UsageError("the CUDA backend handles head_dim up to " + std::to_string(kMaxAttentionHeadDim) +
                     ", the model has " + std::to_string(head_dim));
  kivi_ = is_kivi(type.keys);
  if (!kivi_) {
    key_type_ = row_type(type.keys);
    value_type_ = row_type(type.values);
  }
  if (!all_f32() && !kivi_ && n_kv_heads > kMaxAppendHeads)
    throw UsageError("the CUDA backend stores cache type " + cache_type_name(type) + " for up to " +
                     std::to_string(kMaxAppendHeads) + " KV heads, the model has " + std::to_string(n_kv_heads) +
                     " (use --cache-type f32 on cuda, or --device cpu)");
  errors_.resize(static_cast<std::size_t>(std::max(n_layers, 1)) * 8);
  check_cuda(cudaMemsetAsync(errors_.data(), 0, errors_.size() * sizeof(double), stream_), "KV storage errors");
  kivi_merge_errors_.resize(n_layers);
  for (Layer& layer : layers_) {
    layer.host_positions.assign(n_kv_heads, {});
    layer.lengths.resize(n_kv_heads);
    upload_lengths(layer);
    if (!kivi_) continue;
    for (KVPart part : {KVPart::Keys, KVPart::Values}) {
      const KiviLayout layout{kivi_bits(type.of(part)), type.kivi.group, type.kivi.residual, head_dim,
                              part == KVPart::Keys};
      auto& heads = layer.kivi[part == KVPart::Values];
      heads.resize(n_kv_heads);
      for (KiviHeadPart& head : heads) head.state.layout = layout;
    }
    layer.kivi_heads.resize(2 * static_cast<std::size_t>(n_kv_heads));
    upload_kivi_heads(layer);
  }
}

CudaKVStorage::Layer& CudaKVStorage::checked(int layer, int kv_head, const char* what) {
  return const_cast<Layer&>(std::as_const(*this).checked(layer, kv_head, what));
}

const CudaKVStorage::Layer& CudaKVStorage::checked(int layer, int kv_head, const char* what) const {
  if (layer < 0 || layer >= n_layers() || kv_head < 0 || kv_head >= n_kv_heads())
    throw Error(std::string("CUDA KV storage ") + what + ": layer " + std::to_string(layer) + ", KV head " +
                std::to_string(kv_head) + " outside " + std::to_string(n_layers()) + " x " +
                std::to_string(n_kv_heads()));
  return layers_[layer];
}

int CudaKVStorage::size(int layer, int kv_head) const {
  return static_cast<int>(checked(layer, kv_head, "size").host_positions[kv_head].size());
}

std::span<const int32_t> CudaKVStorage::positions(int layer, int kv_head) const {
  return checked(layer, kv_head, "positions").host_positions[kv_head];
}

void CudaKVStorage::upload_lengths(Layer& layer) {
  std::vector<int32_t> lengths(n_kv_heads());
  for (int g = 0; g < n_kv_heads(); ++g) lengths[g] = static_cast<int32_t>(layer.host_positions[g].size());
  staging_.upload(layer.lengths.data(), lengths);
}

// Moves every head's rows into an allocation of `capacity` rows per head (capacity >= every head's length).
void CudaKVStorage::reallocate(Layer& layer, int capacity) {
  const std::size_t heads = n_kv_heads();
  const std::size_t key_row = part_row_bytes(KVPart::Keys), value_row = part_row_bytes(KVPart::Values);
  DeviceBuffer<uint8_t> keys(heads * capacity * key_row), values(heads * capacity * value_row);
  DeviceBuffer<int32_t> positions(heads * capacity);
  const int rows = std::min(layer.capacity, capacity);
  if (rows > 0 && key_row > 0) {
    check_cuda(cudaMemcpy2DAsync(keys.data(), capacity * key_row, layer.keys.data(), layer.capacity * key_row,
                                 rows * key_row, heads, cudaMemcpyDeviceToDevice, stream_),
               "KV reallocate (keys)");
    check_cuda(cudaMemcpy2DAsync(values.data(), capacity * value_row, layer.values.data(), layer.capacity * value_row,
                                 rows * value_row, heads, cudaMemcpyDeviceToDevice, stream_),
               "KV reallocate (values)");
  }
  if (rows > 0) {
    check_cuda(cudaMemcpy2DAsync(positions.data(), capacity * sizeof(int32_t), layer.positions.data(),
                                 layer.capacity * sizeof(int32_t), rows * sizeof(int32_t), heads,
                                 cudaMemcpyDeviceToDevice, stream_),
               "KV reallocate (positions)");
  }
  check_cuda(cudaStreamSynchronize(stream_), "KV reallocate");  // the old buffers are freed on return
  layer.keys = std::move(keys);
  layer.values = std::move(values);
  layer.positions = std::move(positions);
  layer.capacity = capacity;
}

std::size_t CudaKVStorage::error_offset(int layer, KVPart part, bool as_merged) {
  // [layer][appended, merged][keys, values][error, reference]: append_stored_rows adds to one layer's appended
  // keys and values at once, [keys error, keys reference, values error, values reference].
  return ((static_cast<std::size_t>(layer) * 2 + as_merged) * 2 + (part == KVPart::Values)) * 2;
}

void CudaKVStorage::append(int layer_index, const float* k, const float* v, int n, const int32_t* positions) {
  Layer& layer = checked(layer_index, 0, "append");
  if (n <= 0) return;
  const std::size_t d = head_dim(), heads = n_kv_heads();
  int longest = 0;
  for (const auto& p : layer.host_positions) longest = std::max(longest, static_cast<int>(p.size()));
  if (longest + n > layer.capacity) reallocate(layer, std::max({longest + n, 2 * layer.capacity, kMinCapacity}));
  if (kivi_) {
    append_kivi(layer, layer_index, k, v, n);
    for (std::size_t g = 0; g < heads; ++g) {
      auto& host = layer.host_positions[g];
      staging_.upload(layer.positions.data() + g * layer.capacity + host.size(), positions, n * sizeof(int32_t));
      host.insert(host.end(), positions, positions + n);
    }
    upload_lengths(layer);
    return;
  }
  if (!all_f32()) {
    // Every head's keys and values quantized in one launch (the constructor refused more heads than it takes).
    DeviceStoredAppendTarget target;
    target.keys = layer.keys.data(), target.values = layer.values.data(), target.positions = layer.positions.data();
    target.lengths = layer.lengths.data(), target.capacity = layer.capacity;
    target.key_type = key_type_, target.value_type = value_type_;
    target.n_kv_heads = static_cast<int>(heads), target.head_dim = static_cast<int>(d);
    for (std::size_t g = 0; g < heads; ++g) target.starts[g] = static_cast<int>(layer.host_positions[g].size());
    target.error_sums = errors_.data() + error_offset(layer_index, KVPart::Keys, false);
    if (append_positions_.size() < static_cast<std::size_t>(n)) append_positions_.resize(n);
    staging_.upload(append_positions_.data(), positions, n * sizeof(int32_t));
    append_stored_rows(k, v, append_positions_.data(), n, target, stream_);
    for (auto& host : layer.host_positions) host.insert(host.end(), positions, positions + n);
    return;
  }
  if (heads <= static_cast<std::size_t>(kMaxAppendHeads)) {
    // One upload of the positions and one launch for every head, keys, values, positions and lengths.
    DeviceAppendTarget target;
    target.keys = reinterpret_cast<float*>(layer.keys.data());
    target.values = reinterpret_cast<float*>(layer.values.data());
    target.positions = layer.positions.data(), target.lengths = layer.lengths.data(), target.capacity = layer.capacity;
    target.n_kv_heads = static_cast<int>(heads), target.head_dim = static_cast<int>(d);
    for (std::size_t g = 0; g < heads; ++g) target.starts[g] = static_cast<int>(layer.host_positions[g].size());
    if (append_positions_.size() < static_cast<std::size_t>(n)) append_positions_.resize(n);
    staging_.upload(append_positions_.data(), positions, n * sizeof(int32_t));
    append_rows(k, v, append_positions_.data(), n, target, stream_);
    for (auto& host : layer.host_positions) host.insert(host.end(), positions, positions + n);
    return;
  }
  const std::size_t row_bytes = d * sizeof(float);
  for (std::size_t g = 0; g < heads; ++g) {
    auto& host = layer.host_positions[g];
    const std::size_t first = g * layer.capacity + host.size();
    // k and v are [n][n_kv_heads][head_dim]: head g's rows are n_kv_heads rows apart.
    check_cuda(cudaMemcpy2DAsync(reinterpret_cast<float*>(layer.keys.data()) + first * d, row_bytes, k + g * d,
                                 heads * row_bytes, row_bytes, n, cudaMemcpyDeviceToDevice, stream_),
               "KV append (keys)");
    check_cuda(cudaMemcpy2DAsync(reinterpret_cast<float*>(layer.values.data()) + first * d, row_bytes, v + g * d,
                                 heads * row_bytes, row_bytes, n, cudaMemcpyDeviceToDevice, stream_),
               "KV append (values)");
    staging_.upload(layer.positions.data() + first, positions, n * sizeof(int32_t));
    host.insert(host.end(), positions, positions + n);
  }
  upload_lengths(layer);
}

void CudaKVStorage::edit_f32(Layer& layer, int kv_head, std::span<const int32_t> keep, std::span<const RowMerge> merges,
                             std::span<const ValueMerge> value_merges) {
  const int d = head_dim();
  float* keys = reinterpret_cast<float*>(layer.keys.data()) + static_cast<std::size_t>(kv_head) * layer.capacity * d;
  float* values =
      reinterpret_cast<float*>(layer.values.data()) + static_cast<std::size_t>(kv_head) * layer.capacity * d;
  // A value merge is one merge group per target, V[t] = 1 * V[t] + w * V[source], on the values only. Its
  // targets are distinct, so one launch per value merge keeps the list order the CPU applies.
  const auto entry = [](int32_t i) { return i; };
  for (const ValueMerge& m : value_merges)
    merge_rows(values, d,
               upload_groups(value_merge_groups(m, entry), edit_offsets_, edit_members_, edit_weights_, staging_),
               stream_);
  if (!merges.empty()) {
    const DeviceMergeGroups groups =
        upload_groups(row_merge_groups(merges, entry), edit_offsets_, edit_members_, edit_weights_, staging_);
    merge_rows(keys, d, groups, stream_);
    merge_rows(values, d, groups, stream_);
  }
  const int kept = static_cast<int>(keep.size());
  upload_into(edit_keep_, std::vector<int32_t>(keep.begin(), keep.end()), staging_);
  if (edit_rows_.size() < static_cast<std::size_t>(kept) * d) edit_rows_.resize(static_cast<std::size_t>(kept) * d);
  for (float* rows : {keys, values}) {
    gather_rows(rows, edit_keep_.data(), kept, d, edit_rows_.data(), stream_);
    check_cuda(cudaMemcpyAsync(rows, edit_rows_.data(), static_cast<std::size_t>(kept) * d * sizeof(float),
                               cudaMemcpyDeviceToDevice, stream_),
               "KV edit (compact)");
  }
}

// The stored types: only the rows a merge reads or writes are dequantized (into float32 scratch, slot s holding
// row involved[s]); the merges run there with the f32 kernels, in the CPU cache's order (value merges one launch
// each in list order, then the row merges), and each merged row is stored once. Compaction gathers whole rows.
void CudaKVStorage::edit_stored(Layer& layer, int layer_index, int kv_head, std::span<const int32_t> keep,
                                std::span<const RowMerge> merges, std::span<const ValueMerge> value_merges) {
  const int d = head_dim();
  const std::size_t key_row = part_row_bytes(KVPart::Keys), value_row = part_row_bytes(KVPart::Values);
  uint8_t* keys = layer.keys.data() + static_cast<std::size_t>(kv_head) * layer.capacity * key_row;
  uint8_t* values = layer.values.data() + static_cast<std::size_t>(kv_head) * layer.capacity * value_row;
  if (!merges.empty() || !value_merges.empty()) {
    std::vector<int32_t> involved, key_targets, value_targets;
    for (const ValueMerge& m : value_merges) {
      involved.push_back(m.source);
      involved.insert(involved.end(), m.targets.begin(), m.targets.end());
      value_targets.insert(value_targets.end(), m.targets.begin(), m.targets.end());
    }
    for (const RowMerge& m : merges) {
      involved.push_back(m.target);
      involved.insert(involved.end(), m.sources.begin(), m.sources.end());
      key_targets.push_back(m.target);
      value_targets.push_back(m.target);
    }
    for (auto* list : {&involved, &key_targets, &value_targets}) {
      std::sort(list->begin(), list->end());
      list->erase(std::unique(list->begin(), list->end()), list->end());
    }
    auto slot = [&](int32_t i) {
      return static_cast<int32_t>(std::lower_bound(involved.begin(), involved.end(), i) - involved.begin());
    };
    const int n = static_cast<int>(involved.size());
    upload_into(merge_index_, involved, staging_);
    if (merge_keys_.size() < static_cast<std::size_t>(n) * d) merge_keys_.resize(static_cast<std::size_t>(n) * d);
    if (merge_values_.size() < static_cast<std::size_t>(n) * d) merge_values_.resize(static_cast<std::size_t>(n) * d);
    dequantize_stored_rows(keys, key_type_, d, merge_index_.data(), n, merge_keys_.data(), stream_);
    dequantize_stored_rows(values, value_type_, d, merge_index_.data(), n, merge_values_.data(), stream_);
    for (const ValueMerge& m : value_merges)
      merge_rows(merge_values_.data(), d,
                 upload_groups(value_merge_groups(m, slot), edit_offsets_, edit_members_, edit_weights_, staging_),
                 stream_);
    if (!merges.empty()) {
      const DeviceMergeGroups groups =
          upload_groups(row_merge_groups(merges, slot), edit_offsets_, edit_members_, edit_weights_, staging_);
      merge_rows(merge_keys_.data(), d, groups, stream_);
      merge_rows(merge_values_.data(), d, groups, stream_);
    }
    auto store = [&](const std::vector<int32_t>& targets, const float* scratch, RowType type, uint8_t* rows,
                     KVPart part) {
      if (targets.empty()) return;
      std::vector<int32_t> slots;
      for (int32_t t : targets) slots.push_back(slot(t));
      upload_into(merge_targets_, targets, staging_);
      upload_into(merge_target_slots_, slots, staging_);
      quantize_stored_rows(scratch, merge_target_slots_.data(), merge_targets_.data(), static_cast<int>(targets.size()),
                           type, d, rows, errors_.data() + error_offset(layer_index, part, true), stream_);
    };
    store(key_targets, merge_keys_.data(), key_type_, keys, KVPart::Keys);
    store(value_targets, merge_values_.data(), value_type_, values, KVPart::Values);
  }
  const int kept = static_cast<int>(keep.size());
  upload_into(edit_keep_, std::vector<int32_t>(keep.begin(), keep.end()), staging_);
  for (const auto& [rows, row_bytes] : {std::pair{keys, key_row}, std::pair{values, value_row}}) {
    const std::size_t bytes = static_cast<std::size_t>(kept) * row_bytes;
    if (edit_bytes_.size() < bytes) edit_bytes_.resize(bytes);
    gather_stored_rows(rows, edit_keep_.data(), kept, static_cast<int>(row_bytes), edit_bytes_.data(), stream_);
    check_cuda(cudaMemcpyAsync(rows, edit_bytes_.data(), bytes, cudaMemcpyDeviceToDevice, stream_),
               "KV edit (compact)");
  }
}

void CudaKVStorage::edit(int layer_index, int kv_head, std::span<const int32_t> keep, std::span<const RowMerge> merges,
                         std::span<const ValueMerge> value_merges) {
  Layer& layer = checked(layer_index, kv_head, "edit");
  if (kivi_)
    edit_kivi(layer, layer_index, kv_head, keep, merges, value_merges);
  else if (all_f32())
    edit_f32(layer, kv_head, keep, merges, value_merges);
  else
    edit_stored(layer, layer_index, kv_head, keep, merges, value_merges);
  const int kept = static_cast<int>(keep.size());
  auto& host = layer.host_positions[kv_head];
  std::vector<int32_t> kept_positions(kept);
  for (int i = 0; i < kept; ++i) kept_positions[i] = host[keep[i]];
  host = std::move(kept_positions);
  staging_.upload(layer.positions.data() + static_cast<std::size_t>(kv_head) * layer.capacity, host.data(),
                  kept * sizeof(int32_t));
  upload_lengths(layer);
  int longest = 0;
  for (const auto& p : layer.host_positions) longest = std::max(longest, static_cast<int>(p.size()));
  // Shrinking to exactly `longest` would make the next append grow again and the next eviction shrink again,
  // every decode step; a quarter of headroom keeps a steady budget in one allocation.
  if (longest < layer.capacity * 3 / 4 && layer.capacity > kMinCapacity)
    reallocate(layer, std::max(longest + longest / 4 + 1, kMinCapacity));
}

void CudaKVStorage::read_rows(int layer_index, int kv_head, KVPart part, int first, int count, float* host_out) const {
  const Layer& layer = checked(layer_index, kv_head, "read_rows");
  const int length = static_cast<int>(layer.host_positions[kv_head].size());
  if (first < 0 || count < 0 || first + count > length)
    throw Error("CUDA KV storage read_rows: rows " + std::to_string(first) + ".." + std::to_string(first + count) +
                " outside the head's " + std::to_string(length) + " entries");
  if (count == 0) return;
  if (kivi_) {
    // Rows of the float32 residual (what a decode step adds) come back as they are; otherwise the part's bytes
    // come back and are read by the function attention.cu reads them with.
    const KiviHeadPart& stored = layer.kivi[part == KVPart::Values][kv_head];
    if (static_cast<std::size_t>(first) >= stored.state.quantized) {
      const std::size_t d = head_dim();
      check_cuda(cudaMemcpyAsync(host_out, stored.residual[stored.current].data() + (first - stored.state.quantized) * d,
                                 count * d * sizeof(float), cudaMemcpyDeviceToHost, stream_),
                 "KV read_rows (KIVI residual)");
      check_cuda(cudaStreamSynchronize(stream_), "KV read_rows");
      return;
    }
    const KiviHostPart host = download_kivi(stored);
    kivi_load_rows(host.state, host.packed.data(), host.residual.data(), first, count, host_out);
    return;
  }
  const RowType type = part == KVPart::Keys ? key_type_ : value_type_;
  const std::size_t row_bytes = part_row_bytes(part);
  const uint8_t* rows = (part == KVPart::Keys ? layer.keys : layer.values).data() +
                        (static_cast<std::size_t>(kv_head) * layer.capacity + first) * row_bytes;
  if (type == RowType::F32) {
    check_cuda(cudaMemcpyAsync(host_out, rows, count * row_bytes, cudaMemcpyDeviceToHost, stream_), "KV read_rows");
    check_cuda(cudaStreamSynchronize(stream_), "KV read_rows");
    return;
  }
  // The stored bytes come back and are dequantized here by the CPU cache's own function, so policies read the
  // same floats as on the CPU.
  std::vector<uint8_t> bytes(count * row_bytes);
  check_cuda(cudaMemcpyAsync(bytes.data(), rows, bytes.size(), cudaMemcpyDeviceToHost, stream_), "KV read_rows");
  check_cuda(cudaStreamSynchronize(stream_), "KV read_rows");
  const int d = head_dim();
  for (int r = 0; r < count; ++r)
    dequantize_cache_row(type, bytes.data() + r * row_bytes, d, host_out + static_cast<std::size_t>(r) * d);
}

std::size_t CudaKVStorage::layer_bytes(int layer) const {
  if (kivi_) {
    std::size_t total = 0;
    for (const auto& heads : checked(layer, 0, "layer_bytes").kivi)
      for (const KiviHeadPart& head : heads)
        total += head.packed.size() + (head.residual[0].size() + head.residual[1].size()) * sizeof(float);
    return total;
  }
  return static_cast<std::size_t>(checked(layer, 0, "layer_bytes").capacity) * n_kv_heads() *
         (part_row_bytes(KVPart::Keys) + part_row_bytes(KVPart::Values));
}

StorageError CudaKVStorage::storage_error(int layer, KVPart part, bool as_merged) const {
  checked(layer, 0, "storage_error");
  double sums[2] = {0.0, 0.0};
  check_cuda(cudaMemcpyAsync(sums, errors_.data() + error_offset(layer, part, as_merged), sizeof sums,
                             cudaMemcpyDeviceToHost, stream_),
             "KV storage_error");
  check_cuda(cudaStreamSynchronize(stream_), "KV storage_error");
  StorageError error{sums[0], sums[1]};
  if (kivi_ && as_merged) {
    const StorageError& host = kivi_merge_errors_[layer][part == KVPart::Values];
    error.error += host.error;
    error.reference += host.reference;
  }
  return error;
}

std::size_t CudaKVStorage::entry_bytes(int layer, int kv_head) const {
  const Layer& l = checked(layer, kv_head, "entry_bytes");
  if (!kivi_) return KVStorage::entry_bytes(layer, kv_head);
  return l.kivi[0][kv_head].state.entry_bytes() + l.kivi[1][kv_head].state.entry_bytes();
}

std::size_t CudaKVStorage::paged_bytes(int layer, int kv_head, int page_tokens) const {
  const Layer& l = checked(layer, kv_head, "paged_bytes");
  if (!kivi_) return KVStorage::paged_bytes(layer, kv_head, page_tokens);
  return l.kivi[0][kv_head].state.paged_bytes(page_tokens) + l.kivi[1][kv_head].state.paged_bytes(page_tokens);
}

std::vector<uint8_t> CudaKVStorage::stored_bytes(int layer_index, int kv_head, KVPart part) const {
  const Layer& layer = checked(layer_index, kv_head, "stored_bytes");
  if (kivi_) throw Error("CUDA KV storage stored_bytes: a KIVI cache has no fixed rows (use kivi_part)");
  const std::size_t row_bytes = part_row_bytes(part);
  std::vector<uint8_t> bytes(layer.host_positions[kv_head].size() * row_bytes);
  if (bytes.empty()) return bytes;
  check_cuda(cudaMemcpyAsync(bytes.data(),
                             (part == KVPart::Keys ? layer.keys : layer.values).data() +
                                 static_cast<std::size_t>(kv_head) * layer.capacity * row_bytes,
                             bytes.size(), cudaMemcpyDeviceToHost, stream_),
             "KV stored_bytes");
  check_cuda(cudaStreamSynchronize(stream_), "KV stored_bytes");
  return bytes;
}

DeviceLayerCache CudaKVStorage::layer_view(int layer_index) const {
  const Layer& layer = checked(layer_index, 0, "layer_view");
  DeviceLayerCache view;
  view.keys = layer.keys.data();
  view.values = layer.values.data();
  view.positions = layer.positions.data();
  view.lengths = layer.lengths.data();
  view.capacity = layer.capacity;
  view.key_type = key_type_;
  view.value_type = value_type_;
  if (kivi_) {
    view.keys = view.values = nullptr;
    view.kivi_keys = layer.kivi_heads.data();
    view.kivi_values = layer.kivi_heads.data() + n_kv_heads();
    view.kivi_key_bits = kivi_bits(type().keys);
    view.kivi_value_bits = kivi_bits(type().values);
    view.kivi_group = type().kivi.group;
  }
  for (const auto& p : layer.host_positions) view.max_length = std::max(view.max_length, static_cast<int>(p.size()));
  return view;
}

// Every head's keys and values in two launches: the groups and rows the residual rule releases quantized (read
// from the residual and the new rows), then the rows that stay float32 copied into the other residual buffer
// (or, when nothing left the residual, the new rows after the held ones).
void CudaKVStorage::append_kivi(Layer& layer, int layer_index, const float* k, const float* v, int n) {
  const int d = head_dim(), heads = n_kv_heads();
  std::vector<KiviQuantizeTask> tasks;
  std::vector<ByteCopy> copies;
  for (KVPart p : {KVPart::Keys, KVPart::Values}) {
    double* error_sums = errors_.data() + error_offset(layer_index, p, false);
    for (int g = 0; g < heads; ++g) {
      KiviHeadPart& part = layer.kivi[p == KVPart::Values][g];
      const KiviAppendShape shape = kivi_append_shape(part.state, n);
      grow_keeping(part.packed, part.state.packed_bytes + shape.packed_growth, part.state.packed_bytes, stream_);
      DeviceBuffer<float>& held = part.residual[part.current];
      const std::size_t held_floats = part.state.residual_rows * d, after = shape.residual_after * d;
      const bool in_place = shape.ready == 0 && held.size() >= after;
      DeviceBuffer<float>& out = in_place ? held : part.residual[1 - part.current];
      if (!in_place && out.size() < after) out.resize(std::max(after, held_floats + held_floats / 2 + 64));
      const float* fresh = (p == KVPart::Keys ? k : v) + static_cast<std::size_t>(g) * d;
      kivi_plan_append(part.state, shape, part.packed.data(), held.data(), fresh, heads * d, out.data(), error_sums,
                       tasks, copies);
      if (!in_place) part.current = 1 - part.current;
      if (p == KVPart::Keys && shape.ready > 0) upload_group_tables(part);
    }
  }
  if (!tasks.empty()) {
    upload_into(kivi_tasks_, tasks, staging_);
    kivi_quantize(kivi_tasks_.data(), static_cast<int>(tasks.size()), d, type().kivi.group, stream_);
  }
  if (!copies.empty()) {
    upload_into(kivi_copies_, copies, staging_);
    copy_byte_ranges(kivi_copies_.data(), static_cast<int>(copies.size()), stream_);
  }
  upload_kivi_heads(layer);
}

void CudaKVStorage::edit_kivi(Layer& layer, int layer_index, int kv_head, std::span<const int32_t> keep,
                              std::span<const RowMerge> merges, std::span<const ValueMerge> value_merges) {
  KiviHeadPart& keys = layer.kivi[0][kv_head];
  KiviHeadPart& values = layer.kivi[1][kv_head];
  if (!merges.empty() || !value_merges.empty()) {
    // Merges are the CPU cache's code on this head's bytes: one download and one upload per part.
    KiviHostPart host_keys = download_kivi(keys), host_values = download_kivi(values);
    kivi_edit_on_host(host_keys, host_values, keep, merges, value_merges, kivi_merge_errors_[layer_index].data());
    upload_kivi(keys, host_keys);
    upload_kivi(values, host_values);
  } else {
    // Eviction: each part's kept bytes gathered into scratch (keys first, then values) and the kept residual rows
    // into the other residual buffer, in one launch; then the scratch copied back over each packed store.
    const std::size_t key_bytes = keys.state.packed_bytes, value_bytes = values.state.packed_bytes;
    if (edit_bytes_.size() < key_bytes + value_bytes) edit_bytes_.resize(key_bytes + value_bytes);
    std::vector<ByteCopy> copies;
    std::size_t scratch_at = 0;
    for (KiviHeadPart* part : {&keys, &values}) {
      DeviceBuffer<float>& out = part->residual[1 - part->current];
      const std::size_t rows = part->state.residual_rows * head_dim();
      if (out.size() < rows) out.resize(rows);
      kivi_plan_compact(part->state, keep, part->packed.data(), edit_bytes_.data() + scratch_at,
                        part->residual[part->current].data(), out.data(), copies);
      part->current = 1 - part->current;
      scratch_at += part == &keys ? key_bytes : 0;
    }
    if (!copies.empty()) {
      upload_into(kivi_copies_, copies, staging_);
      copy_byte_ranges(kivi_copies_.data(), static_cast<int>(copies.size()), stream_);
    }
    scratch_at = 0;
    for (KiviHeadPart* part : {&keys, &values}) {
      if (part->state.packed_bytes > 0)
        check_cuda(cudaMemcpyAsync(part->packed.data(), edit_bytes_.data() + scratch_at, part->state.packed_bytes,
                                   cudaMemcpyDeviceToDevice, stream_),
                   "KV edit (KIVI compact)");
      scratch_at += part == &keys ? key_bytes : 0;
    }
  }
  upload_group_tables(keys);
  upload_kivi_heads(layer);
}

KiviHostPart CudaKVStorage::download_kivi(const KiviHeadPart& part) const {
  KiviHostPart host;
  host.state = part.state;
  host.packed.resize(part.state.packed_bytes);
  host.residual.resize(part.state.residual_rows * head_dim());
  if (!host.packed.empty())
    check_cuda(cudaMemcpyAsync(host.packed.data(), part.packed.data(), host.packed.size(), cudaMemcpyDeviceToHost,
                               stream_),
               "KV KIVI download (packed)");
  if (!host.residual.empty())
    check_cuda(cudaMemcpyAsync(host.residual.data(), part.residual[part.current].data(),
                               host.residual.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_),
               "KV KIVI download (residual)");
  check_cuda(cudaStreamSynchronize(stream_), "KV KIVI download");
  return host;
}

void CudaKVStorage::upload_kivi(KiviHeadPart& part, const KiviHostPart& host) {
  if (part.packed.size() < host.packed.size()) part.packed.resize(host.packed.size());
  DeviceBuffer<float>& residual = part.residual[part.current];
  if (residual.size() < host.residual.size()) residual.resize(host.residual.size());
  if (!host.packed.empty())
    check_cuda(cudaMemcpyAsync(part.packed.data(), host.packed.data(), host.packed.size(), cudaMemcpyHostToDevice,
                               stream_),
               "KV KIVI upload (packed)");
  if (!host.residual.empty())
    check_cuda(cudaMemcpyAsync(residual.data(), host.residual.data(), host.residual.size() * sizeof(float),
                               cudaMemcpyHostToDevice, stream_),
               "KV KIVI upload (residual)");
  check_cuda(cudaStreamSynchronize(stream_), "KV KIVI upload");  // `host` is freed by the caller
  part.state = host.state;
}

void CudaKVStorage::upload_group_tables(KiviHeadPart& part) {
  if (!part.state.layout.per_channel || part.state.group_sizes.empty()) return;
  const std::vector<int32_t> firsts = part.state.group_firsts(), offsets = part.state.group_offsets();
  for (auto* table : {&part.group_first, &part.group_offset})
    if (table->size() < firsts.size()) table->resize(std::max(firsts.size(), 2 * table->size()));
  staging_.upload(part.group_first.data(), firsts);
  staging_.upload(part.group_offset.data(), offsets);
}

void CudaKVStorage::upload_kivi_heads(Layer& layer) {
  std::vector<DeviceKiviHead> heads;
  for (const auto& parts : layer.kivi)
    for (const KiviHeadPart& part : parts) {
      DeviceKiviHead h;
      h.packed = part.packed.data();
      h.group_first = part.group_first.data();
      h.group_offset = part.group_offset.data();
      h.residual = part.residual[part.current].data();
      h.n_groups = static_cast<int>(part.state.group_sizes.size());
      h.quantized = static_cast<int>(part.state.quantized);
      heads.push_back(h);
    }
  staging_.upload(layer.kivi_heads.data(), heads);
}

KiviHostPart CudaKVStorage::kivi_part(int layer, int kv_head, KVPart part) const {
  const Layer& l = checked(layer, kv_head, "kivi_part");
  if (!kivi_) throw Error("CUDA KV storage kivi_part: cache type " + cache_type_name(type()) + " is not KIVI");
  return download_kivi(l.kivi[part == KVPart::Values][kv_head]);
}

}  // namespace kvscope::kernels::cuda
