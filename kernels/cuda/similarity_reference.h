#pragma once
// The host reference of similarity.cu: every cosine by a direct loop in double, then block pooling.
#include <vector>

namespace kvscope::kernels::cuda {

// x: [n][d]. Returns the [ceil(n/block)]^2 pooled map (max or mean of each clipped block).
std::vector<float> pooled_cosine_similarity_reference(const std::vector<float>& x, int n, int d, int block,
                                                      bool max_pool);

}  // namespace kvscope::kernels::cuda
