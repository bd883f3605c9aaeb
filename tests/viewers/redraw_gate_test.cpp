// The window skips drawing a frame whose draw data equals the frame on screen. These tests build real
// frames with an offscreen Dear ImGui context and check the property the gate relies on: equal digests
// rasterise to equal pixels, and any change a user could see changes the digest. Then the gate's
// decisions: input is answered at once, background changes at most every kBackgroundIntervalMs.
#include <catch2/catch.hpp>

#include <imgui.h>

#include <string>

#include "viewers/redraw_gate.h"
#include "viewers/soft_render.h"

using namespace kvscope::viewers;

namespace {

struct Content {
  std::string text = "prefill 120/948";
  float progress = 0.25f;
  ImVec4 color = ImVec4(0.2f, 0.6f, 0.9f, 1.0f);
  float slider = 10.0f;
};

class OffscreenFrames {
 public:
  OffscreenFrames() {
    previous_ = ImGui::GetCurrentContext();
    context_ = ImGui::CreateContext();
    ImGui::SetCurrentContext(context_);
    ImGuiIO& io = ImGui::GetIO();
    io.IniFilename = nullptr;
    io.DisplaySize = ImVec2(320, 200);
    io.DeltaTime = 1.0f / 60.0f;
    io.BackendFlags |= ImGuiBackendFlags_RendererHasTextures | ImGuiBackendFlags_RendererHasVtxOffset;
  }
  ~OffscreenFrames() {
    ImGui::DestroyContext(context_);
    ImGui::SetCurrentContext(previous_);
  }

  // Builds one frame; leaves texture requests (the font atlas) unanswered so a test can see them.
  ImDrawData& build(const Content& c) {
    ImGui::NewFrame();
    ImGui::SetNextWindowPos(ImVec2(0, 0));
    ImGui::SetNextWindowSize(ImVec2(320, 200));
    ImGui::Begin("panel", nullptr, ImGuiWindowFlags_NoDecoration);
    ImGui::TextUnformatted(c.text.c_str());
    ImGui::ProgressBar(c.progress, ImVec2(200, 0));
    ImGui::ColorButton("colour", c.color);
    float slider = c.slider;
    ImGui::SliderFloat("budget", &slider, 0.0f, 100.0f);
    ImGui::End();
    ImGui::Render();
    return *ImGui::GetDrawData();
  }

  // Builds the frame twice (the first settles layout and the font atlas) and returns its digest and pixels.
  std::pair<uint64_t, Image> settled(const Content& c) {
    acknowledge_texture_requests(build(c));
    ImDrawData& dd = build(c);
    acknowledge_texture_requests(dd);
    Image pixels(320, 200, Rgba{0, 0, 0, 255});
    rasterize(dd, textures_, pixels);
    return {draw_data_digest(dd, 0), pixels};
  }

 private:
  ImGuiContext* previous_ = nullptr;
  ImGuiContext* context_ = nullptr;
  SoftTextureStore textures_;
};

}  // namespace

TEST_CASE("equal draw data digests stand for equal pixels, and visible changes change the digest", "[redraw]") {
  OffscreenFrames frames;
  const Content base;
  const auto [digest, pixels] = frames.settled(base);
  const auto [again, again_pixels] = frames.settled(base);
  CHECK(again == digest);
  CHECK(again_pixels.rgba == pixels.rgba);

  Content text = base, progress = base, color = base, slider = base;
  text.text = "prefill 121/948";
  progress.progress = 0.26f;
  color.color.x = 0.25f;
  slider.slider = 11.0f;
  for (const Content* changed : {&text, &progress, &color, &slider}) {
    const auto [d, p] = frames.settled(*changed);
    CHECK(p.rgba != pixels.rgba);  // the change is visible ...
    CHECK(d != digest);            // ... so the gate must see it
  }
}

TEST_CASE("a rebuilt texture changes the digest even when its id is recycled", "[redraw]") {
  OffscreenFrames frames;
  acknowledge_texture_requests(frames.build({}));
  const ImDrawData& dd = frames.build({});
  CHECK(draw_data_digest(dd, 1) != draw_data_digest(dd, 2));
  CHECK(draw_data_digest(dd, 2) == draw_data_digest(dd, 2));
}

