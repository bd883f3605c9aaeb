#pragma once
// The KIVI kernels of the CUDA cache (kivi_ops.cu): the tasks of kivi_tasks.h, a launch each. Device pointers.
#include <cuda_runtime_api.h>

#include "kernels/cuda/kivi_tasks.h"

namespace kvscope::kernels::cuda {

// A block per task (tasks of different heads and parts in one launch); tasks: device memory. group: G, the
// channels of a value row's group. head_dim <= kMaxKiviHeadDim.
void kivi_quantize(const KiviQuantizeTask* tasks, int n_tasks, int head_dim, int group, cudaStream_t stream);
// A block per copy (copies: device memory); no copy's destination may overlap another's source.
void copy_byte_ranges(const ByteCopy* copies, int n_copies, cudaStream_t stream);

}  // namespace kvscope::kernels::cuda
