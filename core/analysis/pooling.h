#pragma once
// 2-D block pooling of maps that arrive one source row at a time, so a 2048 x 2048 attention map is never
// held whole: only the output row being filled (plus a per-cell count) lives in memory.
//
// Semantics: output cell (R, C) pools the source cells [R*row_block, (R+1)*row_block) x
// [C*col_block, (C+1)*col_block), clipped to the source. Source cells that are never given count as 0
// (causally masked keys, evicted positions, skipped rows). Max pooling takes the largest value of the
// block; mean pooling divides the block's sum by its clipped cell count.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/analysis/map2d.h"

namespace kvscope::analysis {

// Smallest block edge so that n source cells fit in at most max_cells output cells (max_cells <= 0: 1).
int block_for(int n, int max_cells);

struct PoolShape {
  int source_rows = 0, source_cols = 0;
  int row_block = 1, col_block = 1;
  Pooling mode = Pooling::Max;

  int rows() const { return (source_rows + row_block - 1) / row_block; }
  int cols() const { return (source_cols + col_block - 1) / col_block; }
  // Blocks chosen so the output is at most max_rows x max_cols (0: full resolution along that axis).
  static PoolShape fit(int source_rows, int source_cols, int max_rows, int max_cols, Pooling mode);
  Map2D empty_map() const;  // a Map2D with this shape's metadata and no values
};

class RowPooler {
 public:
  // Called once per output row, in order, with shape.cols() values.
  using RowSink = std::function<void(int out_row, std::span<const float> values)>;

  RowPooler(const PoolShape& shape, RowSink sink);

  // Source row r (rows must come in non-decreasing order; a row may come in several parts). values[i]
  // belongs to source column cols[i], or to column i when cols is empty. Columns out of range are ignored.
  void add_row(int r, std::span<const float> values, std::span<const int32_t> cols = {});
  // Emits every output row not yet emitted (rows never touched pool to 0). Idempotent.
  void finish();

  const PoolShape& shape() const { return shape_; }

 private:
  void emit_until(int out_row);  // emits rows [next_, out_row)
  void emit_current();

  PoolShape shape_;
  RowSink sink_;
  int next_ = 0;                 // next output row to emit
  // Cells of output cell c's block that arrived (needed only when a max is negative: then a missing
  // cell, which counts as 0, wins).
  long seen_in_block(int c0, int c1) const;

  // Per source column, over the rows of output row next_: running max (or sum). Kept at source width so
  // adding a row is one vectorised pass; the column blocks are reduced when the row is emitted.
  std::vector<float> acc_;
  // Cells seen, counted only for rows given with column positions; rows given as a prefix 0..n-1 just
  // record n, which is all the count needs.
  std::vector<int32_t> count_;
  std::vector<int> prefix_rows_;
  bool counted_ = false;
  std::vector<float> out_;
};

// Pools a whole row-major matrix (for small maps and tests).
Map2D pool_matrix(const float* values, int rows, int cols, const PoolShape& shape);

// Collects a RowPooler's rows into a Map2D.
class MapCollector {
 public:
  explicit MapCollector(const PoolShape& shape);
  RowPooler::RowSink sink();
  Map2D take() { return std::move(map_); }

 private:
  Map2D map_;
};

}  // namespace kvscope::analysis
