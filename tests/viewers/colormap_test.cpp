// Colour scaling checked against closed forms: linear (v - lo) / (hi - lo), log10 on [vmin, vmax].
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "viewers/colormap.h"

using namespace kvscope::viewers;

TEST_CASE("linear scale normalises by the closed form and clamps", "[colormap]") {
  const ColorScale s{ScaleKind::Linear, -2.0f, 6.0f};
  for (float v : {-2.0f, 0.0f, 1.5f, 6.0f}) CHECK(s.normalize(v) == Approx((v + 2.0f) / 8.0f));
  CHECK(s.normalize(-10.0f) == 0.0f);
  CHECK(s.normalize(10.0f) == 1.0f);
  CHECK(std::isnan(s.normalize(std::numeric_limits<float>::quiet_NaN())));
  CHECK(s.axis_min() == -2.0f);
  CHECK(s.axis_max() == 6.0f);
}

TEST_CASE("log scale is linear in log10 and sends zeros to the bottom", "[colormap]") {
  const ColorScale s{ScaleKind::Log, 1e-4f, 1.0f};
  CHECK(s.normalize(1e-4f) == 0.0f);
  CHECK(s.normalize(1e-2f) == Approx(0.5f));
  CHECK(s.normalize(1e-3f) == Approx(0.25f));
  CHECK(s.normalize(1.0f) == Approx(1.0f));
  CHECK(s.normalize(0.0f) == 0.0f);  // a masked causal cell
  CHECK(s.axis_min() == Approx(-4.0f));
  CHECK(s.axis_max() == Approx(0.0f));
}

TEST_CASE("fit covers the finite values; log floors at max * 10^-decades", "[colormap]") {
  const std::vector<float> v = {0.0f, 1e-9f, 0.002f, 0.5f, std::numeric_limits<float>::quiet_NaN(),
                                std::numeric_limits<float>::infinity()};
  const ColorScale lin = ColorScale::fit(v.data(), v.size(), ScaleKind::Linear);
  CHECK(lin.vmin == 0.0f);
  CHECK(lin.vmax == 0.5f);
  const ColorScale lg = ColorScale::fit(v.data(), v.size(), ScaleKind::Log, 3.0f);
  CHECK(lg.vmax == 0.5f);
  CHECK(lg.vmin == Approx(0.5e-3f));  // the floor, above the 1e-9 outlier
  const std::vector<float> narrow = {0.1f, 0.2f};
  CHECK(ColorScale::fit(narrow.data(), narrow.size(), ScaleKind::Log, 4.0f).vmin == Approx(0.1f));  // smallest positive wins
  const std::vector<float> zeros = {0.0f, 0.0f};
  const ColorScale z = ColorScale::fit(zeros.data(), zeros.size(), ScaleKind::Log);
  CHECK(z.vmin > 0.0f);
  CHECK(z.vmin < z.vmax);
  const std::vector<float> d = {-0.3f, 0.1f, 0.2f};
  const ColorScale sym = ColorScale::symmetric(d.data(), d.size());
  CHECK(sym.vmin == Approx(-0.3f));
  CHECK(sym.vmax == Approx(0.3f));
  CHECK(sym.normalize(0.0f) == Approx(0.5f));
}

TEST_CASE("colormap samples hit the stops and interpolate between them", "[colormap]") {
  for (Colormap c : kAllColormaps) {
    const auto& stops = colormap_stops(c);
    CHECK(sample_colormap(c, 0.0f) == stops.front());
    CHECK(sample_colormap(c, 1.0f) == stops.back());
    CHECK(sample_colormap(c, -1.0f) == stops.front());
    CHECK(sample_colormap(c, std::numeric_limits<float>::quiet_NaN()) == stops.front());
    const int n = static_cast<int>(stops.size());
    for (int i = 0; i < n; ++i) {
      const Rgba got = sample_colormap(c, static_cast<float>(i) / (n - 1));
      CHECK(std::abs(got.r - stops[i].r) <= 1);
      CHECK(std::abs(got.g - stops[i].g) <= 1);
      CHECK(std::abs(got.b - stops[i].b) <= 1);
    }
  }
  // Halfway between the two greys stops (white, black) is mid grey.
  const Rgba mid = sample_colormap(Colormap::Greys, 0.5f);
  CHECK(mid.r == 128);
  CHECK(mid.g == 128);
}

TEST_CASE("colorize maps every cell and paints NaN with the NaN colour", "[colormap]") {
  const std::vector<float> v = {0.0f, 1.0f, std::numeric_limits<float>::quiet_NaN(), 0.5f};
  const Image img = colorize(v.data(), 2, 2, {ScaleKind::Linear, 0.0f, 1.0f}, Colormap::Greys, {1, 2, 3, 255});
  REQUIRE(img.width == 2);
  REQUIRE(img.height == 2);
  CHECK(img.at(0, 0) == (Rgba{255, 255, 255, 255}));
  CHECK(img.at(1, 0) == (Rgba{0, 0, 0, 255}));
  CHECK(img.at(0, 1) == (Rgba{1, 2, 3, 255}));
  CHECK(img.distinct_colors() == 4);
}
