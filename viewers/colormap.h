#pragma once
// Colour scales for maps: a value range on a linear or log axis, mapped through a perceptual colormap.
// The same tables drive GPU textures, the ImPlot colourbar and headless figure export, so a figure and
// the window always agree on what a colour means.
#include <cstddef>
#include <string>
#include <vector>

#include "viewers/image.h"

namespace kvscope::viewers {

enum class Colormap { Viridis, Magma, Inferno, Greys, RdBu };
inline constexpr Colormap kAllColormaps[] = {Colormap::Viridis, Colormap::Magma, Colormap::Inferno,
                                              Colormap::Greys, Colormap::RdBu};

const char* colormap_name(Colormap cmap);
// The colormap's control points, evenly spaced over [0, 1] (RdBu runs blue -> white -> red).
const std::vector<Rgba>& colormap_stops(Colormap cmap);
// Linear interpolation between the stops; t is clamped to [0, 1].
Rgba sample_colormap(Colormap cmap, float t);

enum class ScaleKind { Linear, Log };

struct ColorScale {
  ScaleKind kind = ScaleKind::Linear;
  float vmin = 0.0f, vmax = 1.0f;  // in data units (not log units), vmin < vmax; for Log, vmin > 0

  // Position of v on the colour axis in [0, 1]. Log: values at or below vmin (zeros included) map to 0,
  // so a masked-out causal triangle reads as "nothing" rather than as an error colour.
  float normalize(float v) const;
  // The colourbar's axis ends in the units it is labelled in (log10 of the data for Log).
  float axis_min() const;
  float axis_max() const;

  // A range that covers the finite values. Log uses the largest value and a floor at max * 10^-decades
  // (or the smallest positive value when that is larger), because attention spans many decades and the
  // near-zero tail would otherwise take the whole colour range.
  static ColorScale fit(const float* values, std::size_t n, ScaleKind kind, float decades = 4.0f);
  // Symmetric around zero, for difference maps.
  static ColorScale symmetric(const float* values, std::size_t n);
};

// values [rows][cols] -> picture of the same size; NaN cells become `nan_color`.
Image colorize(const float* values, int rows, int cols, const ColorScale& scale, Colormap cmap,
               Rgba nan_color = {40, 40, 40, 255});

}  // namespace kvscope::viewers
