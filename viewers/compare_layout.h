#pragma once
// The Compare panel's grid: how many cells a row, how wide, and how tall every map is, so that each cell's text
// above and below its map and the map itself fit the panel, and no map is shorter than its own axis and colour-bar
// labels are long (ImPlot clips a vertical label at the plot's edge: the difference map of a short cell read "tep"
// and "ference"). Window-free, so a test can lay out the 1280x720 and 1920x1080 panels without drawing.
#include <functional>

namespace kvscope::viewers {

// One cell at a given width: the height its text and widgets take above and below its map (spacing included), and
// the least height its map needs so that every label of it is whole.
struct CompareCellChrome {
  float above = 0.0f, below = 0.0f;
  float least_map = 0.0f;
};

struct CompareGrid {
  int per_row = 1, rows = 1;
  float cell_w = 0.0f;
  float map_h = 0.0f;   // every map's height, its title and axes included
  bool fits = false;    // every cell on screen at once; false: the grid scrolls (a panel too small for its cells)
  float height = 0.0f;  // the rows' total height, their spacing included
};

struct CompareGridSpace {
  float width = 0.0f, height = 0.0f;       // the panel's room for the cells
  float spacing_x = 0.0f, spacing_y = 0.0f;
  float min_cell_w = 0.0f;                 // narrower cells are not offered (text would wrap a word a line)
  float axes_w = 0.0f, axes_h = 0.0f;      // what a map's axes take across and down: the rest is its data
};

// Chooses cells a row to give the maps' data the largest smaller side among the layouts that fit; when none fits,
// the one that overflows least, its maps at their least height. `chrome(i, cell_w)` describes cell i.
CompareGrid compare_grid(int n_cells, const CompareGridSpace& space,
                         const std::function<CompareCellChrome(int, float)>& chrome);

}  // namespace kvscope::viewers
