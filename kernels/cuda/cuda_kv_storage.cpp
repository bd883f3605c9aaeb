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

}  // namespace

CudaKVStorage::CudaKVStorage(int n_layers, int n_kv_heads, int head_dim, KVCacheTypes type, cudaStream_t stream)
    : KVStorage(n_layers, n_kv_heads, head_dim, type), stream_(stream), staging_(stream, kStagingBytes),
      layers_(n_layers) {
  if (type != CacheType::F32)
    throw UsageError(std::string("the CUDA backend stores the cache as f32 only; cache type '") +
                     cache_type_name(type) + "' is not implemented on the device yet");
  if (head_dim > kMaxAttentionHeadDim)
    throw UsageError("the CUDA backend handles head_dim up to " + std::to_string(kMaxAttentionHeadDim) +
                     ", the model has " + std::to_string(head_dim));
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
  const std::size_t d = head_dim(), heads = n_kv_heads();
  DeviceBuffer<float> keys(heads * capacity * d), values(heads * capacity * d);
  DeviceBuffer<int32_t> positions(heads * capacity);
  const int rows = std::min(layer.capacity, capacity);
  if (rows > 0) {
    const std::size_t row_bytes = d * sizeof(float);
    check_cuda(cudaMemcpy2DAsync(keys.data(), capacity * row_bytes, layer.keys.data(), layer.capacity * row_bytes,
                                 rows * row_bytes, heads, cudaMemcpyDeviceToDevice, stream_),
               "KV reallocate (keys)");
    check_cuda(cudaMemcpy2DAsync(values.data(), capacity * row_bytes, layer.values.data(), layer.capacity * row_bytes,
                                 rows * row_bytes, heads, cudaMemcpyDeviceToDevice, stream_),
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

void CudaKVStorage::append(int layer_index, const float* k, const float* v, int n, const int32_t* positions) {
  Layer& layer = checked(layer_index, 0, "append");
  if (n <= 0) return;
  const std::size_t d = head_dim(), heads = n_kv_heads();
  int longest = 0;
  for (const auto& p : layer.host_positions) longest = std::max(longest, static_cast<int>(p.size()));
  if (longest + n > layer.capacity) reallocate(layer, std::max({longest + n, 2 * layer.capacity, kMinCapacity}));
  if (heads <= static_cast<std::size_t>(kMaxAppendHeads)) {
    // One upload of the positions and one launch for every head, keys, values, positions and lengths.
    DeviceAppendTarget target;
    target.keys = layer.keys.data(), target.values = layer.values.data(), target.positions = layer.positions.data();
    target.lengths = layer.lengths.data(), target.capacity = layer.capacity;
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
    check_cuda(cudaMemcpy2DAsync(layer.keys.data() + first * d, row_bytes, k + g * d, heads * row_bytes, row_bytes, n,
                                 cudaMemcpyDeviceToDevice, stream_),
               "KV append (keys)");
    check_cuda(cudaMemcpy2DAsync(layer.values.data() + first * d, row_bytes, v + g * d, heads * row_bytes, row_bytes, n,
                                 cudaMemcpyDeviceToDevice, stream_),
               "KV append (values)");
    staging_.upload(layer.positions.data() + first, positions, n * sizeof(int32_t));
    host.insert(host.end(), positions, positions + n);
  }
  upload_lengths(layer);
}

void CudaKVStorage::edit(int layer_index, int kv_head, std::span<const int32_t> keep, std::span<const RowMerge> merges,
                         std::span<const ValueMerge> value_merges) {
  Layer& layer = checked(layer_index, kv_head, "edit");
  const int d = head_dim();
  float* keys = layer.keys.data() + static_cast<std::size_t>(kv_head) * layer.capacity * d;
  float* values = layer.values.data() + static_cast<std::size_t>(kv_head) * layer.capacity * d;
  // A value merge is one merge group per target, V[t] = 1 * V[t] + w * V[source], on the values only. Its
  // targets are distinct, so one launch per value merge keeps the list order the CPU applies.
  for (const ValueMerge& m : value_merges) {
    std::vector<int32_t> offsets{0}, members;
    std::vector<float> weights;
    for (int32_t t : m.targets) {
      members.insert(members.end(), {t, m.source});
      weights.insert(weights.end(), {1.0f, m.weight});
      offsets.push_back(static_cast<int32_t>(members.size()));
    }
    upload_into(edit_offsets_, offsets, staging_);
    upload_into(edit_members_, members, staging_);
    upload_into(edit_weights_, weights, staging_);
    merge_rows(values, d, {edit_offsets_.data(), edit_members_.data(), edit_weights_.data(),
                           static_cast<int>(m.targets.size())}, stream_);
  }
  if (!merges.empty()) {
    std::vector<int32_t> offsets{0}, members;
    std::vector<float> weights;
    for (const RowMerge& m : merges) {
      members.push_back(m.target);
      members.insert(members.end(), m.sources.begin(), m.sources.end());
      weights.insert(weights.end(), m.weights.begin(), m.weights.end());
      offsets.push_back(static_cast<int32_t>(members.size()));
    }
    upload_into(edit_offsets_, offsets, staging_);
    upload_into(edit_members_, members, staging_);
    upload_into(edit_weights_, weights, staging_);
    const DeviceMergeGroups groups{edit_offsets_.data(), edit_members_.data(), edit_weights_.data(),
                                   static_cast<int>(merges.size())};
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
  const DeviceBuffer<float>& rows = part == KVPart::Keys ? layer.keys : layer.values;
  const std::size_t d = head_dim();
  check_cuda(cudaMemcpyAsync(host_out, rows.data() + (static_cast<std::size_t>(kv_head) * layer.capacity + first) * d,
                             count * d * sizeof(float), cudaMemcpyDeviceToHost, stream_),
             "KV read_rows");
  check_cuda(cudaStreamSynchronize(stream_), "KV read_rows");
}

std::size_t CudaKVStorage::layer_bytes(int layer) const {
  return 2 * static_cast<std::size_t>(checked(layer, 0, "layer_bytes").capacity) * n_kv_heads() * head_dim() *
         sizeof(float);
}

DeviceLayerCache CudaKVStorage::layer_view(int layer_index) const {
  const Layer& layer = checked(layer_index, 0, "layer_view");
  DeviceLayerCache view;
  view.keys = layer.keys.data();
  view.values = layer.values.data();
  view.positions = layer.positions.data();
  view.lengths = layer.lengths.data();
  view.capacity = layer.capacity;
  for (const auto& p : layer.host_positions) view.max_length = std::max(view.max_length, static_cast<int>(p.size()));
  return view;
}

}  // namespace kvscope::kernels::cuda
