#pragma once
// Weights to the floating types cuBLAS multiplies: rows of any GGUF type the CPU path reads (F32, F16,
// BF16, Q4_0, Q4_1, Q8_0, Q4_K, Q6_K) dequantized on the device with kernels/common/quant_blocks.h.
// Host reference: kernels::dequantize_row (kernels/common/dequantize.cpp), the CPU backend's own path.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/ggml_type.h"

namespace kvscope::kernels::cuda {

enum class DeviceFloat { F32, F16, BF16 };

// src: `rows` rows of `cols` values stored in `type`, row_bytes apart, on the device. dst: rows x cols values
// of out_type, row-major. Throws Error for a type kvscope cannot dequantize or a cols that is not a whole
// number of blocks.
void dequantize_rows(GgmlType type, const uint8_t* src, int64_t rows, int64_t cols, int64_t row_bytes, void* dst,
                     DeviceFloat out_type, cudaStream_t stream);

// n floats to out_type (round to nearest even), for the activations of a product.
void convert_floats(const float* src, int64_t n, void* dst, DeviceFloat out_type, cudaStream_t stream);

// out[i] = row ids[i] of a [rows][cols] table stored as table_type, widened to float (the embedding lookup).
// ids: device [n], already range-checked.
void gather_rows_as_float(const void* table, DeviceFloat table_type, int cols, const int32_t* ids, int n, float* out,
                          cudaStream_t stream);

}  // namespace kvscope::kernels::cuda
