#include "core/cache/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/common/error.h"

namespace kvscope::cache {

namespace {
std::string where(const HeadEdit& e) {
  return "cache edit for layer " + std::to_string(e.layer) + " kv head " + std::to_string(e.kv_head);
}
}  // namespace

KVCache::KVCache(int n_layers, int n_kv_heads, int head_dim, kernels::KVCacheTypes type, kernels::Backend* backend)
    : n_layers_(n_layers), n_kv_heads_(n_kv_heads), head_dim_(head_dim),
      storage_((backend ? *backend : kernels::default_cpu_backend()).make_kv_storage(n_layers, n_kv_heads, head_dim, type)),
      heads_(static_cast<std::size_t>(n_layers) * n_kv_heads),
      copies_(static_cast<std::size_t>(n_layers) * n_kv_heads * 2), layer_bytes_now_(n_layers, 0),
      layer_peak_bytes_(n_layers, 0) {}

std::span<const float> KVCache::rows(int layer, int kv_head, kernels::KVPart part) const {
  const std::size_t n = static_cast<std::size_t>(size(layer, kv_head)) * head_dim_;
  if (const float* direct = storage_->host_f32_rows(layer, kv_head, part)) return {direct, n};
  std::lock_guard<std::mutex> lock(*copy_mutex_);
  RowCopy& copy = copies_[(static_cast<std::size_t>(layer) * n_kv_heads_ + kv_head) * 2 + (part == kernels::KVPart::Values)];
  const int current = size(layer, kv_head);
  if (copy.valid < current) {
    copy.rows.resize(n);
    storage_->read_rows(layer, kv_head, part, copy.valid, current - copy.valid,
                        copy.rows.data() + static_cast<std::size_t>(copy.valid) * head_dim_);
    copy.valid = current;
  }
  return {copy.rows.data(), n};
}

const float* KVCache::key(int layer, int kv_head, int entry) const {
  return keys(layer, kv_head).data() + static_cast<std::size_t>(entry) * head_dim_;
}
const float* KVCache::value(int layer, int kv_head, int entry) const {
  return values(layer, kv_head).data() + static_cast<std::size_t>(entry) * head_dim_;
}

void KVCache::append(int layer, const float* k, const float* v, int n, const int32_t* positions) {
  storage_->append(layer, k, v, n, positions);
  for (int h = 0; h < n_kv_heads_; ++h) {
    HeadMeta& head = at(layer, h);
    head.merge_counts.resize(head.merge_counts.size() + n, 1);
    head.scores.resize(head.scores.size() + n, 0.0f);
  }
  const int changed[] = {layer};
  update_bytes(changed);
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
    std::vector<char> target_seen(current_size, 0);
    for (int32_t t : m.targets) {
      if (t < 0 || t >= current_size || t == m.source || target_seen[t])
        throw Error(where(e) + ": value merge of " + std::to_string(m.source) + " into " + std::to_string(t) +
                    ": target out of range, the source itself, or named twice");
      target_seen[t] = 1;
    }
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
  std::vector<int> changed;
  for (const HeadEdit& e : edit.heads) {
    apply_head(e);
    if (std::find(changed.begin(), changed.end(), e.layer) == changed.end()) changed.push_back(e.layer);
  }
  update_bytes(changed);
}

void KVCache::apply_head(const HeadEdit& e) {
  HeadMeta& head = at(e.layer, e.kv_head);
  // Merges first, while source indices still refer to the old layout.
  for (const MergeGroup& g : e.merges)
    for (int32_t src : g.sources) {
      head.merge_counts[g.target] += head.merge_counts[src];
      head.scores[g.target] += head.scores[src];
    }
  storage_->edit(e.layer, e.kv_head, e.keep, e.merges, e.value_merges);
  std::size_t out = 0;
  for (int32_t i : e.keep) {
    head.merge_counts[out] = head.merge_counts[i];
    head.scores[out] = head.scores[i];
    ++out;
  }
  head.merge_counts.resize(out);
  head.scores.resize(out);
  for (int part = 0; part < 2; ++part) {
    RowCopy& copy = copies_[(static_cast<std::size_t>(e.layer) * n_kv_heads_ + e.kv_head) * 2 + part];
    copy.valid = 0;
  }
}

void KVCache::update_bytes(std::span<const int> layers) {
  // Only the layers an append or edit changed are counted again (counting every layer's pages on every append was
  // the cost of --cache-page); the totals and peaks are taken once the whole edit is in, as before.
  for (int l : layers) {
    const std::size_t b = layer_bytes(l);
    bytes_ = bytes_ - layer_bytes_now_[l] + b;
    layer_bytes_now_[l] = b;
    layer_peak_bytes_[l] = std::max(layer_peak_bytes_[l], b);
    if (peak_page_tokens_ > 0) {
      const std::size_t p = layer_paged_bytes(l, peak_page_tokens_);
      paged_now_ = paged_now_ - layer_paged_now_[l] + p;
      layer_paged_now_[l] = p;
      layer_paged_peak_bytes_[l] = std::max(layer_paged_peak_bytes_[l], p);
    }
  }
  peak_bytes_ = std::max(peak_bytes_, bytes_);
  if (peak_page_tokens_ > 0) paged_peak_bytes_ = std::max(paged_peak_bytes_, paged_now_);
}

void KVCache::follow_paged_peak(int page_tokens) {
  peak_page_tokens_ = page_tokens;
  paged_peak_bytes_ = 0;
  paged_now_ = 0;
  layer_paged_peak_bytes_.assign(n_layers_, 0);
  layer_paged_now_.assign(n_layers_, 0);
  std::vector<int> all(n_layers_);
  for (int l = 0; l < n_layers_; ++l) all[l] = l;
  update_bytes(all);
}

std::size_t KVCache::entry_bytes() const {
  std::size_t total = 0;
  for (int l = 0; l < n_layers_; ++l)
    for (int h = 0; h < n_kv_heads_; ++h) total += storage_->entry_bytes(l, h);
  return total;
}

std::size_t KVCache::full_cache_bytes(int seq_len) const {
  const auto n = static_cast<std::size_t>(std::max(seq_len, 0));
  return static_cast<std::size_t>(n_layers_) * n_kv_heads_ *
         (kernels::cache_part_bytes(type(), kernels::KVPart::Keys, head_dim_, n) +
          kernels::cache_part_bytes(type(), kernels::KVPart::Values, head_dim_, n));
}

std::size_t KVCache::layer_entry_bytes(int layer) const {
  std::size_t total = 0;
  for (int h = 0; h < n_kv_heads_; ++h) total += storage_->entry_bytes(layer, h);
  return total;
}

std::size_t KVCache::layer_paged_bytes(int layer, int page_tokens) const {
  std::size_t total = 0;
  for (int h = 0; h < n_kv_heads_; ++h) total += storage_->paged_bytes(layer, h, page_tokens);
  return total;
}

std::size_t KVCache::paged_bytes(int page_tokens) const {
  std::size_t total = 0;
  for (int l = 0; l < n_layers_; ++l) total += layer_paged_bytes(l, page_tokens);
  return total;
}

int KVCache::total_entries() const {
  int total = 0;
  for (int l = 0; l < n_layers_; ++l)
    for (int h = 0; h < n_kv_heads_; ++h) total += size(l, h);
  return total;
}

}  // namespace kvscope::cache
