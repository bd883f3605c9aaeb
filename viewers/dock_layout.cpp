#include "viewers/dock_layout.h"

#include <algorithm>

namespace kvscope::viewers {

DockRatios dock_ratios(float width, float height, float font) {
  DockRatios r;
  if (height < 900.0f) {
    // Tokens keeps about four lines of text, the lower row enough for its plots; the map takes the rest.
    r.tokens = std::clamp(5.5f * font / std::max(height, 1.0f), 0.10f, 0.17f);
    r.lower = 0.30f;
    r.setup = 0.62f;
    r.stacked_right = true;
  }
  if (width < 1500.0f) {
    r.stats = 0.36f;
    r.left = std::clamp(20.0f * font / std::max(width, 1.0f), 0.23f, 0.30f);  // the form's widgets need about 20 em
  }
  return r;
}

float attention_node_height(const DockRatios& r, float height) { return height * (1.0f - r.tokens) * (1.0f - r.lower); }

float attention_node_width(const DockRatios& r, float width) { return width * (1.0f - r.left) * (1.0f - r.stats); }

}  // namespace kvscope::viewers
