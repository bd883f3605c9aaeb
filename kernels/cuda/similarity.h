#pragma once
// Cosine-similarity maps of cached vectors, pooled on the device so only the pooled map is copied back:
// Sim[i][j] = x_i . x_j / (||x_i|| ||x_j||) (0 for a zero vector), output cell (R, C) pooling source cells
// [R*block, (R+1)*block) x [C*block, (C+1)*block) clipped to n (core/analysis/pooling.h's semantics; every
// cell of the map is given). Host reference: similarity_reference.h. Device pointers throughout.
#include <cuda_runtime_api.h>

namespace kvscope::kernels::cuda {

// x: [n][d]; unit_scratch: [n][d]; out: [ceil(n/block)]^2, row-major. max_pool: largest value, else mean.
void pooled_cosine_similarity(const float* x, int n, int d, int block, bool max_pool, float* unit_scratch, float* out,
                              cudaStream_t stream);

}  // namespace kvscope::kernels::cuda
