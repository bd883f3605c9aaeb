#pragma once
// Which CUDA devices this process can use, asked of the CUDA runtime. Plain C++ (no CUDA headers), so the
// CLI includes it in every build; a build without the toolkit answers "built without CUDA".
#include <cstddef>
#include <string>
#include <vector>

namespace kvscope::kernels::cuda {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  std::size_t total_memory = 0;  // bytes
  std::size_t free_memory = 0;   // bytes, when the device could be opened; 0 otherwise
  int compute_major = 0, compute_minor = 0;
  int multiprocessors = 0;
};

struct CudaDeviceList {
  bool built_with_cuda = false;
  int runtime_version = 0;  // e.g. 13000; 0 when unknown
  int driver_version = 0;   // 0: no driver
  std::vector<CudaDeviceInfo> devices;
  std::string why_none;  // set when devices is empty: the runtime's own words
};

CudaDeviceList list_cuda_devices();

// Throws Error("no CUDA device: <cudaGetErrorString>") unless device `index` exists and can be opened.
void require_cuda_device(int index = 0);

}  // namespace kvscope::kernels::cuda
