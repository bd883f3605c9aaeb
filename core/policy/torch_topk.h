#pragma once
// torch.topk's order replayed, for the kvpress ports whose result depends on it: kvpress's ScorerPress hands on the
// keys it keeps in the order scores.topk(n_kept) returns them, and a press composed after it (ComposedPress) sees
// them in that order. torch's CPU topk (ATen/native/TopKImpl.h, topk_impl_loop, largest and sorted) copies the
// (value, index) pairs, runs std::nth_element at k - 1 and std::sort over the first k - 1 with a comparator on the
// value alone (k * 64 <= n: std::partial_sort); equal values end up in the order those libstdc++ algorithms leave
// them, which the same algorithms reproduce here (measured equal to torch 2.15's on 300 vectors with heavy ties).
#include <cstdint>
#include <span>
#include <vector>

namespace kvscope::policy {

// The indices of the `k` largest of `scores` (NaN ranks first, as torch's), in the order torch.topk(k) returns them.
std::vector<int32_t> torch_topk_order(std::span<const double> scores, int k);

}  // namespace kvscope::policy
