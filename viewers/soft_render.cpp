#include "viewers/soft_render.h"

#include <algorithm>
#include <cmath>

namespace kvscope::viewers {

namespace {

struct Texel {
  float r, g, b, a;  // 0..1
};

// The font atlas: bilinear, as the OpenGL backend samples it (GL_LINEAR), so scaled glyphs stay smooth.
Texel sample_atlas(const ImTextureData& tex, float u, float v) {
  const float x = u * tex.Width - 0.5f, y = v * tex.Height - 0.5f;
  const int x0 = static_cast<int>(std::floor(x)), y0 = static_cast<int>(std::floor(y));
  const float fx = x - x0, fy = y - y0;
  Texel out{0, 0, 0, 0};
  for (int dy = 0; dy < 2; ++dy)
    for (int dx = 0; dx < 2; ++dx) {
      const int xi = std::clamp(x0 + dx, 0, tex.Width - 1), yi = std::clamp(y0 + dy, 0, tex.Height - 1);
      const float w = (dx ? fx : 1 - fx) * (dy ? fy : 1 - fy);
      const unsigned char* p = tex.Pixels + (static_cast<std::size_t>(yi) * tex.Width + xi) * tex.BytesPerPixel;
      if (tex.Format == ImTextureFormat_Alpha8) {
        out.r += w, out.g += w, out.b += w, out.a += w * p[0] / 255.0f;
      } else {
        out.r += w * p[0] / 255.0f, out.g += w * p[1] / 255.0f, out.b += w * p[2] / 255.0f, out.a += w * p[3] / 255.0f;
      }
    }
  return out;
}

// User pictures (maps): nearest, matching GlTextureStore, so each map cell is a crisp block.
Texel sample_image(const Image& img, float u, float v) {
  const int x = std::clamp(static_cast<int>(u * img.width), 0, img.width - 1);
  const int y = std::clamp(static_cast<int>(v * img.height), 0, img.height - 1);
  const uint8_t* p = img.px(x, y);
  return {p[0] / 255.0f, p[1] / 255.0f, p[2] / 255.0f, p[3] / 255.0f};
}

Texel unpack(ImU32 c) {
  return {((c >> IM_COL32_R_SHIFT) & 0xFF) / 255.0f, ((c >> IM_COL32_G_SHIFT) & 0xFF) / 255.0f,
          ((c >> IM_COL32_B_SHIFT) & 0xFF) / 255.0f, ((c >> IM_COL32_A_SHIFT) & 0xFF) / 255.0f};
}

float edge(const ImVec2& a, const ImVec2& b, float px, float py) { return (b.x - a.x) * (py - a.y) - (b.y - a.y) * (px - a.x); }

// Top-left fill rule: a pixel centre exactly on a shared edge belongs to one triangle only, so the two
// halves of a translucent quad do not double-blend along their diagonal.
// With y down and positive area, a top edge runs left to right and a left edge runs upwards.
bool top_left(const ImVec2& a, const ImVec2& b) { return (a.y == b.y && b.x > a.x) || b.y < a.y; }

struct Source {
  const ImTextureData* atlas = nullptr;
  const Image* image = nullptr;
};

void draw_triangle(const ImDrawVert& v0, const ImDrawVert& v1_in, const ImDrawVert& v2_in, const ImVec2& offset,
                   const ImVec4& clip, const Source& src, Image& target) {
  // Order the vertices so the area is positive; the fill rule needs a fixed winding.
  const ImDrawVert* a = &v0;
  const ImDrawVert* b = &v1_in;
  const ImDrawVert* c = &v2_in;
  ImVec2 pa(a->pos.x - offset.x, a->pos.y - offset.y), pb(b->pos.x - offset.x, b->pos.y - offset.y),
      pc(c->pos.x - offset.x, c->pos.y - offset.y);
  float area = edge(pa, pb, pc.x, pc.y);
  if (std::fabs(area) < 1e-8f) return;
  if (area < 0) {
    std::swap(b, c);
    std::swap(pb, pc);
    area = -area;
  }
  const int x0 = std::max({0, static_cast<int>(std::floor(std::min({pa.x, pb.x, pc.x}))), static_cast<int>(std::floor(clip.x))});
  const int y0 = std::max({0, static_cast<int>(std::floor(std::min({pa.y, pb.y, pc.y}))), static_cast<int>(std::floor(clip.y))});
  const int x1 = std::min({target.width, static_cast<int>(std::ceil(std::max({pa.x, pb.x, pc.x}))), static_cast<int>(std::ceil(clip.z))});
  const int y1 = std::min({target.height, static_cast<int>(std::ceil(std::max({pa.y, pb.y, pc.y}))), static_cast<int>(std::ceil(clip.w))});
  if (x0 >= x1 || y0 >= y1) return;
  const bool tl0 = top_left(pb, pc), tl1 = top_left(pc, pa), tl2 = top_left(pa, pb);
  const Texel ca = unpack(a->col), cb = unpack(b->col), cc = unpack(c->col);
  const bool flat = a->col == b->col && b->col == c->col;
  const float inv = 1.0f / area;
  for (int y = y0; y < y1; ++y) {
    const float py = y + 0.5f;
    for (int x = x0; x < x1; ++x) {
      const float px = x + 0.5f;
      const float w0 = edge(pb, pc, px, py), w1 = edge(pc, pa, px, py), w2 = edge(pa, pb, px, py);
      if (w0 < 0 || w1 < 0 || w2 < 0) continue;
      if ((w0 == 0 && !tl0) || (w1 == 0 && !tl1) || (w2 == 0 && !tl2)) continue;
      const float l0 = w0 * inv, l1 = w1 * inv, l2 = w2 * inv;
      Texel col = flat ? ca
                       : Texel{ca.r * l0 + cb.r * l1 + cc.r * l2, ca.g * l0 + cb.g * l1 + cc.g * l2,
                               ca.b * l0 + cb.b * l1 + cc.b * l2, ca.a * l0 + cb.a * l1 + cc.a * l2};
      if (src.atlas || src.image) {
        const float u = a->uv.x * l0 + b->uv.x * l1 + c->uv.x * l2, v = a->uv.y * l0 + b->uv.y * l1 + c->uv.y * l2;
        const Texel t = src.atlas ? sample_atlas(*src.atlas, u, v) : sample_image(*src.image, u, v);
        col.r *= t.r, col.g *= t.g, col.b *= t.b, col.a *= t.a;
      }
      if (col.a <= 0.0f) continue;
      uint8_t* p = target.px(x, y);
      const float k = std::min(col.a, 1.0f);
      p[0] = static_cast<uint8_t>(std::lround(col.r * 255.0f * k + p[0] * (1 - k)));
      p[1] = static_cast<uint8_t>(std::lround(col.g * 255.0f * k + p[1] * (1 - k)));
      p[2] = static_cast<uint8_t>(std::lround(col.b * 255.0f * k + p[2] * (1 - k)));
    }
  }
}

}  // namespace

void acknowledge_texture_requests(ImDrawData& draw_data) {
  if (!draw_data.Textures) return;
  for (ImTextureData* tex : *draw_data.Textures) {
    switch (tex->Status) {
      case ImTextureStatus_WantCreate:
        tex->SetTexID(static_cast<ImTextureID>(tex->UniqueID + 1));
        tex->SetStatus(ImTextureStatus_OK);
        break;
      case ImTextureStatus_WantUpdates: tex->SetStatus(ImTextureStatus_OK); break;
      case ImTextureStatus_WantDestroy:
        tex->SetTexID(ImTextureID_Invalid);
        tex->SetStatus(ImTextureStatus_Destroyed);
        break;
      default: break;
    }
  }
}

void rasterize(const ImDrawData& draw_data, const SoftTextureStore& textures, Image& target) {
  const ImVec2 offset = draw_data.DisplayPos;
  for (const ImDrawList* list : draw_data.CmdLists) {
    const ImDrawVert* vtx = list->VtxBuffer.Data;
    const ImDrawIdx* idx = list->IdxBuffer.Data;
    for (const ImDrawCmd& cmd : list->CmdBuffer) {
      if (cmd.UserCallback) continue;  // no callbacks are used by our figures (ResetRenderState included)
      const ImVec4 clip(cmd.ClipRect.x - offset.x, cmd.ClipRect.y - offset.y, cmd.ClipRect.z - offset.x,
                        cmd.ClipRect.w - offset.y);
      Source src;
      if (cmd.TexRef._TexData) src.atlas = cmd.TexRef._TexData;
      else src.image = textures.find(cmd.TexRef._TexID);
      if (src.atlas && !src.atlas->Pixels) src.atlas = nullptr;
      for (unsigned i = 0; i + 2 < cmd.ElemCount; i += 3) {
        const ImDrawIdx* t = idx + cmd.IdxOffset + i;
        draw_triangle(vtx[cmd.VtxOffset + t[0]], vtx[cmd.VtxOffset + t[1]], vtx[cmd.VtxOffset + t[2]], offset, clip, src, target);
      }
    }
  }
}

}  // namespace kvscope::viewers
