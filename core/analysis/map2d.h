#pragma once
// A 2-D map of attention or similarity at full or pooled resolution: what the analysis code computes and
// what traces store and viewers draw.
#include <cstdint>
#include <vector>

namespace kvscope::analysis {

enum class Pooling { Max, Mean };

inline const char* pooling_name(Pooling p) { return p == Pooling::Max ? "max" : "mean"; }

// A 2-D map stored at full or pooled resolution. Cell (r, c) covers source rows
// [r*row_block, (r+1)*row_block) and columns [c*col_block, (c+1)*col_block), clipped to the source size.
struct Map2D {
  int rows = 0, cols = 0;                 // stored shape
  int source_rows = 0, source_cols = 0;   // shape before pooling
  int row_block = 1, col_block = 1;       // 1 = full resolution
  Pooling pooling = Pooling::Max;
  std::vector<float> values;              // [rows][cols], row-major
  // Original token positions of the source rows/columns when they are not simply 0..source_rows-1
  // (a similarity map over a cache that was already compressed). Empty means 0..source_rows-1.
  std::vector<int32_t> source_positions;

  bool empty() const { return values.empty(); }
  bool full_resolution() const { return row_block == 1 && col_block == 1; }
  float at(int r, int c) const { return values[static_cast<std::size_t>(r) * cols + c]; }
  const float* row(int r) const { return values.data() + static_cast<std::size_t>(r) * cols; }
};

}  // namespace kvscope::analysis
