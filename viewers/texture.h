#pragma once
// Pictures that ImGui can draw (heatmaps, timelines), cached by a content signature so a map is
// colourised and uploaded once, not every frame. Two stores: OpenGL textures for the window, and CPU
// images that the software rasteriser samples when a figure is rendered without a display.
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include <imgui.h>

#include "viewers/image.h"

namespace kvscope::viewers {

class TextureStore {
 public:
  virtual ~TextureStore() = default;
  // The texture held for `slot`; make() runs only when `signature` differs from the one it was built
  // with, so callers can ask every frame. The id stays valid until the slot is rebuilt or the store dies.
  ImTextureID get(const std::string& slot, const std::string& signature, const std::function<Image()>& make);
  void clear();
  // Changes whenever a texture is made or dropped: texture ids are recycled, so the window's redraw gate
  // cannot tell new pixels from an id alone.
  uint64_t generation() const { return generation_; }

 protected:
  virtual ImTextureID create(const Image& image) = 0;
  virtual void destroy(ImTextureID id) = 0;

 private:
  struct Entry {
    std::string signature;
    ImTextureID id = ImTextureID_Invalid;
  };
  std::map<std::string, Entry> entries_;
  uint64_t generation_ = 0;
};

// Needs a current OpenGL context for its whole life; nearest-neighbour sampling so map cells stay sharp.
class GlTextureStore final : public TextureStore {
 public:
  ~GlTextureStore() override;

 protected:
  ImTextureID create(const Image& image) override;
  void destroy(ImTextureID id) override;
};

class SoftTextureStore final : public TextureStore {
 public:
  ~SoftTextureStore() override;
  // The image behind an id this store handed out, or nullptr.
  const Image* find(ImTextureID id) const;

 protected:
  ImTextureID create(const Image& image) override;
  void destroy(ImTextureID id) override;

 private:
  std::map<ImTextureID, Image> images_;
  ImTextureID next_ = 1;
};

}  // namespace kvscope::viewers
