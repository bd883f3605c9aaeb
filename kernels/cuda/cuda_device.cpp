#include "kernels/cuda/cuda_device.h"

#include <cuda_runtime_api.h>

#include <string>

#include "kernels/error.h"

namespace kvscope::kernels::cuda {

CudaDeviceList list_cuda_devices() {
  CudaDeviceList list;
  list.built_with_cuda = true;
  cudaRuntimeGetVersion(&list.runtime_version);
  cudaDriverGetVersion(&list.driver_version);  // leaves 0 when no driver is installed
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    list.why_none = cudaGetErrorString(status);
    cudaGetLastError();  // the runtime keeps the error sticky otherwise
    return list;
  }
  if (count == 0) list.why_none = "the CUDA runtime reports 0 devices";
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    CudaDeviceInfo info;
    info.index = i;
    info.name = prop.name;
    info.total_memory = prop.totalGlobalMem;
    info.compute_major = prop.major;
    info.compute_minor = prop.minor;
    info.multiprocessors = prop.multiProcessorCount;
    std::size_t free = 0, total = 0;
    if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free, &total) == cudaSuccess) info.free_memory = free;
    cudaGetLastError();
    list.devices.push_back(info);
  }
  return list;
}

void require_cuda_device(int index) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw Error(std::string("no CUDA device: ") + cudaGetErrorString(status));
  }
  if (count == 0) throw Error("no CUDA device: the CUDA runtime reports 0 devices");
  if (index < 0 || index >= count)
    throw Error("no CUDA device: device " + std::to_string(index) + " asked for, " + std::to_string(count) +
                " present (valid: 0.." + std::to_string(count - 1) + ")");
  if (const cudaError_t set = cudaSetDevice(index); set != cudaSuccess) {
    cudaGetLastError();
    throw Error("no CUDA device: cannot open device " + std::to_string(index) + ": " + cudaGetErrorString(set));
  }
}

}  // namespace kvscope::kernels::cuda
