#include "kernels/backend.h"

#include "kernels/cpu/cpu_backend.h"
#include "kernels/error.h"

#ifdef KVSCOPE_WITH_CUDA
namespace kvscope::kernels::cuda {
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options);
}
#endif

namespace kvscope::kernels {

Device parse_device(std::string_view name) {
  if (name == "cpu") return Device::Cpu;
  if (name == "cuda") return Device::Cuda;
  throw UsageError("unknown device '" + std::string(name) + "' (expected cpu or cuda)");
}

const char* device_name(Device device) { return device == Device::Cuda ? "cuda" : "cpu"; }

std::unique_ptr<Backend> make_backend(Device device, const BackendOptions& options) {
  if (device == Device::Cpu) return std::make_unique<cpu::CpuBackend>(options);
#ifdef KVSCOPE_WITH_CUDA
  return cuda::make_cuda_backend(options);
#else
  throw Error(
      "device cuda: this kvscope was built without CUDA (CMake found no CUDA compiler and cuBLAS); "
      "use --device cpu, or rebuild where the CUDA toolkit is installed");
#endif
}

void Backend::scale(float*, std::size_t, float) {
  throw Error(std::string("the ") + device_name(device()) +
              " backend has no 'scale' op, which Gemma models need (run them with --device cpu)");
}

void Backend::geglu(const float*, const float*, float*, std::size_t) {
  throw Error(std::string("the ") + device_name(device()) +
              " backend has no 'geglu' op, which Gemma models need (run them with --device cpu)");
}

std::string unverified_device_note(Device device, const KVCacheTypes& types) {
  if (device != Device::Cuda || (types.keys == CacheType::F32 && types.values == CacheType::F32)) return {};
  if (is_kivi(types.keys) != is_kivi(types.values)) return {};  // refused when the cache is made
  return std::string("--device cuda with cache type ") + cache_type_name(types) +
         ": the CUDA code for this cache type was written and compiled without a GPU and has never run on one "
         "(docs/gpu.md); compare with --device cpu before relying on its output";
}

Backend& default_cpu_backend() {
  static cpu::CpuBackend backend{BackendOptions{}};
  return backend;
}

}  // namespace kvscope::kernels
