// Catch2's main for the GPU tests: without a usable CUDA device the whole executable reports SKIPPED through
// ctest's SKIP_RETURN_CODE (77), so a machine without a GPU neither passes nor fails them.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "kernels/cuda/cuda_device.h"

int main(int argc, char** argv) {
  const auto list = kvscope::kernels::cuda::list_cuda_devices();
  if (list.devices.empty()) {
    std::printf("SKIPPED: no CUDA device: %s\n", list.why_none.c_str());
    return 77;
  }
  kvscope::kernels::cuda::require_cuda_device(0);
  return Catch::Session().run(argc, argv);
}
