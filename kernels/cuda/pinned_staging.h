#pragma once
// Small host-to-device uploads that do not stall the stream. A cudaMemcpyAsync from pageable host memory may first
// synchronise the stream and stage the bytes ("API synchronization behavior" in the CUDA runtime documentation);
// on a decode step the engine uploads a few bytes several times per layer (positions for RoPE and attention, the
// cache's positions and lengths), and each such copy made the host wait for the GPU to drain, so launches and
// kernels ran one after the other instead of overlapping. Here the bytes are first copied into a ring of
// page-locked memory and the device copy is enqueued from there, which is asynchronous. The ring is reused from its
// start only after a stream synchronisation (once per `bytes` of uploads), so a pending copy never reads bytes
// that were overwritten.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

namespace kvscope::kernels::cuda {

class PinnedStaging {
 public:
  PinnedStaging(cudaStream_t stream, std::size_t bytes);
  ~PinnedStaging();
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  // Enqueues a copy of `bytes` bytes from `host` to `device` on the stream; `host` may be reused on return.
  // Uploads larger than half the ring go straight from `host` (pageable; they may synchronise).
  void upload(void* device, const void* host, std::size_t bytes);

  template <typename T>
  void upload(T* device, const std::vector<T>& host) {
    upload(device, host.data(), host.size() * sizeof(T));
  }

 private:
  cudaStream_t stream_;
  unsigned char* ring_ = nullptr;
  std::size_t capacity_ = 0, used_ = 0;
};

}  // namespace kvscope::kernels::cuda
