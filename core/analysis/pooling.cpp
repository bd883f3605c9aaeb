#include "core/analysis/pooling.h"

#include <algorithm>
#include <limits>

#include "core/common/error.h"

namespace kvscope::analysis {

int block_for(int n, int max_cells) {
  if (max_cells <= 0 || n <= max_cells) return 1;
  return (n + max_cells - 1) / max_cells;
}

PoolShape PoolShape::fit(int source_rows, int source_cols, int max_rows, int max_cols, Pooling mode) {
  PoolShape s;
  s.source_rows = source_rows;
  s.source_cols = source_cols;
  s.row_block = block_for(source_rows, max_rows);
  s.col_block = block_for(source_cols, max_cols);
  s.mode = mode;
  return s;
}

Map2D PoolShape::empty_map() const {
  Map2D m;
  m.rows = rows();
  m.cols = cols();
  m.source_rows = source_rows;
  m.source_cols = source_cols;
  m.row_block = row_block;
  m.col_block = col_block;
  m.pooling = mode;
  return m;
}

RowPooler::RowPooler(const PoolShape& shape, RowSink sink) : shape_(shape), sink_(std::move(sink)) {
  if (shape.source_rows < 0 || shape.source_cols < 0 || shape.row_block < 1 || shape.col_block < 1)
    throw Error("pooling: invalid shape " + std::to_string(shape.source_rows) + "x" + std::to_string(shape.source_cols) +
                " with blocks " + std::to_string(shape.row_block) + "x" + std::to_string(shape.col_block));
  // Max pooling starts below any value so negative maps (cosine similarity) pool correctly; cells of a
  // block that never arrive are folded in as zeros when the row is emitted.
  acc_.assign(static_cast<std::size_t>(shape.source_cols),
              shape.mode == Pooling::Max ? -std::numeric_limits<float>::infinity() : 0.0f);
  count_.assign(static_cast<std::size_t>(shape.source_cols), 0);
  out_.resize(static_cast<std::size_t>(shape.cols()));
}

long RowPooler::seen_in_block(int c0, int c1) const {
  long seen = 0;
  for (int n : prefix_rows_) seen += std::clamp(n - c0, 0, c1 - c0);
  if (counted_)
    for (int j = c0; j < c1; ++j) seen += count_[j];
  return seen;
}

namespace {

// out[c] = max of in[c*B .. c*B+B) for c in [c_begin, c_end). B fixed at compile time lets the compiler
// vectorise across c; this reduction runs once per output row over the whole source width.
template <int B>
void max_of_blocks(const float* in, int c_begin, int c_end, float* out) {
  for (int c = c_begin; c < c_end; ++c) {
    float m = in[c * B];
    for (int k = 1; k < B; ++k) m = std::max(m, in[c * B + k]);
    out[c] = m;
  }
}

void max_of_blocks(const float* in, int block, int c_begin, int c_end, float* out) {
  switch (block) {
    case 1: std::copy(in + c_begin, in + c_end, out + c_begin); return;
    case 2: max_of_blocks<2>(in, c_begin, c_end, out); return;
    case 3: max_of_blocks<3>(in, c_begin, c_end, out); return;
    case 4: max_of_blocks<4>(in, c_begin, c_end, out); return;
    case 5: max_of_blocks<5>(in, c_begin, c_end, out); return;
    case 6: max_of_blocks<6>(in, c_begin, c_end, out); return;
    case 8: max_of_blocks<8>(in, c_begin, c_end, out); return;
    default:
      for (int c = c_begin; c < c_end; ++c) out[c] = *std::max_element(in + c * block, in + (c + 1) * block);
  }
}

}  // namespace

void RowPooler::emit_current() {
  const int cols = shape_.cols();
  const int r0 = next_ * shape_.row_block;
  const int block_rows = std::min(shape_.row_block, shape_.source_rows - r0);
  const bool max = shape_.mode == Pooling::Max;
  const int cb = shape_.col_block;
  if (max) {
    // Source columns every row of the block reached, and columns some row reached. Rows given as a
    // prefix 0..n-1 (no column list) make both cheap to know: blocks below the first need no count,
    // blocks beyond the second were never touched and pool to 0.
    int all_seen = 0, some_seen = shape_.source_cols;
    if (!counted_) {
      some_seen = 0;
      for (int n : prefix_rows_) some_seen = std::max(some_seen, n);
      if (static_cast<int>(prefix_rows_.size()) == block_rows) all_seen = *std::min_element(prefix_rows_.begin(), prefix_rows_.end());
    }
    const int c_full = std::min(all_seen / cb, cols);
    max_of_blocks(acc_.data(), cb, 0, c_full, out_.data());
    for (int c = c_full; c < cols; ++c) {
      const int c0 = c * cb;
      const int c1 = std::min(c0 + cb, shape_.source_cols);
      if (c0 >= some_seen) {
        out_[c] = 0.0f;
        continue;
      }
      float m = acc_[c0];
      for (int j = c0 + 1; j < c1; ++j) m = std::max(m, acc_[j]);
      // Missing cells count as 0, which only matters when every cell that came is negative.
      if (m < 0.0f) m = seen_in_block(c0, c1) < static_cast<long>(block_rows) * (c1 - c0) ? 0.0f : m;
      out_[c] = m;
    }
  } else {
    for (int c = 0; c < cols; ++c) {
      const int c0 = c * cb;
      const int c1 = std::min(c0 + cb, shape_.source_cols);
      double sum = 0.0;
      for (int j = c0; j < c1; ++j) sum += acc_[j];
      out_[c] = static_cast<float>(sum / (static_cast<double>(block_rows) * (c1 - c0)));
    }
  }
  sink_(next_, out_);
  std::fill(acc_.begin(), acc_.end(), max ? -std::numeric_limits<float>::infinity() : 0.0f);
  if (counted_) std::fill(count_.begin(), count_.end(), 0);
  counted_ = false;
  prefix_rows_.clear();
  ++next_;
}

void RowPooler::emit_until(int out_row) {
  while (next_ < out_row && next_ < shape_.rows()) emit_current();
}

void RowPooler::add_row(int r, std::span<const float> values, std::span<const int32_t> cols) {
  if (r < 0 || r >= shape_.source_rows) return;
  const int out_row = r / shape_.row_block;
  if (out_row < next_)
    throw Error("pooling: source row " + std::to_string(r) + " arrived after its output row was emitted");
  emit_until(out_row);
  float* acc = acc_.data();
  if (cols.empty()) {
    const int n = std::min(static_cast<int>(values.size()), shape_.source_cols);
    const float* v = values.data();
    if (shape_.mode == Pooling::Max)
      for (int j = 0; j < n; ++j) acc[j] = std::max(acc[j], v[j]);
    else
      for (int j = 0; j < n; ++j) acc[j] += v[j];
    prefix_rows_.push_back(n);
    return;
  }
  const bool max = shape_.mode == Pooling::Max;
  int32_t* count = count_.data();
  counted_ = true;
  const std::size_t n = values.size();
  for (std::size_t i = 0; i < n; ++i) {
    const int c = cols[i];
    if (c < 0 || c >= shape_.source_cols) continue;
    acc[c] = max ? std::max(acc[c], values[i]) : acc[c] + values[i];
    ++count[c];
  }
}

void RowPooler::finish() { emit_until(shape_.rows()); }

Map2D pool_matrix(const float* values, int rows, int cols, const PoolShape& shape) {
  MapCollector collector(shape);
  RowPooler pooler(shape, collector.sink());
  for (int r = 0; r < rows; ++r)
    pooler.add_row(r, std::span<const float>(values + static_cast<std::size_t>(r) * cols, static_cast<std::size_t>(cols)));
  pooler.finish();
  return collector.take();
}

MapCollector::MapCollector(const PoolShape& shape) : map_(shape.empty_map()) {
  map_.values.assign(static_cast<std::size_t>(map_.rows) * map_.cols, 0.0f);
}

RowPooler::RowSink MapCollector::sink() {
  return [this](int out_row, std::span<const float> v) {
    std::copy(v.begin(), v.end(), map_.values.begin() + static_cast<std::size_t>(out_row) * map_.cols);
  };
}

}  // namespace kvscope::analysis
