#pragma once
// An 8-bit RGBA picture in memory: what colormaps produce, textures upload and figures write to PNG.
#include <cstdint>
#include <string>
#include <vector>

#include "core/common/atomic_file.h"

namespace kvscope::viewers {

struct Rgba {
  uint8_t r = 0, g = 0, b = 0, a = 255;
  bool operator==(const Rgba&) const = default;
};

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgba;  // [height][width][4], row 0 at the top

  Image() = default;
  Image(int w, int h, Rgba fill = {0, 0, 0, 255});
  bool empty() const { return width == 0 || height == 0; }
  uint8_t* px(int x, int y) { return rgba.data() + (static_cast<std::size_t>(y) * width + x) * 4; }
  const uint8_t* px(int x, int y) const { return rgba.data() + (static_cast<std::size_t>(y) * width + x) * 4; }
  Rgba at(int x, int y) const {
    const uint8_t* p = px(x, y);
    return {p[0], p[1], p[2], p[3]};
  }
  void set(int x, int y, Rgba c) {
    uint8_t* p = px(x, y);
    p[0] = c.r, p[1] = c.g, p[2] = c.b, p[3] = c.a;
  }
  // Distinct RGB colours, for checks that a picture is a real rendering rather than a blank window.
  std::size_t distinct_colors() const;
};

// The PNG file's bytes (RGB, alpha dropped); throws Error when encoding fails.
std::string encode_png(const Image& image);

// Writes RGB (alpha dropped) PNG through an AtomicFile (an existing file replaced or refused as `existing` says);
// throws Error naming the path when it cannot be written.
void write_png(const Image& image, const std::string& path, Existing existing);

}  // namespace kvscope::viewers
