#pragma once
// cuBLAS, loaded when the CUDA backend is first made rather than linked: mapping libcublas and
// libcublasLt at start-up cost every kvscope process about 205 MB of resident memory and 0.4 s, CPU runs
// included (a process that links them and does nothing: 206 MB peak RSS against 1 MB). The backend uses
// five entry points; they are resolved once, by the names the cublas_v2.h macros stand for.
#include <cublas_v2.h>

#include <string>

namespace kvscope::kernels::cuda {

struct CublasLibrary {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  // The C entry point (C++ also sees an inline overload taking a cudaDataType compute type).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  std::string path;  // the file that was loaded
};

// The soname this build was compiled against, e.g. "libcublas.so.13".
std::string cublas_soname();

// Loads the library at `path` (a soname or a file) and resolves the entry points, every call anew; throws
// Error naming the path and the loader's message when it or a symbol is missing.
CublasLibrary load_cublas(const std::string& path);

// Loads cuBLAS on first use (KVSCOPE_CUBLAS_LIBRARY names another file) and returns its entry points;
// throws Error naming the library and the loader's message when it or a symbol is missing, and again on
// every later call.
const CublasLibrary& cublas();

}  // namespace kvscope::kernels::cuda
