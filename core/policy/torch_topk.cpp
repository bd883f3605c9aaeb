#include "core/policy/torch_topk.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace kvscope::policy {

std::vector<int32_t> torch_topk_order(std::span<const double> scores, int k) {
  const int64_t n = static_cast<int64_t>(scores.size());
  k = static_cast<int>(std::clamp<int64_t>(k, 0, n));
  if (k == 0) return {};
  using Elem = std::pair<double, int64_t>;
  std::vector<Elem> queue(scores.size());
  for (int64_t j = 0; j < n; ++j) queue[j] = {scores[j], j};
  // torch's comparator for largest=true: NaN first, then by value only (the index plays no part).
  const auto before = [](const Elem& x, const Elem& y) {
    return (std::isnan(x.first) && !std::isnan(y.first)) || x.first > y.first;
  };
  if (static_cast<int64_t>(k) * 64 <= n) {
    std::partial_sort(queue.begin(), queue.begin() + k, queue.end(), before);
  } else {
    std::nth_element(queue.begin(), queue.begin() + k - 1, queue.end(), before);
    std::sort(queue.begin(), queue.begin() + k - 1, before);
  }
  std::vector<int32_t> out(k);
  for (int i = 0; i < k; ++i) out[i] = static_cast<int32_t>(queue[i].second);
  return out;
}

}  // namespace kvscope::policy
