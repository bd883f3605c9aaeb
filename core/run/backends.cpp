#include "core/run/backends.h"

#include <memory>
#include <mutex>

namespace kvscope::run {

kernels::Backend& backend_for(kernels::Device device) {
  if (device == kernels::Device::Cpu) return kernels::default_cpu_backend();
  static std::mutex mutex;
  static std::unique_ptr<kernels::Backend> cuda;
  std::lock_guard<std::mutex> lock(mutex);
  if (!cuda) cuda = kernels::make_backend(device);
  return *cuda;
}

}  // namespace kvscope::run
