#include "viewers/image.h"

#include <unordered_set>

#include "core/common/atomic_file.h"
#include "core/common/error.h"

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#endif
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#include <stb/stb_image_write.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

namespace kvscope::viewers {

Image::Image(int w, int h, Rgba fill) : width(w), height(h), rgba(static_cast<std::size_t>(w) * h * 4) {
  for (std::size_t i = 0; i < rgba.size(); i += 4) {
    rgba[i] = fill.r, rgba[i + 1] = fill.g, rgba[i + 2] = fill.b, rgba[i + 3] = fill.a;
  }
}

std::size_t Image::distinct_colors() const {
  std::unordered_set<uint32_t> seen;
  for (std::size_t i = 0; i + 3 < rgba.size(); i += 4)
    seen.insert(static_cast<uint32_t>(rgba[i]) << 16 | static_cast<uint32_t>(rgba[i + 1]) << 8 | rgba[i + 2]);
  return seen.size();
}

std::string encode_png(const Image& image) {
  if (image.empty()) throw Error("cannot encode an empty image as PNG");
  std::vector<uint8_t> rgb(static_cast<std::size_t>(image.width) * image.height * 3);
  for (std::size_t i = 0, j = 0; i < image.rgba.size(); i += 4, j += 3) {
    rgb[j] = image.rgba[i], rgb[j + 1] = image.rgba[i + 1], rgb[j + 2] = image.rgba[i + 2];
  }
  std::string png;
  auto append = [](void* out, void* data, int size) { static_cast<std::string*>(out)->append(static_cast<const char*>(data), size); };
  if (!stbi_write_png_to_func(append, &png, image.width, image.height, 3, rgb.data(), image.width * 3))
    throw Error("PNG encoding failed");
  return png;
}

void write_png(const Image& image, const std::string& path, Existing existing) {
  if (image.empty()) throw Error("cannot write '" + path + "': the image is empty");
  std::string png;
  try {
    png = encode_png(image);
  } catch (const Error&) {
    throw Error("cannot write PNG '" + path + "': encoding failed");
  }
  write_file_atomically(path, png, "PNG", existing);
}

}  // namespace kvscope::viewers
