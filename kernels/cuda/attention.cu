// Two kernels. The output pass is flash-attention-like: a block holds kRowWarps query rows of one head (a
// warp per row) and streams the keys through shared memory in tiles of 32, keeping an online softmax per
// row (kernels/common/softmax_math.h), so no score matrix reaches global memory. It leaves each row's
// log-sum-exp. The side-output pass runs only when someone asked: a thread per key recomputes its score
// against every query in order and turns it into a probability with that row's log-sum-exp, so column
// sums are summed in query order (deterministic, no atomics) and window rows are written coalesced.
#include "kernels/cuda/attention.h"

#include <algorithm>
#include <string>

#include "kernels/common/softmax_math.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/error.h"

namespace kvscope::kernels::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kRowWarps = 4;                       // query rows per block in the output pass
constexpr int kKeyTile = kWarp;                    // keys per shared-memory tile: one per lane
constexpr int kPadded = kMaxAttentionHeadDim + 1;  // a key row's stride: lanes read different banks
constexpr int kValuesPerLane = kMaxAttentionHeadDim / kWarp;
constexpr int kKeysPerBlock = 64;  // side-output pass: keys (threads) per block
constexpr int kQueryChunk = 16;    // side-output pass: queries staged in shared memory at once

__device__ inline float warp_max(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ inline float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Rows [first, first + tile_rows) of one head's stored rows (not float32 both) into a shared tile of row stride
// `stride` floats, a thread per unit (a 32-value block is dequantized whole, kernels/common/cache_rows.h); rows at
// or past `end` become zeros. The cache is read in place: only the tile holds floats.
__device__ inline void load_stored_tile(const uint8_t* rows, RowType type, int d, int first, int end, int tile_rows,
                                        float* tile, int stride) {
  const int units = row_units(type, d), values = row_unit_values(type);
  const int64_t bytes = stored_row_bytes(type, d);
  for (int i = threadIdx.x; i < tile_rows * units; i += blockDim.x) {
    const int j = i / units, u = i % units;
    float* dst = tile + j * stride + u * values;
    if (first + j < end)
      dequantize_cache_unit(type, rows + (first + j) * bytes, u, dst);
    else
      for (int e = 0; e < values; ++e) dst[e] = 0.0f;
  }
}

// Rows [first, first + tile_rows) of KV head g's KIVI part into a shared tile, a thread per value read in place
// (kivi_entry_value: its key group, value row or residual row); rows at or past `end` become zeros.
__device__ inline void load_kivi_tile(const DeviceKiviHead* heads, int g, bool per_channel, int bits, int group, int d,
                                      int first, int end, int tile_rows, float* tile, int stride) {
  const DeviceKiviHead head = heads[g];
  for (int i = threadIdx.x; i < tile_rows * d; i += blockDim.x) {
    const int j = i / d, c = i % d;
    tile[j * stride + c] = first + j < end ? kivi_entry_value(head, per_channel, bits, group, d, first + j, c) : 0.0f;
  }
}

// A head's rows of `type` as bytes (float32 rows included).
__device__ inline const uint8_t* head_rows(const void* rows, RowType type, int g, int capacity, int d) {
  return static_cast<const uint8_t*>(rows) + static_cast<int64_t>(g) * capacity * stored_row_bytes(type, d);
}

// blockIdx.z picks a slice of the keys when key_splits > 1 (decode: one query per head leaves most of the GPU
// idle otherwise); each slice then leaves its unnormalised partial state for attention_combine_kernel.
__global__ void attention_output_kernel(const float* q, const int32_t* query_positions, DeviceLayerCache cache,
                                        AttentionShape shape, float* out, float* log_sum_exp, int key_splits,
                                        float* partials) {
  __shared__ float q_tile[kRowWarps][kMaxAttentionHeadDim];
  __shared__ float k_tile[kKeyTile][kPadded];
  __shared__ float v_tile[kKeyTile][kMaxAttentionHeadDim];
  __shared__ int32_t pos_tile[kKeyTile];
  __shared__ int32_t block_last_position;

  const int d = shape.head_dim;
  const int h = blockIdx.y;
  const int g = h / (shape.n_heads / shape.n_kv_heads);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int row = blockIdx.x * kRowWarps + warp;
  const bool active = row < shape.n_queries;
  const int length = cache.lengths[g];
  const bool f32_rows = !cache.kivi_keys && cache.key_type == RowType::F32 && cache.value_type == RowType::F32;
  const float* keys = static_cast<const float*>(cache.keys) + static_cast<int64_t>(g) * cache.capacity * d;
  const float* values = static_cast<const float*>(cache.values) + static_cast<int64_t>(g) * cache.capacity * d;
  const int32_t* positions = cache.positions + static_cast<int64_t>(g) * cache.capacity;
  const int q_stride = shape.n_heads * d;
  const int tiles = (length + kKeyTile - 1) / kKeyTile;
  const int tiles_per_split = (tiles + key_splits - 1) / key_splits;
  const int key_begin = static_cast<int>(blockIdx.z) * tiles_per_split * kKeyTile;
  const int key_end = min(length, key_begin + tiles_per_split * kKeyTile);

  if (active)
    for (int t = lane; t < d; t += kWarp) q_tile[warp][t] = q[static_cast<int64_t>(row) * q_stride + h * d + t];
  if (threadIdx.x == 0) {
    const int last = min(shape.n_queries, static_cast<int>(blockIdx.x + 1) * kRowWarps) - 1;
    block_last_position = query_positions[last];  // positions grow within a step
  }
  const int32_t my_position = active ? query_positions[row] : -1;
  OnlineSoftmax state;
  float acc[kValuesPerLane] = {};
  __syncthreads();

  for (int t0 = key_begin; t0 < key_end; t0 += kKeyTile) {
    if (positions[t0] > block_last_position) break;  // later keys are in every row's future
    if (f32_rows) {
      for (int i = threadIdx.x; i < kKeyTile * d; i += blockDim.x) {
        const int j = i / d, t = i % d;
        const bool in = t0 + j < key_end;
        k_tile[j][t] = in ? keys[static_cast<int64_t>(t0 + j) * d + t] : 0.0f;
        v_tile[j][t] = in ? values[static_cast<int64_t>(t0 + j) * d + t] : 0.0f;
      }
    } else if (cache.kivi_keys) {
      load_kivi_tile(cache.kivi_keys, g, true, cache.kivi_key_bits, cache.kivi_group, d, t0, key_end, kKeyTile,
                     &k_tile[0][0], kPadded);
      load_kivi_tile(cache.kivi_values, g, false, cache.kivi_value_bits, cache.kivi_group, d, t0, key_end, kKeyTile,
                     &v_tile[0][0], kMaxAttentionHeadDim);
    } else {
      load_stored_tile(head_rows(cache.keys, cache.key_type, g, cache.capacity, d), cache.key_type, d, t0, key_end,
                       kKeyTile, &k_tile[0][0], kPadded);
      load_stored_tile(head_rows(cache.values, cache.value_type, g, cache.capacity, d), cache.value_type, d, t0,
                       key_end, kKeyTile, &v_tile[0][0], kMaxAttentionHeadDim);
    }
    for (int j = threadIdx.x; j < kKeyTile; j += blockDim.x)
      pos_tile[j] = t0 + j < key_end ? positions[t0 + j] : INT32_MAX;
    __syncthreads();

    if (active) {
      float score = -INFINITY;
      if (pos_tile[lane] <= my_position) {
        float dot = 0.0f;
        for (int t = 0; t < d; ++t) dot += q_tile[warp][t] * k_tile[lane][t];
        score = dot * shape.scale;
      }
      const float new_max = fmaxf(state.max, warp_max(score));
      if (new_max != -INFINITY) {
        const float p = score == -INFINITY ? 0.0f : expf(score - new_max);
        const float rescale = online_softmax_rescale(state.max, new_max);
        state.sum = state.sum * rescale + warp_sum(p);
        state.max = new_max;
        for (int r = 0; r < kValuesPerLane; ++r) acc[r] *= rescale;
        for (int j = 0; j < kKeyTile; ++j) {
          const float pj = __shfl_sync(0xffffffffu, p, j);
          if (pj == 0.0f) continue;
          for (int r = 0; r < kValuesPerLane; ++r) {
            const int t = lane + r * kWarp;
            if (t < d) acc[r] += pj * v_tile[j][t];
          }
        }
      }
    }
    __syncthreads();
  }

  if (!active) return;
  if (key_splits > 1) {
    // [split][head][row][max, sum, acc...]
    float* partial = partials + ((static_cast<int64_t>(blockIdx.z) * shape.n_heads + h) * shape.n_queries + row) * (d + 2);
    for (int r = 0; r < kValuesPerLane; ++r) {
      const int t = lane + r * kWarp;
      if (t < d) partial[2 + t] = acc[r];
    }
    if (lane == 0) partial[0] = state.max, partial[1] = state.sum;
    return;
  }
  const float inv = state.sum > 0.0f ? 1.0f / state.sum : 0.0f;
  float* o = out + static_cast<int64_t>(row) * q_stride + h * d;
  for (int r = 0; r < kValuesPerLane; ++r) {
    const int t = lane + r * kWarp;
    if (t < d) o[t] = acc[r] * inv;
  }
  if (lane == 0) log_sum_exp[static_cast<int64_t>(h) * shape.n_queries + row] = state.log_sum_exp();
}

// A warp per (row, head): the key slices' partial states combined (kernels/common/softmax_math.h).
__global__ void attention_combine_kernel(AttentionShape shape, int key_splits, const float* partials, float* out,
                                         float* log_sum_exp) {
  const int row = blockIdx.x, h = blockIdx.y, lane = threadIdx.x, d = shape.head_dim;
  const int64_t slice = static_cast<int64_t>(shape.n_heads) * shape.n_queries * (d + 2);
  const float* first = partials + (static_cast<int64_t>(h) * shape.n_queries + row) * (d + 2);
  OnlineSoftmax total;
  for (int z = 0; z < key_splits; ++z) total = online_softmax_combine(total, {first[z * slice], first[z * slice + 1]});
  const float inv = total.sum > 0.0f ? 1.0f / total.sum : 0.0f;
  float* o = out + static_cast<int64_t>(row) * shape.n_heads * d + h * d;
  for (int t = lane; t < d; t += kWarp) {
    float acc = 0.0f;
    for (int z = 0; z < key_splits; ++z)
      acc += first[z * slice + 2 + t] * online_softmax_rescale(first[z * slice], total.max);
    o[t] = acc * inv;
  }
  if (lane == 0) log_sum_exp[static_cast<int64_t>(h) * shape.n_queries + row] = total.log_sum_exp();
}

__global__ void attention_side_outputs_kernel(const float* q, const int32_t* query_positions, DeviceLayerCache cache,
                                              AttentionShape shape, AttentionOutputs o) {
  __shared__ float k_tile[kKeysPerBlock][kPadded];
  __shared__ float q_tile[kQueryChunk][kMaxAttentionHeadDim];
  __shared__ float lse_tile[kQueryChunk];
  __shared__ int32_t qpos_tile[kQueryChunk];

  const int d = shape.head_dim, n = shape.n_queries;
  const int h = blockIdx.y;
  const int g = h / (shape.n_heads / shape.n_kv_heads);
  const int length = cache.lengths[g];
  const int key = blockIdx.x * kKeysPerBlock + threadIdx.x;
  const bool has_key = key < length;
  const float* keys = static_cast<const float*>(cache.keys) + static_cast<int64_t>(g) * cache.capacity * d;
  const int32_t key_position = has_key ? cache.positions[static_cast<int64_t>(g) * cache.capacity + key] : INT32_MAX;
  const int q_stride = shape.n_heads * d;
  const int window = min(o.window, n);
  const int64_t head_out = static_cast<int64_t>(h) * cache.capacity;

  if (cache.kivi_keys) {
    load_kivi_tile(cache.kivi_keys, g, true, cache.kivi_key_bits, cache.kivi_group, d, blockIdx.x * kKeysPerBlock,
                   length, kKeysPerBlock, &k_tile[0][0], kPadded);
  } else if (cache.key_type == RowType::F32) {
    for (int i = threadIdx.x; i < kKeysPerBlock * d; i += blockDim.x) {
      const int j = i / d, t = i % d;
      const int k = blockIdx.x * kKeysPerBlock + j;
      k_tile[j][t] = k < length ? keys[static_cast<int64_t>(k) * d + t] : 0.0f;
    }
  } else {
    load_stored_tile(head_rows(cache.keys, cache.key_type, g, cache.capacity, d), cache.key_type, d,
                     blockIdx.x * kKeysPerBlock, length, kKeysPerBlock, &k_tile[0][0], kPadded);
  }
  float column = 0.0f, window_column = 0.0f;
  for (int i0 = 0; i0 < n; i0 += kQueryChunk) {
    const int rows = min(kQueryChunk, n - i0);
    __syncthreads();  // the previous chunk is no longer read
    for (int i = threadIdx.x; i < rows * d; i += blockDim.x) {
      const int r = i / d, t = i % d;
      q_tile[r][t] = q[static_cast<int64_t>(i0 + r) * q_stride + h * d + t];
    }
    for (int r = threadIdx.x; r < rows; r += blockDim.x) {
      lse_tile[r] = o.log_sum_exp[static_cast<int64_t>(h) * n + i0 + r];
      qpos_tile[r] = query_positions[i0 + r];
    }
    __syncthreads();
    if (!has_key) continue;
    for (int r = 0; r < rows; ++r) {
      const int i = i0 + r;
      float p = 0.0f;
      if (key_position <= qpos_tile[r]) {
        float dot = 0.0f;
        for (int t = 0; t < d; ++t) dot += q_tile[r][t] * k_tile[threadIdx.x][t];
        p = softmax_probability(dot * shape.scale, lse_tile[r]);
      }
      column += p;
      const int window_row = i - (n - window);
      if (window_row >= 0) {
        window_column += p;
        if (o.window_rows) o.window_rows[(static_cast<int64_t>(h) * window + window_row) * cache.capacity + key] = p;
      }
      if (o.last_row && i == n - 1) o.last_row[head_out + key] = p;
      if (o.rows) o.rows[(static_cast<int64_t>(h) * n + i) * cache.capacity + key] = p;
    }
  }
  if (!has_key) return;
  if (o.column_sums) o.column_sums[head_out + key] = column;
  if (o.window_sums) o.window_sums[head_out + key] = window_column;
}

}  // namespace

