// The device list of a build without the CUDA toolkit (compiled instead of cuda_device.cpp).
#include "kernels/cuda/cuda_device.h"
#include "kernels/error.h"

namespace kvscope::kernels::cuda {

CudaDeviceList list_cuda_devices() {
  CudaDeviceList list;
  list.why_none = "this kvscope was built without CUDA (no nvcc/cuBLAS found, or -DKVSCOPE_CUDA=OFF)";
  return list;
}

void require_cuda_device(int) { throw Error("no CUDA device: " + list_cuda_devices().why_none); }

}  // namespace kvscope::kernels::cuda
