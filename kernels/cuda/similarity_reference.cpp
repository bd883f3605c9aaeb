#include "kernels/cuda/similarity_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvscope::kernels::cuda {

std::vector<float> pooled_cosine_similarity_reference(const std::vector<float>& x, int n, int d, int block,
                                                      bool max_pool) {
  block = std::max(block, 1);
  std::vector<double> norm(n, 0.0);
  for (int i = 0; i < n; ++i)
    for (int t = 0; t < d; ++t)
      norm[i] += static_cast<double>(x[static_cast<std::size_t>(i) * d + t]) * x[static_cast<std::size_t>(i) * d + t];
  auto cosine = [&](int i, int j) {
    if (norm[i] == 0.0 || norm[j] == 0.0) return 0.0;
    double dot = 0.0;
    for (int t = 0; t < d; ++t)
      dot += static_cast<double>(x[static_cast<std::size_t>(i) * d + t]) * x[static_cast<std::size_t>(j) * d + t];
    return dot / std::sqrt(norm[i] * norm[j]);
  };
  const int cells = (n + block - 1) / block;
  std::vector<float> out(static_cast<std::size_t>(cells) * cells);
  for (int R = 0; R < cells; ++R)
    for (int C = 0; C < cells; ++C) {
      double pooled = max_pool ? -std::numeric_limits<double>::infinity() : 0.0;
      int count = 0;
      for (int r = R * block; r < std::min(n, (R + 1) * block); ++r)
        for (int c = C * block; c < std::min(n, (C + 1) * block); ++c) {
          const double s = cosine(r, c);
          pooled = max_pool ? std::max(pooled, s) : pooled + s;
          ++count;
        }
      out[static_cast<std::size_t>(R) * cells + C] = static_cast<float>(max_pool ? pooled : pooled / count);
    }
  return out;
}

}  // namespace kvscope::kernels::cuda
