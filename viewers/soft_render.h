#pragma once
// A small software rasteriser for ImGui draw lists, so figures (ImPlot plots, colourbars, text from the
// font atlas) can be rendered to a PNG without a display or an OpenGL context. It does what the OpenGL
// backend does: textured, vertex-coloured triangles, clipped to each command's rectangle, alpha-blended.
#include <imgui.h>

#include "viewers/image.h"
#include "viewers/texture.h"

namespace kvscope::viewers {

// Draws `draw_data` over `target` (which is the framebuffer: same size as the display). Font-atlas
// textures are read from the ImTextureData the draw commands point at; user textures from `textures`.
void rasterize(const ImDrawData& draw_data, const SoftTextureStore& textures, Image& target);

// Marks every texture request in draw_data (font atlas creation/updates) as done. The software
// renderer reads the atlas pixels straight from ImTextureData, so there is nothing to upload.
void acknowledge_texture_requests(ImDrawData& draw_data);

}  // namespace kvscope::viewers
