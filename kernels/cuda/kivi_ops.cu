// The KIVI kernels: a block per task. A key task is one group: its threads first find each channel's range over
// the group's rows (shared memory), then write the code bytes of every row; a value task walks its rows, each the
// same two steps over its channel groups. Every value goes through kivi_tasks.h's functions, as on the host.
#include "kernels/cuda/kivi_ops.h"

#include "kernels/cuda/cuda_check.h"

namespace kvscope::kernels::cuda {
namespace {

constexpr int kThreads = 128;

// Sums each of the two values over the warp and adds lane 0's totals to `target` (every lane must call it).
__device__ void warp_add_pair(double* sums, double* target) {
  for (int c = 0; c < 2; ++c) {
    double v = sums[c];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if ((threadIdx.x & 31) == 0 && v != 0.0) atomicAdd(target + c, v);
  }
}

__global__ void kivi_quantize_kernel(const KiviQuantizeTask* tasks, int head_dim, int group) {
  __shared__ kivi::Range ranges[kMaxKiviHeadDim];
  const KiviQuantizeTask t = tasks[blockIdx.x];
  const int code_row = kivi::code_row_bytes(head_dim, t.bits);
  double sums[2] = {0.0, 0.0};
  if (t.per_channel) {
    for (int c = threadIdx.x; c < head_dim; c += blockDim.x) {
      ranges[c] = kivi_key_range(t, head_dim, c);
      kivi::store_key_range(t.out, head_dim, c, ranges[c]);
    }
    __syncthreads();
    uint8_t* codes = t.out + kivi::key_meta_bytes(head_dim);
    for (int i = threadIdx.x; i < t.rows * code_row; i += blockDim.x)
      codes[i] = kivi_key_code_byte(t, head_dim, ranges, i / code_row, i % code_row);
    if (t.error_sums)
      for (int i = threadIdx.x; i < t.rows * head_dim; i += blockDim.x) {
        const int j = i / head_dim, c = i % head_dim;
        kivi_add_error(t.source.row(t.first + j, head_dim)[c], ranges[c], t.bits, sums);
      }
  } else {
    const int groups = head_dim / group, row_bytes = kivi::value_row_bytes(head_dim, group, t.bits);
    for (int j = 0; j < t.rows; ++j) {
      uint8_t* row = t.out + static_cast<int64_t>(j) * row_bytes;
      for (int k = threadIdx.x; k < groups; k += blockDim.x) {
        ranges[k] = kivi_value_range(t, head_dim, group, j, k);
        kivi::store_value_range(row, head_dim, group, k, ranges[k]);
      }
      __syncthreads();
      for (int b = threadIdx.x; b < code_row; b += blockDim.x)
        row[kivi::value_meta_bytes(head_dim, group) + b] = kivi_value_code_byte(t, head_dim, group, ranges, j, b);
      if (t.error_sums)
        for (int c = threadIdx.x; c < head_dim; c += blockDim.x)
          kivi_add_error(t.source.row(t.first + j, head_dim)[c], ranges[c / group], t.bits, sums);
      __syncthreads();  // the next row's ranges overwrite these
    }
  }
  if (t.error_sums) warp_add_pair(sums, t.error_sums);
}

__global__ void copy_byte_ranges_kernel(const ByteCopy* copies) {
  const ByteCopy c = copies[blockIdx.x];
  for (int64_t i = threadIdx.x; i < c.bytes; i += blockDim.x) c.dst[i] = c.src[i];
}

}  // namespace

void kivi_quantize(const KiviQuantizeTask* tasks, int n_tasks, int head_dim, int group, cudaStream_t stream) {
  if (n_tasks <= 0) return;
  kivi_quantize_kernel<<<n_tasks, kThreads, 0, stream>>>(tasks, head_dim, group);
  check_launch("kivi_quantize");
}

void copy_byte_ranges(const ByteCopy* copies, int n_copies, cudaStream_t stream) {
  if (n_copies <= 0) return;
  copy_byte_ranges_kernel<<<n_copies, kThreads, 0, stream>>>(copies);
  check_launch("copy_byte_ranges");
}

}  // namespace kvscope::kernels::cuda
