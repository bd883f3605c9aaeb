#pragma once
// CUDA and cuBLAS status codes to exceptions naming the call that failed (kvscope::Error, so the CLI exits 1
// with the message instead of crashing).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

#include "kernels/cuda/cublas_library.h"
#include "kernels/error.h"

namespace kvscope::kernels::cuda {

inline void check_cuda(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so the next call does not report it again
  throw Error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(status));
}

inline void check_cublas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw Error(std::string("cuBLAS: ") + what + ": " + cublas().status_string(status));
}

// After a kernel launch: a bad configuration shows up here, not as a later crash.
inline void check_launch(const char* kernel) { check_cuda(cudaGetLastError(), kernel); }

}  // namespace kvscope::kernels::cuda
