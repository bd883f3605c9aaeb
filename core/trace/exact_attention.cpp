#include "core/trace/exact_attention.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>

#include "core/common/error.h"
#include "core/trace/float16.h"
#include "kernels/common/softmax_math.h"

namespace kvscope::trace {

namespace {
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

int ceil_div(int a, int b) { return (a + b - 1) / b; }
// Grouped-query attention: query head h reads KV head h / (n_heads / n_kv_heads). Checked ranges come later.
int kv_head_for(const RunTrace& run, int head) {
  return run.n_kv_heads > 0 && run.n_heads >= run.n_kv_heads ? head / (run.n_heads / run.n_kv_heads) : 0;
}
}  // namespace

ExactAttention::ExactAttention(const RunTrace& run, int layer, int head)
    : run_(run), layer_(layer), head_(head), attended_(run, layer, kv_head_for(run, head)) {
  if (!available(run))
    throw Error("run '" + run.name + "' holds no queries and keys (recorded without --record qk=on): exact attention "
                "cannot be rebuilt; only its pooled maps can be shown");
  if (layer < 0 || layer >= run.n_layers) throw UsageError("layer " + std::to_string(layer) + " is outside 0.." + std::to_string(run.n_layers - 1));
  if (!run.holds_qk(layer)) throw Error("run '" + run.name + "': " + unavailable_reason(run, layer));
  if (head < 0 || head >= run.n_heads) throw UsageError("head " + std::to_string(head) + " is outside 0.." + std::to_string(run.n_heads - 1));
  n_heads_ = run.n_heads;
  n_kv_heads_ = run.n_kv_heads;
  kv_head_ = kv_head_for(run, head);
  head_dim_ = run.head_dim;
  scale_ = static_cast<float>(run.qk_scale);
  softcap_ = static_cast<float>(run.qk_softcap);
  window_ = run.layer_window(layer);
  for (const QKSpanRef& span : run.qk) {
    if (span->first_position != n_positions_ || static_cast<int>(span->layers.size()) <= layer)
      throw Error("run '" + run.name + "': its q/k spans do not cover positions 0.. in order for layer " + std::to_string(layer));
    spans_.push_back(span.get());
    n_positions_ += span->n_positions;
  }

  // A merge changes its target's key from the step it happens in: rows of later steps see the merged key.
  key_changed_.assign(static_cast<std::size_t>(n_positions_), INT_MAX);
  for (const Event& e : run.events) {
    if (e.layer != layer || e.kv_head != kv_head_ || e.action != EventAction::Merged) continue;
    if (e.merge_target < 0 || e.merge_target >= n_positions_) continue;
    const int row = run.step_row(e);
    const int from = row >= 0 && row < attended_.n_steps() ? attended_.step_end(row) : 0;
    int& changed = key_changed_[static_cast<std::size_t>(e.merge_target)];
    changed = std::min(changed, from);
  }
}

std::string ExactAttention::unavailable_reason(const RunTrace& run, int layer) {
  if (!available(run)) return "recorded without queries and keys (--record qk=on gives exact cells)";
  if (!run.holds_qk(layer))
    return "layer " + std::to_string(layer) + "'s queries and keys were not recorded (q/k of layers " + run.qk_layers_text() +
           " only: --record qk=layers:...)";
  return "";
}

ExactAttention::SpanRow ExactAttention::locate(int position) const {
  auto it = std::upper_bound(spans_.begin(), spans_.end(), position, [](int p, const QKSpan* s) { return p < s->first_position; });
  const QKSpan* s = *(it - 1);
  return {&s->layers[layer_], static_cast<std::size_t>(position - s->first_position)};
}

const uint16_t* ExactAttention::query(int position) const {
  const SpanRow at = locate(position);
  return at.layer->queries.data() + (at.row * n_heads_ + head_) * head_dim_;
}

const uint16_t* ExactAttention::key(int position) const {
  const SpanRow at = locate(position);
  return at.layer->keys.data() + (at.row * n_kv_heads_ + kv_head_) * head_dim_;
}

float ExactAttention::lse(int position) const {
  const SpanRow at = locate(position);
  return at.layer->lse[at.row * n_heads_ + head_];
}

float ExactAttention::probability(int q, int k) const {
  if (q < 0 || q >= n_positions_ || k < 0 || k >= n_positions_)
    throw UsageError("cell (" + std::to_string(q) + ", " + std::to_string(k) + ") is outside the recorded positions 0.." +
                     std::to_string(n_positions_ - 1));
  return region(q, q + 1, k, k + 1, 1, 1, Pooling::Max).map.values[0];
}

AttentionRegion ExactAttention::region(int q0, int q1, int k0, int k1, int max_rows, int max_cols, Pooling pooling) const {
  auto range = [&](const char* what, int a, int b) {
    if (a >= b) throw UsageError(std::string(what) + " " + std::to_string(a) + ":" + std::to_string(b) + " is empty or reversed");
    if (a < 0 || b > n_positions_)
      throw UsageError(std::string(what) + " " + std::to_string(a) + ":" + std::to_string(b) + " is outside run '" + run_.name +
                       "': it has q/k for positions 0:" + std::to_string(n_positions_) + " (the prompt's " +
                       std::to_string(run_.prompt_length) + " and " + std::to_string(n_positions_ - run_.prompt_length) +
                       " decoded)");
  };
  range("queries", q0, q1);
  range("keys", k0, k1);
  const int n_rows = q1 - q0, n_cols = k1 - k0;
  const int row_block = ceil_div(n_rows, std::max(1, max_rows)), col_block = ceil_div(n_cols, std::max(1, max_cols));
  AttentionRegion out;
  out.first_query = q0;
  out.first_key = k0;
  Map2D& m = out.map;
  m.source_rows = n_rows;
  m.source_cols = n_cols;
  m.row_block = row_block;
  m.col_block = col_block;
  m.rows = ceil_div(n_rows, row_block);
  m.cols = ceil_div(n_cols, col_block);
  m.pooling = pooling;
  m.values.assign(static_cast<std::size_t>(m.rows) * m.cols, 0.0f);

  const int d = head_dim_;
  std::vector<float> keys(static_cast<std::size_t>(n_cols) * d);
  for (int j = 0; j < n_cols; ++j) halves_to_float(key(k0 + j), d, keys.data() + static_cast<std::size_t>(j) * d);

  // Output rows are independent (a window zoomed into a long prompt asks for up to a million cells per frame).
#pragma omp parallel for schedule(dynamic, 1) if (static_cast<long>(n_rows) * n_cols > 65536)
  for (int R = 0; R < m.rows; ++R) {
    std::vector<float> q(d), row(n_cols);
    std::vector<KeyState> keys_seen(n_cols);
    float* out_row = m.values.data() + static_cast<std::size_t>(R) * m.cols;
    for (int r = R * row_block; r < std::min(n_rows, (R + 1) * row_block); ++r) {
      const int i = q0 + r;
      const float row_lse = lse(i);
      halves_to_float(query(i), d, q.data());
      attended_.row(i, k0, k1, keys_seen.data());
      for (int c = 0; c < n_cols; ++c) {
        const int j = k0 + c;
        float p;
        if (keys_seen[c] == KeyState::Future || keys_seen[c] == KeyState::NotInCache || (window_ > 0 && j <= i - window_)) {
          p = 0.0f;  // causal, not in the cache this row attended to, or behind a local layer's window
        } else if (keys_seen[c] == KeyState::Unknown || std::isnan(row_lse) || key_changed_[j] <= i) {
          p = kNaN;
        } else {
          const float* k = keys.data() + static_cast<std::size_t>(c) * d;
          float dot = 0.0f;
          for (int t = 0; t < d; ++t) dot += q[t] * k[t];
          p = std::exp(kernels::softcap(dot * scale_, softcap_) - row_lse);
        }
        row[c] = p;
      }
      for (int c = 0; c < n_cols; ++c) {
        float& cell = out_row[c / col_block];
        if (std::isnan(cell)) continue;
        if (std::isnan(row[c])) cell = kNaN;
        else cell = pooling == Pooling::Max ? std::max(cell, row[c]) : cell + row[c];
      }
    }
  }
  if (pooling == Pooling::Mean)
    for (int R = 0; R < m.rows; ++R)
      for (int C = 0; C < m.cols; ++C) {
        const int cells = (std::min(n_rows, (R + 1) * row_block) - R * row_block) * (std::min(n_cols, (C + 1) * col_block) - C * col_block);
        m.values[static_cast<std::size_t>(R) * m.cols + C] /= static_cast<float>(cells);
      }
  return out;
}

}  // namespace kvscope::trace
