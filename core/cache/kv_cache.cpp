#include "core/cache/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/common/error.h"

namespace kvscope::cache {

namespace {
// After an edit the cache gives memory back when more than this share of a head's allocation is unused,
// so evicting really shrinks the footprint while decode appends do not reallocate every step.
constexpr double kMaxSlackShare = 0.25;
constexpr std::size_t kMinSlackEntries = 16;

std::string where(const HeadEdit& e) {
  return "cache edit for layer " + std::to_string(e.layer) + " kv head " + std::to_string(e.kv_head);
}
}  // namespace

KVCache::KVCache(int n_layers, int n_kv_heads, int head_dim)
    : n_layers_(n_layers), n_kv_heads_(n_kv_heads), head_dim_(head_dim),
      heads_(static_cast<std::size_t>(n_layers) * n_kv_heads), layer_peak_bytes_(n_layers, 0) {}

const float* KVCache::key(int layer, int kv_head, int entry) const {
  return at(layer, kv_head).keys.data() + static_cast<std::size_t>(entry) * head_dim_;
}
const float* KVCache::value(int layer, int kv_head, int entry) const {
  return at(layer, kv_head).values.data() + static_cast<std::size_t>(entry) * head_dim_;
}

void KVCache::append(int layer, const float* k, const float* v, int n, const int32_t* positions) {
  for (int h = 0; h < n_kv_heads_; ++h) {
    HeadEntries& head = at(layer, h);
    reserve_for(head, head.positions.size() + n);
    for (int t = 0; t < n; ++t) {
      const std::size_t offset = (static_cast<std::size_t>(t) * n_kv_heads_ + h) * head_dim_;
      head.keys.insert(head.keys.end(), k + offset, k + offset + head_dim_);
      head.values.insert(head.values.end(), v + offset, v + offset + head_dim_);
      head.positions.push_back(positions[t]);
      head.merge_counts.push_back(1);
      head.scores.push_back(0.0f);
    }
  }
  update_bytes();
}

void KVCache::reserve_for(HeadEntries& head, std::size_t entries) {
  // Growing one token at a time would double capacity; reserving exactly keeps bytes() honest after prefill.
  if (head.positions.capacity() >= entries) return;
  const std::size_t target = head.positions.empty() ? entries : std::max(entries, head.positions.size() + head.positions.size() / 4 + kMinSlackEntries);
  head.keys.reserve(target * head_dim_);
  head.values.reserve(target * head_dim_);
  head.positions.reserve(target);
  head.merge_counts.reserve(target);
  head.scores.reserve(target);
}

void KVCache::validate(const HeadEdit& e, int current_size, int n_layers, int n_kv_heads) {
  if (e.layer < 0 || e.layer >= n_layers || e.kv_head < 0 || e.kv_head >= n_kv_heads)
    throw Error(where(e) + ": no such layer/head (model has " + std::to_string(n_layers) + " layers, " +
                std::to_string(n_kv_heads) + " kv heads)");
  std::vector<char> role(current_size, 0);  // 1 kept, 2 merge source
  int previous = -1;
  for (int32_t i : e.keep) {
    if (i < 0 || i >= current_size)
      throw Error(where(e) + ": keep index " + std::to_string(i) + " out of range [0, " + std::to_string(current_size) + ")");
    if (i <= previous) throw Error(where(e) + ": keep indices must be strictly increasing (got " + std::to_string(i) + " after " + std::to_string(previous) + ")");
    previous = i;
    role[i] = 1;
  }
  std::vector<char> is_target(current_size, 0);
  for (const MergeGroup& g : e.merges) {
    if (g.target < 0 || g.target >= current_size || role[g.target] != 1)
      throw Error(where(e) + ": merge target " + std::to_string(g.target) + " is not a kept entry");
    if (is_target[g.target]) throw Error(where(e) + ": entry " + std::to_string(g.target) + " is the target of two merge groups");
    is_target[g.target] = 1;
    if (g.weights.size() != g.sources.size() + 1)
      throw Error(where(e) + ": merge into " + std::to_string(g.target) + " has " + std::to_string(g.weights.size()) +
                  " weights, expected " + std::to_string(g.sources.size() + 1));
    double sum = 0.0;
    for (float w : g.weights) {
      if (!std::isfinite(w) || w < 0.0f) throw Error(where(e) + ": merge weight " + std::to_string(w) + " is not finite and non-negative");
      sum += w;
    }
    if (std::abs(sum - 1.0) > 1e-4) throw Error(where(e) + ": merge weights sum to " + std::to_string(sum) + ", expected 1");
    for (int32_t s : g.sources) {
      if (s < 0 || s >= current_size) throw Error(where(e) + ": merge source " + std::to_string(s) + " out of range");
      if (role[s] != 0) throw Error(where(e) + ": merge source " + std::to_string(s) + " is kept or merged twice");
      role[s] = 2;
    }
  }
  std::vector<char> value_source(current_size, 0);
  for (const ValueMerge& m : e.value_merges) {
    if (m.source < 0 || m.source >= current_size || role[m.source] == 1 || value_source[m.source])
      throw Error(where(e) + ": value merge source " + std::to_string(m.source) +
                  " is out of range, kept, or a value merge source twice");
    value_source[m.source] = 1;
    if (!std::isfinite(m.weight))
      throw Error(where(e) + ": value merge weight " + std::to_string(m.weight) + " is not finite");
    for (int32_t t : m.targets)
      if (t < 0 || t >= current_size || t == m.source)
        throw Error(where(e) + ": value merge of " + std::to_string(m.source) + " into " + std::to_string(t) +
                    ": target out of range or the source itself");
  }
  const std::size_t score_size_ok = e.scores.empty() || e.scores.size() == static_cast<std::size_t>(current_size);
  if (!score_size_ok) throw Error(where(e) + ": scores has " + std::to_string(e.scores.size()) + " values, expected " + std::to_string(current_size));
}

void KVCache::apply(const CacheEdit& edit) {
  // Validate the whole edit first so a bad edit leaves the cache untouched.
  std::vector<char> seen(heads_.size(), 0);
  for (const HeadEdit& e : edit.heads) {
    const bool in_range = e.layer >= 0 && e.layer < n_layers_ && e.kv_head >= 0 && e.kv_head < n_kv_heads_;
    validate(e, in_range ? size(e.layer, e.kv_head) : 0, n_layers_, n_kv_heads_);
    char& once = seen[static_cast<std::size_t>(e.layer) * n_kv_heads_ + e.kv_head];
    if (once) throw Error(where(e) + ": the edit names this head twice");
    once = 1;
  }
  for (const HeadEdit& e : edit.heads) apply_head(e);
  update_bytes();
}

void KVCache::apply_head(const HeadEdit& e) {
  HeadEntries& head = at(e.layer, e.kv_head);
  const std::size_t d = head_dim_;
  // Merges first, while source indices still refer to the old layout; value merges in order, then groups.
  for (const ValueMerge& m : e.value_merges)
    for (int32_t t : m.targets)
      for (std::size_t j = 0; j < d; ++j) head.values[t * d + j] += m.weight * head.values[m.source * d + j];
  for (const MergeGroup& g : e.merges) {
    std::vector<float> k(d), v(d);
    const float* tk = &head.keys[g.target * d];
    const float* tv = &head.values[g.target * d];
    for (std::size_t j = 0; j < d; ++j) {
      k[j] = g.weights[0] * tk[j];
      v[j] = g.weights[0] * tv[j];
    }
    int32_t count = head.merge_counts[g.target];
    float score = head.scores[g.target];
    for (std::size_t s = 0; s < g.sources.size(); ++s) {
      const std::size_t src = g.sources[s];
      for (std::size_t j = 0; j < d; ++j) {
        k[j] += g.weights[s + 1] * head.keys[src * d + j];
        v[j] += g.weights[s + 1] * head.values[src * d + j];
      }
      count += head.merge_counts[src];
      score += head.scores[src];
    }
    std::copy(k.begin(), k.end(), head.keys.begin() + g.target * d);
    std::copy(v.begin(), v.end(), head.values.begin() + g.target * d);
    head.merge_counts[g.target] = count;
    head.scores[g.target] = score;
  }
  // Compaction in place: keep is increasing, so each kept row moves down or stays.
  std::size_t out = 0;
  for (int32_t i : e.keep) {
    if (static_cast<std::size_t>(i) != out) {
      std::copy_n(head.keys.begin() + i * d, d, head.keys.begin() + out * d);
      std::copy_n(head.values.begin() + i * d, d, head.values.begin() + out * d);
      head.positions[out] = head.positions[i];
      head.merge_counts[out] = head.merge_counts[i];
      head.scores[out] = head.scores[i];
    }
    ++out;
  }
  head.keys.resize(out * d);
  head.values.resize(out * d);
  head.positions.resize(out);
  head.merge_counts.resize(out);
  head.scores.resize(out);
  release_slack(head);
}

void KVCache::release_slack(HeadEntries& head) {
  const std::size_t n = head.positions.size();
  const std::size_t capacity = head.positions.capacity();
  if (capacity - n <= kMinSlackEntries || static_cast<double>(capacity - n) <= kMaxSlackShare * capacity) return;
  const std::size_t keep_capacity = n + kMinSlackEntries;
  auto shrink = [keep_capacity](auto& vec, std::size_t per_entry) {
    std::remove_reference_t<decltype(vec)> fresh;
    fresh.reserve(keep_capacity * per_entry);
    fresh.assign(vec.begin(), vec.end());
    vec.swap(fresh);
  };
  shrink(head.keys, head_dim_);
  shrink(head.values, head_dim_);
  shrink(head.positions, 1);
  shrink(head.merge_counts, 1);
  shrink(head.scores, 1);
}

std::size_t KVCache::head_bytes(const HeadEntries& head) const {
  return (head.keys.capacity() + head.values.capacity()) * sizeof(float);
}

std::size_t KVCache::layer_bytes(int layer) const {
  std::size_t total = 0;
  for (int h = 0; h < n_kv_heads_; ++h) total += head_bytes(at(layer, h));
  return total;
}

void KVCache::update_bytes() {
  bytes_ = 0;
  for (int l = 0; l < n_layers_; ++l) {
    const std::size_t b = layer_bytes(l);
    layer_peak_bytes_[l] = std::max(layer_peak_bytes_[l], b);
    bytes_ += b;
  }
  peak_bytes_ = std::max(peak_bytes_, bytes_);
}

std::size_t KVCache::full_cache_bytes(int seq_len) const {
  return static_cast<std::size_t>(seq_len) * n_layers_ * n_kv_heads_ * head_dim_ * 2 * sizeof(float);
}

int KVCache::total_entries() const {
  int total = 0;
  for (const auto& h : heads_) total += static_cast<int>(h.positions.size());
  return total;
}

}  // namespace kvscope::cache