void attention(const float* q, const int32_t* query_positions, const DeviceLayerCache& cache,
               const AttentionShape& shape, const AttentionOutputs& outputs, cudaStream_t stream) {
  if (shape.head_dim <= 0 || shape.head_dim > kMaxAttentionHeadDim)
    throw Error("CUDA attention: head_dim " + std::to_string(shape.head_dim) + " is outside 1.." +
                std::to_string(kMaxAttentionHeadDim));
  if (shape.n_kv_heads <= 0 || shape.n_heads % shape.n_kv_heads != 0)
    throw Error("CUDA attention: " + std::to_string(shape.n_heads) + " query heads do not share " +
                std::to_string(shape.n_kv_heads) + " KV heads evenly");
  if (!outputs.out || !outputs.log_sum_exp) throw Error("CUDA attention: out and log_sum_exp are required");
  if (shape.n_queries <= 0) return;
  const int splits = outputs.key_splits > 1 && outputs.split_partials ? outputs.key_splits : 1;
  const dim3 output_grid((shape.n_queries + kRowWarps - 1) / kRowWarps, shape.n_heads, splits);
  attention_output_kernel<<<output_grid, kRowWarps * kWarp, 0, stream>>>(
      q, query_positions, cache, shape, outputs.out, outputs.log_sum_exp, splits, outputs.split_partials);
  check_launch("attention (output pass)");
  if (splits > 1) {
    attention_combine_kernel<<<dim3(shape.n_queries, shape.n_heads), kWarp, 0, stream>>>(
        shape, splits, outputs.split_partials, outputs.out, outputs.log_sum_exp);
    check_launch("attention (combining key slices)");
  }
  const bool side =
      outputs.column_sums || outputs.window_sums || outputs.window_rows || outputs.last_row || outputs.rows;
  if (!side || cache.max_length <= 0) return;
  const dim3 side_grid((cache.max_length + kKeysPerBlock - 1) / kKeysPerBlock, shape.n_heads);
  attention_side_outputs_kernel<<<side_grid, kKeysPerBlock, 0, stream>>>(q, query_positions, cache, shape, outputs);
  check_launch("attention (side outputs)");
}

int attention_key_splits(int n_queries, int max_length) {
  // One block of rows per head is all a decode step has; slices of ~256 keys give the GPU enough blocks.
  if (n_queries > kRowWarps || max_length < 512) return 1;
  return std::min(kMaxKeySplits, (max_length + 255) / 256);
}

}  // namespace kvscope::kernels::cuda
