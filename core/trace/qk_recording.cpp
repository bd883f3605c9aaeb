#include "core/trace/qk_recording.h"

#include <algorithm>
#include <limits>

#include "core/common/error.h"
#include "core/trace/float16.h"

namespace kvscope::trace {

namespace {
constexpr uint16_t kHalfNaN = 0x7E00;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
}  // namespace

QKRecording::QKRecording(int n_layers, int n_heads, int n_kv_heads, int head_dim, std::vector<int> layers)
    : n_layers_(n_layers), n_heads_(n_heads), n_kv_heads_(n_kv_heads), head_dim_(head_dim),
      recorded_(static_cast<std::size_t>(std::max(0, n_layers)), false) {
  for (int l : layers)
    if (l >= 0 && l < n_layers) recorded_[static_cast<std::size_t>(l)] = true;
}

void QKRecording::begin_step(int first, int end) {
  if (span_) return;
  span_ = std::make_shared<QKSpan>();
  span_->first_position = first;
  span_->n_positions = std::max(0, end - first);
  const std::size_t n = static_cast<std::size_t>(span_->n_positions);
  span_->layers.resize(static_cast<std::size_t>(n_layers_));
  for (int layer = 0; layer < n_layers_; ++layer) {
    if (!records(layer)) continue;
    QKSpan::Layer& l = span_->layers[static_cast<std::size_t>(layer)];
    l.queries.assign(n * n_heads_ * head_dim_, kHalfNaN);
    l.keys.assign(n * n_kv_heads_ * head_dim_, kHalfNaN);
    l.lse.assign(n * n_heads_, kNaN);
  }
  key_seen_.assign(static_cast<std::size_t>(n_layers_), std::vector<bool>(n * n_kv_heads_, false));
  observed_.assign(static_cast<std::size_t>(n_layers_), false);
  edited_before_observed_.assign(static_cast<std::size_t>(n_layers_), false);
}

void QKRecording::add_observation(const observation::AttentionObservation& obs) {
  if (!span_ || !records(obs.layer)) return;
  QKSpan::Layer& l = span_->layers[static_cast<std::size_t>(obs.layer)];
  const std::size_t q_row = static_cast<std::size_t>(n_heads_) * head_dim_;
  if (obs.queries.size() != obs.query_positions.size() * q_row ||
      obs.log_sum_exp.size() != static_cast<std::size_t>(n_heads_))
    throw Error("q/k recording: layer " + std::to_string(obs.layer) + "'s observation lacks queries or log-sum-exp");
  observed_[obs.layer] = true;
  const bool rebuildable = !edited_before_observed_[obs.layer];
  for (int i = 0; i < obs.n_queries(); ++i) {
    const int row = obs.query_positions[i] - span_->first_position;
    if (row < 0 || row >= span_->n_positions) continue;
    floats_to_half(obs.queries.data() + i * q_row, q_row, l.queries.data() + row * q_row);
    for (int h = 0; h < n_heads_; ++h)
      l.lse[static_cast<std::size_t>(row) * n_heads_ + h] = rebuildable ? obs.log_sum_exp[h][i] : kNaN;
  }
}

void QKRecording::before_edit(const cache::KVCache& before, int layer, int kv_head) {
  if (!span_ || !records(layer) || kv_head < 0 || kv_head >= n_kv_heads_) return;
  if (!observed_[layer]) edited_before_observed_[layer] = true;
  keep_keys(before, layer, kv_head);
}

void QKRecording::keep_keys(const cache::KVCache& cache, int layer, int kv_head) {
  const auto positions = cache.positions(layer, kv_head);
  const int first = span_->first_position, end = first + span_->n_positions;
  auto& seen = key_seen_[layer];
  QKSpan::Layer& l = span_->layers[layer];
  // Entries are ordered by position: the step's own are at the end.
  for (auto it = std::lower_bound(positions.begin(), positions.end(), first); it != positions.end() && *it < end; ++it) {
    const std::size_t slot = static_cast<std::size_t>(*it - first) * n_kv_heads_ + kv_head;
    if (seen[slot]) continue;
    seen[slot] = true;
    const int entry = static_cast<int>(it - positions.begin());
    floats_to_half(cache.key(layer, kv_head, entry), static_cast<std::size_t>(head_dim_),
                   l.keys.data() + slot * head_dim_);
  }
}

QKSpanRef QKRecording::finish_step(const cache::KVCache& cache) {
  if (!span_) return nullptr;
  for (int l = 0; l < n_layers_; ++l)
    if (records(l))
      for (int g = 0; g < n_kv_heads_; ++g) keep_keys(cache, l, g);
  QKSpanRef out = std::move(span_);
  span_.reset();
  return out;
}

std::vector<QKSpanRef> qk_spans_before(const std::vector<QKSpanRef>& spans, int end) {
  std::vector<QKSpanRef> out;
  for (const QKSpanRef& span : spans) {
    if (span->first_position >= end) break;
    if (span->first_position + span->n_positions <= end) {
      out.push_back(span);
      continue;
    }
    auto cut = std::make_shared<QKSpan>();
    cut->first_position = span->first_position;
    cut->n_positions = end - span->first_position;
    const std::size_t n = static_cast<std::size_t>(cut->n_positions), total = static_cast<std::size_t>(span->n_positions);
    for (const QKSpan::Layer& l : span->layers) {
      auto head = [&](const auto& v) { return std::vector(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / total * n)); };
      cut->layers.push_back({head(l.queries), head(l.keys), head(l.lse)});
    }
    out.push_back(std::move(cut));
  }
  return out;
}

}  // namespace kvscope::trace
