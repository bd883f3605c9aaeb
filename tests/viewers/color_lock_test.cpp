// The colour-range lock: the first map after the lock gives the range, later maps of the same scale kind take
// it (with a texture signature of their own), maps of the other kind and unlocked states are left alone.
#include <catch2/catch.hpp>

#include "viewers/panel.h"

using namespace kvscope::viewers;

namespace {
HeatmapPlot plot_with(ScaleKind kind, float vmin, float vmax, const char* signature) {
  HeatmapPlot p;
  p.scale.kind = kind;
  p.scale.vmin = vmin;
  p.scale.vmax = vmax;
  p.signature = signature;
  return p;
}
}  // namespace

TEST_CASE("a locked colour range is taken from the map on screen and given to the others") {
  AppState state;
  HeatmapPlot layer0 = plot_with(ScaleKind::Log, 1e-4f, 0.5f, "layer0");
  HeatmapPlot layer14 = plot_with(ScaleKind::Log, 1e-5f, 0.9f, "layer14");

  // Unlocked: nothing changes, nothing is taken.
  capture_color_lock(state, layer0);
  apply_color_lock(state, layer14);
  CHECK_FALSE(state.locked_scale);
  CHECK(layer14.scale.vmax == 0.9f);
  CHECK(color_lock_signature(state).empty());

  state.lock_color_range = true;
  CHECK(color_lock_signature(state) == "|lock pending");
  apply_color_lock(state, layer14);  // no range held yet: unchanged
  CHECK(layer14.scale.vmin == 1e-5f);
  capture_color_lock(state, layer0);
  REQUIRE(state.locked_scale);
  const std::string locked_signature = color_lock_signature(state);
  capture_color_lock(state, layer14);  // a held range is not replaced by later maps
  CHECK(state.locked_scale->vmax == 0.5f);
  CHECK(color_lock_signature(state) == locked_signature);

  apply_color_lock(state, layer14);
  CHECK(layer14.scale.vmin == 1e-4f);
  CHECK(layer14.scale.vmax == 0.5f);
  CHECK(layer14.signature != "layer14");  // its texture is not the unlocked one

  HeatmapPlot linear = plot_with(ScaleKind::Linear, 0.0f, 0.3f, "linear");
  apply_color_lock(state, linear);  // another kind: the log range means nothing for it
  CHECK(linear.scale.vmax == 0.3f);
  capture_color_lock(state, linear);  // switching the kind takes a new range of that kind
  CHECK(state.locked_scale->kind == ScaleKind::Linear);
  CHECK(state.locked_scale->vmax == 0.3f);
}
