#include "kernels/cuda/dequantize.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "kernels/common/quant_blocks.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/error.h"

namespace kvscope::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__device__ inline void store(float v, float* dst) { *dst = v; }
__device__ inline void store(float v, __half* dst) { *dst = __float2half_rn(v); }
__device__ inline void store(float v, __nv_bfloat16* dst) { *dst = __float2bfloat16_rn(v); }

// The 32-value and the 256-value block types are separate instantiations, so a local buffer is never
// handed to a block function that writes more than it holds.
template <int kElements>
__device__ inline void dequantize_block(int type_id, const uint8_t* block, float* out) {
  if constexpr (kElements == 32) {
    if (type_id == static_cast<int>(GgmlType::Q4_0)) return blocks::dequantize_block_q4_0(block, out);
    if (type_id == static_cast<int>(GgmlType::Q4_1)) return blocks::dequantize_block_q4_1(block, out);
    return blocks::dequantize_block_q8_0(block, out);
  } else {
    if (type_id == static_cast<int>(GgmlType::Q4_K)) return blocks::dequantize_block_q4_k(block, out);
    return blocks::dequantize_block_q6_k(block, out);
  }
}

// One thread per quantized block: the block's values go through a local buffer (at most 256 floats).
template <int kElements, typename Out>
__global__ void dequantize_blocks_kernel(int type_id, const uint8_t* src, int64_t rows, int64_t blocks_per_row,
                                         int block_bytes, int64_t row_bytes, Out* dst) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= rows * blocks_per_row) return;
  const int64_t row = b / blocks_per_row, col_block = b % blocks_per_row;
  float values[kElements];
  dequantize_block<kElements>(type_id, src + row * row_bytes + col_block * block_bytes, values);
  Out* out = dst + row * blocks_per_row * kElements + col_block * kElements;
  for (int i = 0; i < kElements; ++i) store(values[i], out + i);
}

// Plain float formats: one thread per value.
template <typename Out>
__global__ void convert_plain_kernel(int type_id, const uint8_t* src, int64_t rows, int64_t cols, int64_t row_bytes,
                                     Out* dst) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const uint8_t* row = src + (i / cols) * row_bytes;
  const int64_t c = i % cols;
  float v;
  if (type_id == static_cast<int>(GgmlType::F32)) {
    memcpy(&v, row + 4 * c, 4);
  } else if (type_id == static_cast<int>(GgmlType::F16)) {
    v = blocks::half_to_float(blocks::load_u16(row + 2 * c));
  } else {
    v = blocks::bf16_to_float(blocks::load_u16(row + 2 * c));
  }
  store(v, dst + i);
}

template <typename Out>
__global__ void convert_floats_kernel(const float* src, int64_t n, Out* dst) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) store(src[i], dst + i);
}

__device__ inline float load(const float* p) { return *p; }
__device__ inline float load(const __half* p) { return __half2float(*p); }
__device__ inline float load(const __nv_bfloat16* p) { return __bfloat162float(*p); }

template <typename In>
__global__ void gather_rows_kernel(const In* table, int cols, const int32_t* ids, int n, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(n) * cols) return;
  out[i] = load(table + static_cast<int64_t>(ids[i / cols]) * cols + i % cols);
}

unsigned grid_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

template <typename Out>
void launch(GgmlType type, const uint8_t* src, int64_t rows, int64_t cols, int64_t row_bytes, Out* dst,
            cudaStream_t stream) {
  const auto id = static_cast<int>(type);
  switch (type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
      convert_plain_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(id, src, rows, cols, row_bytes, dst);
      break;
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q8_0: {
      const int bytes = type == GgmlType::Q4_0   ? blocks::kQ4_0Bytes
                        : type == GgmlType::Q4_1 ? blocks::kQ4_1Bytes
                                                 : blocks::kQ8_0Bytes;
      const int64_t per_row = cols / 32;
      dequantize_blocks_kernel<32>
          <<<grid_for(rows * per_row), kThreads, 0, stream>>>(id, src, rows, per_row, bytes, row_bytes, dst);
      break;
    }
    case GgmlType::Q4_K:
    case GgmlType::Q6_K: {
      const int bytes = type == GgmlType::Q4_K ? blocks::kQ4_KBytes : blocks::kQ6_KBytes;
      const int64_t per_row = cols / 256;
      dequantize_blocks_kernel<256>
          <<<grid_for(rows * per_row), kThreads, 0, stream>>>(id, src, rows, per_row, bytes, row_bytes, dst);
      break;
    }
    default:
      throw Error("CUDA dequantize: type " + ggml_type_name(static_cast<uint32_t>(type)) +
                  " is not supported by kvscope");
  }
  check_launch("dequantize_rows");
}

}  // namespace

void dequantize_rows(GgmlType type, const uint8_t* src, int64_t rows, int64_t cols, int64_t row_bytes, void* dst,
                     DeviceFloat out_type, cudaStream_t stream) {
  const GgmlTypeTraits* traits = ggml_type_traits(static_cast<uint32_t>(type));
  const std::string name = ggml_type_name(static_cast<uint32_t>(type));
  if (!traits || !traits->supported) throw Error("CUDA dequantize: type " + name + " is not supported by kvscope");
  if (rows < 0 || cols < 0 || cols % traits->block_elements != 0)
    throw Error("CUDA dequantize: a " + std::to_string(rows) + " x " + std::to_string(cols) + " " + name +
                " matrix is not rows of whole blocks (" + std::to_string(traits->block_elements) + " values)");
  if (rows == 0 || cols == 0) return;
  switch (out_type) {
    case DeviceFloat::F32:
      return launch(type, src, rows, cols, row_bytes, static_cast<float*>(dst), stream);
    case DeviceFloat::F16:
      return launch(type, src, rows, cols, row_bytes, static_cast<__half*>(dst), stream);
    case DeviceFloat::BF16:
      return launch(type, src, rows, cols, row_bytes, static_cast<__nv_bfloat16*>(dst), stream);
  }
}

void convert_floats(const float* src, int64_t n, void* dst, DeviceFloat out_type, cudaStream_t stream) {
  if (n <= 0) return;
  switch (out_type) {
    case DeviceFloat::F32:
      check_cuda(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream), "convert_floats");
      return;
    case DeviceFloat::F16:
      convert_floats_kernel<<<grid_for(n), kThreads, 0, stream>>>(src, n, static_cast<__half*>(dst));
      break;
    case DeviceFloat::BF16:
      convert_floats_kernel<<<grid_for(n), kThreads, 0, stream>>>(src, n, static_cast<__nv_bfloat16*>(dst));
      break;
  }
  check_launch("convert_floats");
}

void gather_rows_as_float(const void* table, DeviceFloat table_type, int cols, const int32_t* ids, int n, float* out,
                          cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(n) * cols;
  if (total <= 0) return;
  switch (table_type) {
    case DeviceFloat::F32:
      gather_rows_kernel<<<grid_for(total), kThreads, 0, stream>>>(static_cast<const float*>(table), cols, ids, n, out);
      break;
    case DeviceFloat::F16:
      gather_rows_kernel<<<grid_for(total), kThreads, 0, stream>>>(static_cast<const __half*>(table), cols, ids, n,
                                                                   out);
      break;
    case DeviceFloat::BF16:
      gather_rows_kernel<<<grid_for(total), kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(table), cols, ids,
                                                                   n, out);
      break;
  }
  check_launch("gather_rows_as_float");
}

}  // namespace kvscope::kernels::cuda
