#include "kernels/cuda/pinned_staging.h"

#include <cstring>

#include "kernels/cuda/cuda_check.h"

namespace kvscope::kernels::cuda {

PinnedStaging::PinnedStaging(cudaStream_t stream, std::size_t bytes) : stream_(stream), capacity_(bytes) {
  check_cuda(cudaMallocHost(reinterpret_cast<void**>(&ring_), capacity_), "cudaMallocHost (upload staging)");
}

PinnedStaging::~PinnedStaging() {
  if (ring_) cudaFreeHost(ring_);
}

void PinnedStaging::upload(void* device, const void* host, std::size_t bytes) {
  if (bytes == 0) return;
  if (bytes > capacity_ / 2) {
    check_cuda(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_), "upload");
    return;
  }
  constexpr std::size_t kAlignment = 64;
  if (used_ + bytes > capacity_) {
    // Every copy enqueued from the ring so far must have read its bytes before they are overwritten.
    check_cuda(cudaStreamSynchronize(stream_), "upload staging (wrap)");
    used_ = 0;
  }
  unsigned char* slot = ring_ + used_;
  std::memcpy(slot, host, bytes);
  check_cuda(cudaMemcpyAsync(device, slot, bytes, cudaMemcpyHostToDevice, stream_), "upload");
  used_ += (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

}  // namespace kvscope::kernels::cuda
