#include "viewers/compare_layout.h"

#include <algorithm>
#include <limits>

namespace kvscope::viewers {

CompareGrid compare_grid(int n_cells, const CompareGridSpace& space,
                         const std::function<CompareCellChrome(int, float)>& chrome) {
  CompareGrid best;
  if (n_cells <= 0) return best;
  double best_score = -std::numeric_limits<double>::infinity();
  for (int per_row = 1; per_row <= n_cells; ++per_row) {
    const float cell_w = (space.width - space.spacing_x * (per_row - 1)) / per_row;
    if (per_row > 1 && cell_w < space.min_cell_w) break;
    const int rows = (n_cells + per_row - 1) / per_row;
    float chrome_total = 0.0f, least = 0.0f;
    for (int r = 0; r < rows; ++r) {
      float row_chrome = 0.0f;
      for (int i = r * per_row; i < std::min(n_cells, (r + 1) * per_row); ++i) {
        const CompareCellChrome c = chrome(i, cell_w);
        row_chrome = std::max(row_chrome, c.above + c.below);
        least = std::max(least, c.least_map);
      }
      chrome_total += row_chrome;
    }
    const float spacing = space.spacing_y * (rows - 1);
    const float share = (space.height - chrome_total - spacing) / rows;
    const bool fits = share >= least;
    const float map_h = std::max(share, least);
    // Fitting layouts first, by their maps' data's smaller side; then the least overflow.
    const double score = fits ? std::min(cell_w - space.axes_w, map_h - space.axes_h)
                              : -1e6 - (least - share) * rows;
    if (score > best_score) {
      best_score = score;
      best = {per_row, rows, cell_w, map_h, fits, chrome_total + spacing + map_h * rows};
    }
  }
  return best;
}

}  // namespace kvscope::viewers
