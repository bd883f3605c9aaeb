#include "core/policy/selection.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/common/error.h"

namespace kvscope::policy {

namespace {
// NaN would break the strict weak ordering of the sort; an entry with no meaningful score ranks last.
template <class Real>
Real rank_value(Real s) {
  return std::isnan(s) ? -std::numeric_limits<Real>::infinity() : s;
}

template <class Real>
std::vector<int32_t> keep_top(std::span<const Real> scores, int budget, int sinks, int recent) {
  const int n = static_cast<int>(scores.size());
  std::vector<int32_t> keep;
  if (budget >= n) {
    keep.resize(n);
    std::iota(keep.begin(), keep.end(), 0);
    return keep;
  }
  budget = std::max(budget, 0);
  // Sinks come first and recent entries second when the budget cannot hold both.
  const int n_sinks = std::clamp(sinks, 0, budget);
  const int n_recent = std::clamp(recent, 0, budget - n_sinks);
  const int middle_begin = n_sinks, middle_end = n - n_recent;
  const int n_top = budget - n_sinks - n_recent;

  std::vector<int32_t> middle(middle_end - middle_begin);
  std::iota(middle.begin(), middle.end(), middle_begin);
  std::partial_sort(middle.begin(), middle.begin() + n_top, middle.end(), [&](int32_t a, int32_t b) {
    const Real sa = rank_value(scores[a]), sb = rank_value(scores[b]);
    return sa > sb || (sa == sb && a < b);
  });
  keep.reserve(budget);
  for (int i = 0; i < n_sinks; ++i) keep.push_back(i);
  keep.insert(keep.end(), middle.begin(), middle.begin() + n_top);
  for (int i = middle_end; i < n; ++i) keep.push_back(i);
  std::sort(keep.begin(), keep.end());
  return keep;
}

}  // namespace

std::vector<int32_t> keep_top_scores(std::span<const float> scores, int budget, int sinks, int recent) {
  return keep_top(scores, budget, sinks, recent);
}

std::vector<int32_t> keep_top_scores(std::span<const double> scores, int budget, int sinks, int recent) {
  return keep_top(scores, budget, sinks, recent);
}

std::vector<std::vector<int32_t>> keep_top_scores_across_heads(const std::vector<std::vector<double>>& scores,
                                                               int budget, int sinks, int recent, int n_safe) {
  const int heads = static_cast<int>(scores.size());
  std::size_t total = 0;
  for (const auto& s : scores) total += s.size();
  const std::size_t slots = static_cast<std::size_t>(std::max(budget, 0)) * heads;
  std::vector<std::vector<int32_t>> keep(heads);
  if (total <= slots) {
    for (int h = 0; h < heads; ++h) {
      keep[h].resize(scores[h].size());
      std::iota(keep[h].begin(), keep[h].end(), 0);
    }
    return keep;
  }
  // What each head keeps whatever the others score: its protected entries and its safeguard, i.e. the
  // single-head selection with a budget of max(n_safe, protected) (never above `budget`).
  const int n_sinks = std::clamp(sinks, 0, std::max(budget, 0));
  const int n_recent = std::clamp(recent, 0, std::max(budget, 0) - n_sinks);
  const int forced = std::clamp(std::max(n_safe, n_sinks + n_recent), 0, std::max(budget, 0));
  struct Candidate {
    double score;
    int head;
    int32_t entry;
  };
  std::vector<Candidate> rest;
  std::size_t kept = 0;
  for (int h = 0; h < heads; ++h) {
    keep[h] = keep_top(std::span<const double>(scores[h]), forced, n_sinks, n_recent);
    kept += keep[h].size();
    std::vector<char> taken(scores[h].size(), 0);
    for (int32_t j : keep[h]) taken[j] = 1;
    for (std::size_t j = 0; j < scores[h].size(); ++j)
      if (!taken[j]) rest.push_back({rank_value(scores[h][j]), h, static_cast<int32_t>(j)});
  }
  const std::size_t n_more = std::min(rest.size(), slots - std::min(slots, kept));
  std::partial_sort(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(n_more), rest.end(),
                    [](const Candidate& a, const Candidate& b) {
                      if (a.score != b.score) return a.score > b.score;
                      return a.head != b.head ? a.head < b.head : a.entry < b.entry;
                    });
  for (std::size_t i = 0; i < n_more; ++i) keep[rest[i].head].push_back(rest[i].entry);
  for (auto& k : keep) std::sort(k.begin(), k.end());
  return keep;
}

Pooling parse_pooling(const std::string& name) {
  if (name == "none") return Pooling::None;
  if (name == "avg") return Pooling::Avg;
  if (name == "max") return Pooling::Max;
  throw UsageError("pooling '" + name + "' is not one of none|avg|max");
}

std::vector<float> pool1d(std::span<const float> x, int kernel, Pooling pooling) {
  if (pooling == Pooling::None || kernel == 1) return {x.begin(), x.end()};
  if (kernel < 1 || kernel % 2 == 0)
    throw UsageError("pooling kernel " + std::to_string(kernel) + " must be a positive odd number");
  const int n = static_cast<int>(x.size());
  const int half = kernel / 2;
  std::vector<float> out(n);
  for (int i = 0; i < n; ++i) {
    const int lo = std::max(0, i - half), hi = std::min(n - 1, i + half);
    if (pooling == Pooling::Avg) {
      // The padded zeros count in the divisor (PyTorch's avg_pool1d with count_include_pad), so entries
      // near the ends score lower, exactly as in SnapKV's reference code.
      double sum = 0.0;
      for (int j = lo; j <= hi; ++j) sum += x[j];
      out[i] = static_cast<float>(sum / kernel);
    } else {
      // max_pool1d pads with -inf, i.e. the maximum over the real neighbours only.
      float m = x[lo];
      for (int j = lo + 1; j <= hi; ++j) m = std::max(m, x[j]);
      out[i] = m;
    }
  }
  return out;
}

GroupReduce parse_group_reduce(const std::string& name) {
  if (name == "mean") return GroupReduce::Mean;
  if (name == "max") return GroupReduce::Max;
  if (name == "sum") return GroupReduce::Sum;
  throw UsageError("group reduction '" + name + "' is not one of mean|max|sum");
}

std::vector<float> reduce_group(const std::vector<std::vector<float>>& per_head, int kv_head, int group_size,
                                GroupReduce reduce) {
  const int first = kv_head * group_size;
  if (group_size < 1 || first + group_size > static_cast<int>(per_head.size()))
    throw Error("reduce_group: kv head " + std::to_string(kv_head) + " with group size " + std::to_string(group_size) +
                " needs query heads up to " + std::to_string(first + group_size - 1) + ", but only " +
                std::to_string(per_head.size()) + " were observed");
  const std::size_t n = per_head[first].size();
  std::vector<float> out(per_head[first]);
  for (int h = first + 1; h < first + group_size; ++h) {
    if (per_head[h].size() != n)
      throw Error("reduce_group: query heads " + std::to_string(first) + " and " + std::to_string(h) + " of kv head " +
                  std::to_string(kv_head) + " observed " + std::to_string(n) + " and " +
                  std::to_string(per_head[h].size()) + " keys");
    for (std::size_t j = 0; j < n; ++j)
      out[j] = reduce == GroupReduce::Max ? std::max(out[j], per_head[h][j]) : out[j] + per_head[h][j];
  }
  if (reduce == GroupReduce::Mean)
    for (float& v : out) v /= static_cast<float>(group_size);
  return out;
}

cache::HeadEdit keep_edit(int layer, int kv_head, std::vector<int32_t> keep, std::vector<float> scores) {
  cache::HeadEdit edit;
  edit.layer = layer;
  edit.kv_head = kv_head;
  edit.keep = std::move(keep);
  edit.scores = std::move(scores);
  return edit;
}

}  // namespace kvscope::policy
