#pragma once
// The default layout's proportions for a window size. At 1600x1000 the panels split as they always did; on a smaller
// screen (1280x720) the Tokens strip and the lower row (Eviction timeline, Budgets) give height to the attention map,
// which had shrunk to an 80-pixel strip under its toolbar, and Layer stats and Budgets share a column beside it
// (issue 38).
namespace kvscope::viewers {

struct DockRatios {
  float left = 0.23f;    // the Set-up / Summary column's share of the width
  float setup = 0.66f;   // Set-up's share of that column (Summary and Log below)
  float tokens = 0.17f;  // the Tokens strip's share of the height right of that column
  float lower = 0.40f;   // the lower row's share of what remains (Eviction timeline, Budgets)
  float stats = 0.42f;   // Layer stats' share of the upper row (the attention map has the rest)
  float budget = 0.42f;  // Budgets' share of the lower row
  // A short window: Layer stats above Budgets in a column of their own right of the map (each gets half the height
  // instead of a crushed share of a row), and the lower row is the Eviction timeline alone, under the map.
  bool stacked_right = false;
};

// `width`, `height`: the dock space in pixels; `font`: the UI font size.
DockRatios dock_ratios(float width, float height, float font);

// The attention panel's node in pixels under `r` (the main map's room).
float attention_node_height(const DockRatios& r, float height);
float attention_node_width(const DockRatios& r, float width);

}  // namespace kvscope::viewers
