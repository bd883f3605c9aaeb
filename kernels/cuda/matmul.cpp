#include "kernels/cuda/matmul.h"

#include "kernels/cuda/cuda_check.h"

namespace kvscope::kernels::cuda {
namespace {

cudaDataType_t cuda_type(DeviceFloat t) {
  switch (t) {
    case DeviceFloat::F16:
      return CUDA_R_16F;
    case DeviceFloat::BF16:
      return CUDA_R_16BF;
    case DeviceFloat::F32:
      break;
  }
  return CUDA_R_32F;
}

}  // namespace

CublasHandle::CublasHandle(cudaStream_t stream) {
  check_cublas(cublas().create(&handle_), "cublasCreate");
  check_cublas(cublas().set_stream(handle_, stream), "cublasSetStream");
}

CublasHandle::~CublasHandle() {
  if (handle_) cublas().destroy(handle_);
}

const void* convert_input(const DeviceMatrix& w, const float* x, int n, void* x_scratch, cudaStream_t stream) {
  if (w.type == DeviceFloat::F32) return x;
  convert_floats(x, static_cast<int64_t>(n) * w.cols, x_scratch, w.type, stream);
  return x_scratch;
}

void gemm(const CublasHandle& cublas, const DeviceMatrix& w, const void* x_typed, int n, float* y) {
  if (n <= 0 || w.rows <= 0) return;
  // cuBLAS is column-major: row-major W [rows][cols] is W^T column-major with leading dimension cols, and
  // row-major Y [n][rows] is column-major [rows][n] = W X^T: the first operand is transposed, the second not.
  const float alpha = 1.0f, beta = 0.0f;
  check_cublas(cuda::cublas().gemm_ex(cublas.get(), CUBLAS_OP_T, CUBLAS_OP_N, w.rows, n, w.cols, &alpha, w.data,
                            cuda_type(w.type), w.cols, x_typed, cuda_type(w.type), w.cols, &beta, y, CUDA_R_32F, w.rows,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
}

void matmul(const CublasHandle& cublas, const DeviceMatrix& w, const float* x, int n, void* x_scratch, float* y,
            cudaStream_t stream) {
  if (n <= 0 || w.rows <= 0) return;
  gemm(cublas, w, convert_input(w, x, n, x_scratch, stream), n, y);
}

}  // namespace kvscope::kernels::cuda
