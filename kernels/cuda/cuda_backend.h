#pragma once
// The CUDA implementation of kernels/backend.h. kernels/backend.cpp's make_backend(Device::Cuda) calls
// make_cuda_backend when this library is built (KVSCOPE_WITH_CUDA); it throws Error("no CUDA device: ...")
// on a machine without a usable GPU or driver.
#include <memory>

#include "kernels/backend.h"

namespace kvscope::kernels::cuda {

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options);

}  // namespace kvscope::kernels::cuda
