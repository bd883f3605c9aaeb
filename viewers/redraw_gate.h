#pragma once
// Whether a frame needs drawing. Under software OpenGL (llvmpipe: Xvfb, remote desktops, machines without a
// GPU) drawing a 1600x1000 frame costs 35-45 ms of CPU, and most frames while a run is in progress are
// identical to the one on screen: snapshots arrive a few times a second. Redrawing them at 60 Hz took that
// CPU from the model the window is showing. The gate lets a frame through only when what OpenGL would draw
// differs from the last frame drawn; input is still handled and the UI built every frame.
#include <cstdint>

struct ImDrawData;

namespace kvscope::viewers {

// A digest of everything the renderer draws: the display rectangle and scale, each list's vertices and
// indices, and each command's clip rectangle, texture, index range and callback. `textures_generation`
// stands for the contents of textures the app made itself: a rebuilt texture may get a recycled id.
uint64_t draw_data_digest(const ImDrawData& draw_data, uint64_t textures_generation);

// Whether Dear ImGui asks the renderer to create, update or destroy one of its own textures (the font atlas
// grows as new glyphs appear); the renderer does that while drawing, so such a frame must be drawn.
bool textures_pending(const ImDrawData& draw_data);

class RedrawGate {
 public:
  // A frame that changed without input (the worker's progress and snapshots) is drawn at most this often;
  // a frame that answers input is drawn at once.
  static constexpr double kBackgroundIntervalMs = 100.0;
  // A frame that took longer than this to build (a snapshot arrived: panels recoloured their maps) does not
  // also draw a background change: the next frame, built from the panels' caches in a few ms, draws it. One
  // frame paying for both stalled the window for 45-65 ms while a run was in progress (below 20 fps).
  static constexpr double kHeavyBuildMs = 8.0;

  // True when this frame must be drawn: it differs from the last one drawn and either answers `input`
  // or the last frame drawn is kBackgroundIntervalMs old and this frame was built in under kHeavyBuildMs
  // (or the frame before was deferred for its build time already); a deferred change is drawn by a later
  // frame. Also when textures are pending (after a heavy frame's deferral too), or `forced` (a screenshot,
  // an exposed window).
  // `now_ms`: any steady clock; `build_ms`: how long building this frame took.
  bool should_draw(const ImDrawData& draw_data, uint64_t textures_generation, bool input, bool forced,
                   double now_ms, double build_ms = 0.0);
  uint64_t drawn() const { return drawn_; }
  uint64_t skipped() const { return skipped_; }

 private:
  bool have_last_ = false;
  uint64_t last_ = 0;
  double last_drawn_ms_ = 0.0;
  bool deferred_heavy_ = false;  // the last frame's change waited because that frame was heavy to build
  uint64_t drawn_ = 0, skipped_ = 0;
};

}  // namespace kvscope::viewers
