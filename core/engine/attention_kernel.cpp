#include "core/engine/attention_kernel.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>

#include "kernels/backend.h"

namespace kvscope::engine {

namespace {

// Queries per block in prefill: bounds the score scratch to block x keys while keeping BLAS efficient.
constexpr int kQueryBlock = 64;

struct Reductions {
  const ObservationRequest& request;
  AttentionObservation& obs;
  int n;

  void allocate(int head, int n_keys) {
    if (request.column_sums) obs.column_sums[head].assign(n_keys, 0.0f);
    if (request.window_sums) obs.window_sums[head].assign(n_keys, 0.0f);
    if (request.window_rows) obs.window_rows[head].assign(static_cast<std::size_t>(obs.window) * n_keys, 0.0f);
    if (request.last_row) obs.last_row[head].assign(n_keys, 0.0f);
  }

  // Row `row` of the step (0-based) with probabilities over its first n_cols keys.
  void add_row(int head, int row, const float* p, int n_cols, int n_keys) {
    if (request.column_sums) {
      float* sums = obs.column_sums[head].data();
      for (int j = 0; j < n_cols; ++j) sums[j] += p[j];
    }
    const int window_row = row - (n - obs.window);
    if (window_row >= 0) {
      if (request.window_sums) {
        float* sums = obs.window_sums[head].data();
        for (int j = 0; j < n_cols; ++j) sums[j] += p[j];
      }
      if (request.window_rows)
        std::copy(p, p + n_cols, obs.window_rows[head].begin() + static_cast<std::size_t>(window_row) * n_keys);
    }
    if (request.last_row && row == n - 1) std::copy(p, p + n_cols, obs.last_row[head].begin());
  }
};

}  // namespace

void compute_attention(const AttentionInputs& in, const ObservationRequest& request,
                       const std::vector<RunObserver*>& observers, AttentionObservation& obs, float* out) {
  const auto& c = in.config;
  const int d = c.head_dim;
  const int q_stride = c.n_heads * d;
  const int group = c.group_size();
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int n = in.n;

  obs.n_keys.resize(c.n_kv_heads);
  for (int g = 0; g < c.n_kv_heads; ++g) obs.n_keys[g] = in.cache.size(in.layer, g);
  obs.window = request.window > 0 ? std::min(request.window, n) : 0;
  const auto heads = static_cast<std::size_t>(c.n_heads);
  if (request.column_sums) obs.column_sums.resize(heads);
  if (request.window_sums) obs.window_sums.resize(heads);
  if (request.window_rows) obs.window_rows.resize(heads);
  if (request.last_row) obs.last_row.resize(heads);
  Reductions reductions{request, obs, n};
  // Observers that handle heads concurrently get rows straight from each thread; the rest one at a time.
  std::vector<RunObserver*> concurrent, serialised;
  if (request.rows)
    for (RunObserver* o : observers) (o->rows_concurrent_across_heads() ? concurrent : serialised).push_back(o);
  // An exception must not leave an OpenMP region: the first one is kept, later rows are dropped, and
  // it is rethrown once the threads have joined.
  std::exception_ptr observer_error;
  std::atomic<bool> observer_failed{false};
  std::mutex observer_error_mutex;
  auto deliver_rows = [&](int h, int first_row, int rows, int cols, const float* probs) {
    if (observer_failed.load(std::memory_order_relaxed)) return;
    try {
      for (RunObserver* o : concurrent) o->on_rows(in.layer, h, first_row, rows, cols, probs);
      if (serialised.empty()) return;
#pragma omp critical(kvscope_attention_rows)
      for (RunObserver* o : serialised) o->on_rows(in.layer, h, first_row, rows, cols, probs);
    } catch (...) {
      std::lock_guard<std::mutex> lock(observer_error_mutex);
      if (!observer_error) observer_error = std::current_exception();
      observer_failed = true;
    }
  };

  if (n == 1) {
    // Decode: one query per head; heads run in parallel.
#pragma omp parallel for schedule(static)
    for (int h = 0; h < c.n_heads; ++h) {
      const int g = h / group;
      const int m = obs.n_keys[g];
      const float* keys = in.cache.keys(in.layer, g).data();
      const float* values = in.cache.values(in.layer, g).data();
      const float* qh = in.q + static_cast<std::size_t>(h) * d;
      std::vector<float> p(m);
      for (int j = 0; j < m; ++j) p[j] = kernels::dot(qh, keys + static_cast<std::size_t>(j) * d, d) * scale;
      kernels::softmax(p.data(), m);
      float* oh = out + static_cast<std::size_t>(h) * d;
      std::fill(oh, oh + d, 0.0f);
      for (int j = 0; j < m; ++j)
        for (int t = 0; t < d; ++t) oh[t] += p[j] * values[static_cast<std::size_t>(j) * d + t];
      reductions.allocate(h, m);
      reductions.add_row(h, 0, p.data(), m, m);
      deliver_rows(h, 0, 1, m, p.data());
    }
    if (observer_error) std::rethrow_exception(observer_error);
    return;
  }

  // Prefill: heads run in parallel, each with single-threaded BLAS on blocks of queries.
#pragma omp parallel
  {
    std::vector<float> scores;
#pragma omp for schedule(dynamic, 1)
    for (int h = 0; h < c.n_heads; ++h) {
      const int g = h / group;
      const int m = obs.n_keys[g];
      const auto positions = in.cache.positions(in.layer, g);
      const float* keys = in.cache.keys(in.layer, g).data();
      const float* values = in.cache.values(in.layer, g).data();
      reductions.allocate(h, m);
      for (int i0 = 0; i0 < n; i0 += kQueryBlock) {
        const int rows = std::min(kQueryBlock, n - i0);
        // Entries are ordered by position, so the keys any query of this block may see form a prefix.
        const int m_block = static_cast<int>(
            std::upper_bound(positions.begin(), positions.begin() + m, in.positions[i0 + rows - 1]) - positions.begin());
        scores.assign(static_cast<std::size_t>(rows) * m_block, 0.0f);
        if (m_block > 0)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, m_block, d, scale,
                      in.q + static_cast<std::size_t>(i0) * q_stride + static_cast<std::size_t>(h) * d, q_stride, keys, d,
                      0.0f, scores.data(), m_block);
        for (int r = 0; r < rows; ++r) {
          float* row = scores.data() + static_cast<std::size_t>(r) * m_block;
          const int visible = static_cast<int>(
              std::upper_bound(positions.begin(), positions.begin() + m_block, in.positions[i0 + r]) - positions.begin());
          kernels::softmax(row, visible);
          std::fill(row + visible, row + m_block, 0.0f);
          reductions.add_row(h, i0 + r, row, m_block, m);
        }
        deliver_rows(h, i0, rows, m_block, scores.data());
        float* o_block = out + static_cast<std::size_t>(i0) * q_stride + static_cast<std::size_t>(h) * d;
        if (m_block > 0)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, m_block, 1.0f, scores.data(), m_block, values,
                      d, 0.0f, o_block, q_stride);
        else
          for (int r = 0; r < rows; ++r)
            std::fill(o_block + static_cast<std::size_t>(r) * q_stride, o_block + static_cast<std::size_t>(r) * q_stride + d, 0.0f);
      }
    }
  }
  if (observer_error) std::rethrow_exception(observer_error);
}

}  // namespace kvscope::engine
