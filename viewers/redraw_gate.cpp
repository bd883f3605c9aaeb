#include "viewers/redraw_gate.h"

#include <cstring>

#include "imgui.h"

namespace kvscope::viewers {
namespace {

// 64-bit multiply-xorshift over 8-byte words: a frame's buffers are a few hundred KB, so a byte-wise hash
// would cost a noticeable part of the frame it is meant to save.
class Digest {
 public:
  void add(const void* data, std::size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    std::size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
      uint64_t word;
      std::memcpy(&word, p + i, 8);
      mix(word);
    }
    uint64_t tail = 0;
    std::memcpy(&tail, p + i, bytes - i);
    mix(tail ^ (static_cast<uint64_t>(bytes) << 56));
  }
  template <typename T>
  void add_value(const T& value) {
    add(&value, sizeof(value));
  }
  uint64_t value() const { return h_; }

 private:
  void mix(uint64_t word) {
    h_ ^= word + 0x9e3779b97f4a7c15ull + (h_ << 6) + (h_ >> 2);
    h_ *= 0xff51afd7ed558ccdull;
    h_ ^= h_ >> 33;
  }
  uint64_t h_ = 0xcbf29ce484222325ull;
};

}  // namespace

uint64_t draw_data_digest(const ImDrawData& draw_data, uint64_t textures_generation) {
  Digest d;
  d.add_value(textures_generation);
  d.add_value(draw_data.DisplayPos);
  d.add_value(draw_data.DisplaySize);
  d.add_value(draw_data.FramebufferScale);
  d.add_value(draw_data.CmdLists.Size);
  for (const ImDrawList* list : draw_data.CmdLists) {
    d.add_value(list->VtxBuffer.Size);
    d.add(list->VtxBuffer.Data, static_cast<std::size_t>(list->VtxBuffer.Size) * sizeof(ImDrawVert));
    d.add_value(list->IdxBuffer.Size);
    d.add(list->IdxBuffer.Data, static_cast<std::size_t>(list->IdxBuffer.Size) * sizeof(ImDrawIdx));
    d.add_value(list->CmdBuffer.Size);
    for (const ImDrawCmd& cmd : list->CmdBuffer) {
      d.add_value(cmd.ClipRect);
      d.add_value(cmd.TexRef._TexData);  // the id itself: GetTexID() asserts on a texture not created yet
      d.add_value(cmd.TexRef._TexID);
      d.add_value(cmd.VtxOffset);
      d.add_value(cmd.IdxOffset);
      d.add_value(cmd.ElemCount);
      d.add_value(cmd.UserCallback);
      d.add_value(cmd.UserCallbackData);
    }
  }
  return d.value();
}

bool textures_pending(const ImDrawData& draw_data) {
  if (!draw_data.Textures) return false;
  for (const ImTextureData* tex : *draw_data.Textures)
    if (tex->Status != ImTextureStatus_OK && tex->Status != ImTextureStatus_Destroyed) return true;
  return false;
}

bool RedrawGate::should_draw(const ImDrawData& draw_data, uint64_t textures_generation, bool input, bool forced,
                             double now_ms, double build_ms) {
  const uint64_t digest = draw_data_digest(draw_data, textures_generation);
  const bool changed = !have_last_ || digest != last_;
  const bool pending = textures_pending(draw_data);
  const bool heavy = build_ms > kHeavyBuildMs && !deferred_heavy_ && !input;
  const bool due = input || (now_ms - last_drawn_ms_ >= kBackgroundIntervalMs && !heavy);
  // Pending texture requests keep until a frame is drawn (as while a window is minimised).
  const bool draw = forced || (pending && !heavy) || (changed && due);
  deferred_heavy_ = !draw && (changed || pending) && heavy;
  if (draw) {
    last_ = digest;
    have_last_ = true;
    last_drawn_ms_ = now_ms;
    ++drawn_;
  } else {
    ++skipped_;
  }
  return draw;
}

}  // namespace kvscope::viewers
