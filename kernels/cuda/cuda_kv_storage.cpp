#include "kernels/cuda/cuda_kv_storage.h"

#include <algorithm>
#include <string>

#include "kernels/cuda/cache_ops.h"
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

}  // namespace

CudaKVStorage::CudaKVStorage(int n_layers, int n_kv_heads, int head_dim, KVCacheTypes type, cudaStream_t stream)
    : KVStorage(n_layers, n_kv_heads, head_dim, type), stream_(stream), staging_(stream, kStagingBytes),
      layers_(n_layers) {
  for (CacheType part_type : {type.keys, type.values})
    if (is_kivi(part_type))
      throw UsageError(std::string("cache type ") + cache_type_name(part_type) +
                       " is not implemented on the CUDA backend: KIVI's key groups span tokens and are re-packed on "
                       "eviction, and its float32 residual changes form at every append, which the device cache "
                       "(rows of one fixed size) does not store; use --device cpu for KIVI, or f16, bf16, q8_0, q4_0 "
                       "or q4_1 on cuda");
  if (type.rotate_keys || type.rotate_values)
    throw UsageError("cache type " + cache_type_name(type) +
                     " rotates the stored rows (Hadamard), which the CUDA backend does not do; use --device cpu, "
                     "or drop rot=hadamard / --cache-rotation on cuda");
  check_cache_types(type, head_dim);
  if (head_dim > kMaxAttentionHeadDim)
    throw UsageError("the CUDA backend handles head_dim up to " + std::to_string(kMaxAttentionHeadDim) +
                     ", the model has " + std::to_string(head_dim));
  key_type_ = row_type(type.keys);
  value_type_ = row_type(type.values);
  if (!all_f32() && n_kv_heads > kMaxAppendHeads)
    throw UsageError("the CUDA backend stores cache type " + cache_type_name(type) + " for up to " +
                     std::to_string(kMaxAppendHeads) + " KV heads, the model has " + std::to_string(n_kv_heads) +
                     " (use --cache-type f32 on cuda, or --device cpu)");
  errors_.resize(static_cast<std::size_t>(std::max(n_layers, 1)) * 8);
  check_cuda(cudaMemsetAsync(errors_.data(), 0, errors_.size() * sizeof(double), stream_), "KV storage errors");
  for (Layer& layer : layers_) {
    layer.host_positions.assign(n_kv_heads, {});
    layer.lengths.resize(n_kv_heads);
    upload_lengths(layer);
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
  if (rows > 0) {
    check_cuda(cudaMemcpy2DAsync(keys.data(), capacity * key_row, layer.keys.data(), layer.capacity * key_row,
                                 rows * key_row, heads, cudaMemcpyDeviceToDevice, stream_),
               "KV reallocate (keys)");
    check_cuda(cudaMemcpy2DAsync(values.data(), capacity * value_row, layer.values.data(), layer.capacity * value_row,
                                 rows * value_row, heads, cudaMemcpyDeviceToDevice, stream_),
               "KV reallocate (values)");
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
  if (all_f32())
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
  return {sums[0], sums[1]};
}

std::vector<uint8_t> CudaKVStorage::stored_bytes(int layer_index, int kv_head, KVPart part) const {
  const Layer& layer = checked(layer_index, kv_head, "stored_bytes");
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
  for (const auto& p : layer.host_positions) view.max_length = std::max(view.max_length, static_cast<int>(p.size()));
  return view;
}

}  // namespace kvscope::kernels::cuda
