#include "viewers/figure_style.h"

#include <iterator>

#include "core/common/error.h"

namespace kvscope::viewers {

FigureLook parse_figure_look(const std::string& name) {
  if (name == "kvscope") return FigureLook::Kvscope;
  if (name == "matplotlib") return FigureLook::Matplotlib;
  throw UsageError("unknown figure style '" + name + "' (valid: kvscope, matplotlib)");
}

Rgba look_series_color(FigureLook look, int index) {
  static const Rgba deep[] = {{76, 114, 176, 255}, {221, 132, 82, 255}, {85, 168, 104, 255}, {196, 78, 82, 255},
                              {129, 114, 179, 255}, {147, 120, 96, 255}, {218, 139, 195, 255}, {140, 140, 140, 255},
                              {204, 185, 116, 255}, {100, 181, 205, 255}};
  static const Rgba tab10[] = {{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255},
                               {148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255},
                               {188, 189, 34, 255}, {23, 190, 207, 255}};
  if (index == kInkSeries) return {25, 25, 25, 255};
  const Rgba* table = look == FigureLook::Matplotlib ? tab10 : deep;
  const int n = static_cast<int>(std::size(deep));
  return table[((index % n) + n) % n];
}

}  // namespace kvscope::viewers
