#pragma once
// Per-element math of the cache's merges and of the policies that weigh them, shared by the CPU and CUDA
// code: the weighted merge of one column, KVMerger's Gaussian kernel weight and CAOTE's eviction error.
#include <cmath>
#include <cstdint>

#include "kernels/common/host_device.h"

namespace kvscope::kernels {

// One column of a merged row: sum_i weights[i] * rows[members[i] * stride + column], members[0] being the
// target (CacheEdit's MergeGroup: K = w0 K_target + sum_i w_{1+i} K_source_i). Summed in member order.
KVSCOPE_HD inline float merged_element(const float* rows, int64_t stride, const int32_t* members, const float* weights,
                                       int n_members, int column) {
  float sum = 0.0f;
  for (int i = 0; i < n_members; ++i) sum += weights[i] * rows[members[i] * stride + column];
  return sum;
}

// KVMerger Eq. 7: exp(-d^2 / (2 sigma^2)). A member at distance 0 weighs as much as the pivot whatever sigma
// is (the kernel's limit), so identical keys average instead of dividing 0 by 0; sigma <= 0 gives 0 to
// every other member.
KVSCOPE_HD inline double gaussian_merge_weight(double distance, double sigma) {
  if (distance == 0.0) return 1.0;
  return sigma > 0.0 ? exp(-distance * distance / (2.0 * sigma * sigma)) : 0.0;
}

// 1 - alpha can vanish when one entry holds all the mass; the clamp keeps CAOTE's error finite and that
// entry (whose eviction would change the output the most) ranked first.
constexpr double kCaoteMinComplement = 1e-6;

// CAOTE Eq. 8/19, squared: evicting entry j (normalised score alpha_j) moves the attention output by
// alpha_j / (1 - alpha_j) * ||X - v_j||; the argument is ||X - v_j||^2.
KVSCOPE_HD inline double caote_squared_error(double alpha, double squared_distance) {
  const double complement = 1.0 - alpha;
  const double ratio = alpha / (complement > kCaoteMinComplement ? complement : kCaoteMinComplement);
  return ratio * ratio * squared_distance;
}

}  // namespace kvscope::kernels
