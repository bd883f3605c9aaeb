#pragma once
// Products through cuBLAS: weights dequantized once to f16/bf16 on the device (dequantize.h), activations
// converted to the same type per call, fp32 accumulation and fp32 output (cublasGemmEx, CUBLAS_COMPUTE_32F).
// Host reference: the CPU backend's kernels::matmul on the original quantized weights.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "kernels/cuda/dequantize.h"

namespace kvscope::kernels::cuda {

// A cuBLAS handle bound to one stream; owns it (cublasCreate / cublasDestroy).
class CublasHandle {
 public:
  explicit CublasHandle(cudaStream_t stream);
  ~CublasHandle();
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

struct DeviceMatrix {
  const void* data = nullptr;  // [rows][cols], row-major
  DeviceFloat type = DeviceFloat::F16;
  int rows = 0, cols = 0;
};

// x[n][w.cols] as w's device type: x itself for F32, else converted into x_scratch (n * w.cols values of w.type).
const void* convert_input(const DeviceMatrix& w, const float* x, int n, void* x_scratch, cudaStream_t stream);

// y[n][w.rows] = x_typed[n][w.cols] * w^T, x_typed already of w's device type (convert_input); on the handle's stream.
void gemm(const CublasHandle& cublas, const DeviceMatrix& w, const void* x_typed, int n, float* y);

// y[n][w.rows] = x[n][w.cols] * w^T: convert_input, then gemm.
void matmul(const CublasHandle& cublas, const DeviceMatrix& w, const float* x, int n, void* x_scratch, float* y,
            cudaStream_t stream);

}  // namespace kvscope::kernels::cuda
