#pragma once
// The compute backends of this process, one per device, made when a run first asks for it and kept, so a
// backend that copies the weights (CUDA) uploads them once rather than per run.
#include "kernels/backend.h"

namespace kvscope::run {

// Throws what kernels::make_backend throws (e.g. Error for cuda without CUDA support) and then again on the
// next call; never caches a failure as a backend.
kernels::Backend& backend_for(kernels::Device device);

}  // namespace kvscope::run
