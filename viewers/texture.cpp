#include "viewers/texture.h"

#define GL_GLEXT_PROTOTYPES
#include <GL/gl.h>

namespace kvscope::viewers {

ImTextureID TextureStore::get(const std::string& slot, const std::string& signature, const std::function<Image()>& make) {
  auto it = entries_.find(slot);
  if (it != entries_.end() && it->second.signature == signature) return it->second.id;
  const Image image = make();
  ++generation_;
  if (it != entries_.end() && it->second.id != ImTextureID_Invalid) destroy(it->second.id);
  Entry e;
  e.signature = signature;
  e.id = image.empty() ? ImTextureID_Invalid : create(image);
  entries_[slot] = e;
  return e.id;
}

void TextureStore::clear() {
  ++generation_;
  for (auto& [slot, e] : entries_)
    if (e.id != ImTextureID_Invalid) destroy(e.id);
  entries_.clear();
}

GlTextureStore::~GlTextureStore() { clear(); }

ImTextureID GlTextureStore::create(const Image& image) {
  GLuint tex = 0;
  glGenTextures(1, &tex);
  glBindTexture(GL_TEXTURE_2D, tex);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_NEAREST);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_S, GL_CLAMP_TO_EDGE);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_T, GL_CLAMP_TO_EDGE);
  glPixelStorei(GL_UNPACK_ALIGNMENT, 1);
  glPixelStorei(GL_UNPACK_ROW_LENGTH, 0);
  glTexImage2D(GL_TEXTURE_2D, 0, GL_RGBA, image.width, image.height, 0, GL_RGBA, GL_UNSIGNED_BYTE, image.rgba.data());
  return static_cast<ImTextureID>(tex);
}

void GlTextureStore::destroy(ImTextureID id) {
  const GLuint tex = static_cast<GLuint>(id);
  glDeleteTextures(1, &tex);
}

SoftTextureStore::~SoftTextureStore() { clear(); }

const Image* SoftTextureStore::find(ImTextureID id) const {
  auto it = images_.find(id);
  return it == images_.end() ? nullptr : &it->second;
}

ImTextureID SoftTextureStore::create(const Image& image) {
  const ImTextureID id = next_++;
  images_[id] = image;
  return id;
}

void SoftTextureStore::destroy(ImTextureID id) { images_.erase(id); }

}  // namespace kvscope::viewers
