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

void RowPooler::emit_current() {
  const int cols = shape_.cols();
  const int r0 = next_ * shape_.row_block;
  const int block_rows = std::min(shape_.row_block, shape_.source_rows - r0);
  const bool max = shape_.mode == Pooling::Max;
  for (int c = 0; c < cols; ++c) {
    const int c0 = c * shape_.col_block;
    const int c1 = std::min(c0 + shape_.col_block, shape_.source_cols);
    const long cells = static_cast<long>(block_rows) * (c1 - c0);
    long seen = 0;
    if (max) {
      float m = -std::numeric_limits<float>::infinity();
      for (int j = c0; j < c1; ++j) {
        m = std::max(m, acc_[j]);
        seen += count_[j];
      }
      out_[c] = seen < cells ? std::max(m, 0.0f) : m;
    } else {
      double sum = 0.0;
      for (int j = c0; j < c1; ++j) sum += acc_[j];
      out_[c] = cells > 0 ? static_cast<float>(sum / static_cast<double>(cells)) : 0.0f;
    }
  }
  sink_(next_, out_);
  std::fill(acc_.begin(), acc_.end(), max ? -std::numeric_limits<float>::infinity() : 0.0f);
  std::fill(count_.begin(), count_.end(), 0);
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
  int32_t* count = count_.data();
  if (cols.empty()) {
    const int n = std::min(static_cast<int>(values.size()), shape_.source_cols);
    const float* v = values.data();
    if (shape_.mode == Pooling::Max)
      for (int j = 0; j < n; ++j) acc[j] = std::max(acc[j], v[j]);
    else
      for (int j = 0; j < n; ++j) acc[j] += v[j];
    for (int j = 0; j < n; ++j) ++count[j];
    return;
  }
  const bool max = shape_.mode == Pooling::Max;
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
