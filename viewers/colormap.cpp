#include "viewers/colormap.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvscope::viewers {

namespace {

Rgba hex(unsigned v) { return {uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v), 255}; }

std::vector<Rgba> from_hex(std::initializer_list<unsigned> values) {
  std::vector<Rgba> out;
  for (unsigned v : values) out.push_back(hex(v));
  return out;
}

}  // namespace

const char* colormap_name(Colormap cmap) {
  switch (cmap) {
    case Colormap::Viridis: return "viridis";
    case Colormap::Magma: return "magma";
    case Colormap::Inferno: return "inferno";
    case Colormap::Greys: return "greys";
    case Colormap::RdBu: return "rdbu";
  }
  return "viridis";
}

const std::vector<Rgba>& colormap_stops(Colormap cmap) {
  // matplotlib's viridis/magma/inferno sampled at 11 even points, ColorBrewer RdBu (reversed so that
  // negative differences are blue); enough stops that linear interpolation stays within a few levels.
  static const std::vector<Rgba> viridis = from_hex({0x440154, 0x482475, 0x414487, 0x355f8d, 0x2a788e, 0x21918c,
                                                     0x22a884, 0x44bf70, 0x7ad151, 0xbddf26, 0xfde725});
  static const std::vector<Rgba> magma = from_hex({0x000004, 0x140e36, 0x3b0f70, 0x641a80, 0x8c2981, 0xb73779,
                                                   0xde4968, 0xf7705c, 0xfe9f6d, 0xfecf92, 0xfcfdbf});
  static const std::vector<Rgba> inferno = from_hex({0x000004, 0x160b39, 0x420a68, 0x6a176e, 0x932667, 0xbc3754,
                                                     0xdd513a, 0xf37819, 0xfca50a, 0xf6d746, 0xfcffa4});
  static const std::vector<Rgba> greys = from_hex({0xffffff, 0x000000});
  static const std::vector<Rgba> rdbu = from_hex({0x053061, 0x2166ac, 0x4393c3, 0x92c5de, 0xd1e5f0, 0xf7f7f7,
                                                  0xfddbc7, 0xf4a582, 0xd6604d, 0xb2182b, 0x67001f});
  switch (cmap) {
    case Colormap::Viridis: return viridis;
    case Colormap::Magma: return magma;
    case Colormap::Inferno: return inferno;
    case Colormap::Greys: return greys;
    case Colormap::RdBu: return rdbu;
  }
  return viridis;
}

Rgba sample_colormap(Colormap cmap, float t) {
  const auto& stops = colormap_stops(cmap);
  if (!(t > 0.0f)) return stops.front();  // also catches NaN
  if (t >= 1.0f) return stops.back();
  const float x = t * static_cast<float>(stops.size() - 1);
  const int i = static_cast<int>(x);
  const float f = x - static_cast<float>(i);
  const Rgba a = stops[i], b = stops[i + 1];
  auto mix = [f](uint8_t u, uint8_t v) { return static_cast<uint8_t>(std::lround(u + (v - u) * f)); };
  return {mix(a.r, b.r), mix(a.g, b.g), mix(a.b, b.b), 255};
}

float ColorScale::normalize(float v) const {
  if (std::isnan(v)) return std::numeric_limits<float>::quiet_NaN();
  if (kind == ScaleKind::Log) {
    if (v <= vmin) return 0.0f;
    const float lo = std::log10(vmin), hi = std::log10(vmax);
    return hi > lo ? std::clamp((std::log10(v) - lo) / (hi - lo), 0.0f, 1.0f) : 1.0f;
  }
  return vmax > vmin ? std::clamp((v - vmin) / (vmax - vmin), 0.0f, 1.0f) : 0.5f;
}

float ColorScale::axis_min() const { return kind == ScaleKind::Log ? std::log10(vmin) : vmin; }
float ColorScale::axis_max() const { return kind == ScaleKind::Log ? std::log10(vmax) : vmax; }

ColorScale ColorScale::fit(const float* values, std::size_t n, ScaleKind kind, float decades) {
  float lo = std::numeric_limits<float>::infinity(), hi = -lo, min_positive = lo;
  for (std::size_t i = 0; i < n; ++i) {
    const float v = values[i];
    if (!std::isfinite(v)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    if (v > 0.0f) min_positive = std::min(min_positive, v);
  }
  ColorScale s;
  s.kind = kind;
  if (kind == ScaleKind::Log) {
    if (!std::isfinite(min_positive)) return {ScaleKind::Log, 1e-6f, 1.0f};
    s.vmax = hi;
    s.vmin = std::max(min_positive, hi * std::pow(10.0f, -decades));
    if (!(s.vmin < s.vmax)) s.vmin = s.vmax / 10.0f;
    return s;
  }
  if (!std::isfinite(lo)) return {ScaleKind::Linear, 0.0f, 1.0f};
  s.vmin = lo;
  s.vmax = hi > lo ? hi : lo + 1.0f;
  return s;
}

ColorScale ColorScale::symmetric(const float* values, std::size_t n) {
  float m = 0.0f;
  for (std::size_t i = 0; i < n; ++i)
    if (std::isfinite(values[i])) m = std::max(m, std::fabs(values[i]));
  if (m == 0.0f) m = 1.0f;
  return {ScaleKind::Linear, -m, m};
}

Image colorize(const float* values, int rows, int cols, const ColorScale& scale, Colormap cmap, Rgba nan_color) {
  Image img(cols, rows);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const float v = values[static_cast<std::size_t>(r) * cols + c];
      img.set(c, r, std::isnan(v) ? nan_color : sample_colormap(cmap, scale.normalize(v)));
    }
  return img;
}

}  // namespace kvscope::viewers