TEST_CASE("texture requests force a frame to be drawn", "[redraw]") {
  OffscreenFrames frames;
  ImDrawData& first = frames.build({});
  CHECK(textures_pending(first));  // the font atlas asks to be created
  RedrawGate gate;
  CHECK(gate.should_draw(first, 0, false, false, 0.0));
  CHECK(gate.should_draw(first, 0, false, false, 1.0));  // still pending: the renderer has not answered
  acknowledge_texture_requests(first);
  CHECK_FALSE(textures_pending(first));
  CHECK_FALSE(gate.should_draw(first, 0, false, false, 2.0));
}

namespace {
// Two frames' contents that differ in one text, both texts' glyphs baked: a new glyph is a texture update,
// which the gate treats apart.
struct TwoContents {
  Content a, b;
  explicit TwoContents(OffscreenFrames& frames) {
    b.text = "decode 3/32";
    acknowledge_texture_requests(frames.build(a));
    acknowledge_texture_requests(frames.build(b));
  }
};
}  // namespace

TEST_CASE("the gate draws changes at once on input and at most every interval otherwise", "[redraw]") {
  OffscreenFrames frames;
  const auto [a, b] = TwoContents(frames);
  RedrawGate gate;
  const double step = RedrawGate::kBackgroundIntervalMs / 4;
  double t = 1000.0;
  CHECK(gate.should_draw(frames.build(a), 0, false, false, t));         // the first frame
  CHECK_FALSE(gate.should_draw(frames.build(a), 0, false, false, t += step));  // unchanged
  CHECK_FALSE(gate.should_draw(frames.build(a), 0, true, false, t += step));   // input, but nothing changed
  // A background change soon after a drawn frame waits ...
  CHECK_FALSE(gate.should_draw(frames.build(b), 0, false, false, t += step));
  // ... and is drawn once the interval has passed since the last frame drawn.
  t = 1000.0 + RedrawGate::kBackgroundIntervalMs;
  CHECK(gate.should_draw(frames.build(b), 0, false, false, t));
  // A change that answers input is drawn at once.
  CHECK(gate.should_draw(frames.build(a), 0, true, false, t += 1.0));
  // Forced frames (a screenshot, an exposed window) are drawn even when nothing changed.
  CHECK(gate.should_draw(frames.build(a), 0, false, true, t += 1.0));
  CHECK(gate.drawn() == 4);
  CHECK(gate.skipped() == 3);
}

TEST_CASE("a background change whose frame was heavy to build is drawn by the next frame", "[redraw]") {
  OffscreenFrames frames;
  const auto [a, b] = TwoContents(frames);
  RedrawGate gate;
  const double heavy = RedrawGate::kHeavyBuildMs + 1.0, light = 1.0;
  double t = 1000.0;
  CHECK(gate.should_draw(frames.build(a), 0, false, false, t, light));
  // A snapshot arrived: the frame that recoloured the maps does not draw as well ...
  t += RedrawGate::kBackgroundIntervalMs;
  CHECK_FALSE(gate.should_draw(frames.build(b), 0, false, false, t, heavy));
  // ... the next frame draws it, even if it too was slow to build (a change is never held back twice).
  CHECK(gate.should_draw(frames.build(b), 0, false, false, t += 1.0, heavy));
  // Input is answered at once however long the frame took to build.
  CHECK(gate.should_draw(frames.build(a), 0, true, false, t += 1.0, heavy));
  // An unchanged heavy frame is neither drawn nor leaves a deferral behind.
  t += RedrawGate::kBackgroundIntervalMs;
  CHECK_FALSE(gate.should_draw(frames.build(a), 0, false, false, t, heavy));
  CHECK_FALSE(gate.should_draw(frames.build(b), 0, false, false, t += 1.0, heavy));
  CHECK(gate.should_draw(frames.build(b), 0, false, false, t += 1.0, light));
  // New glyphs ask for a texture update; a heavy frame leaves it to the next one, which must draw.
  Content c = a;
  c.text = "zebra quartz";
  ImDrawData& glyphs = frames.build(c);
  REQUIRE(textures_pending(glyphs));
  CHECK_FALSE(gate.should_draw(glyphs, 0, false, false, t += RedrawGate::kBackgroundIntervalMs, heavy));
  CHECK(gate.should_draw(glyphs, 0, false, false, t += 1.0, heavy));
}
