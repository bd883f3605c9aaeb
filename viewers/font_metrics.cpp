#include "viewers/font_metrics.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wcast-qual"
#endif
#define STBTT_STATIC
#define STB_TRUETYPE_IMPLEMENTATION
#include <imstb_truetype.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

namespace kvscope::viewers {

namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Fills widths[] from the font's hmtx table; false when the bytes are not a font stb_truetype reads.
bool measure(const std::string& bytes, int (&widths)[95], std::vector<int>& glyphs) {
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  stbtt_fontinfo info;
  if (!stbtt_InitFont(&info, data, stbtt_GetFontOffsetForIndex(data, 0))) return false;
  const float scale = stbtt_ScaleForMappingEmToPixels(&info, 1000.0f);
  for (int c = 32; c <= 126; ++c) {
    int advance = 0, lsb = 0;
    stbtt_GetCodepointHMetrics(&info, c, &advance, &lsb);
    widths[c - 32] = static_cast<int>(advance * scale + 0.5f);
    glyphs.push_back(stbtt_FindGlyphIndex(&info, c));
  }
  return true;
}

FigureFont load() {
  FigureFont f;
  const char* env = std::getenv("KVSCOPE_FIGURE_FONT_DIR");
  const std::string dir = env && *env ? env : "/usr/share/fonts/truetype/dejavu";
  f.regular_bytes = read_all(dir + "/DejaVuSans.ttf");
  f.bold_bytes = read_all(dir + "/DejaVuSans-Bold.ttf");
  if (!f.regular_bytes.empty() && measure(f.regular_bytes, f.widths, f.glyphs)) f.regular_path = dir + "/DejaVuSans.ttf";
  else f.regular_bytes.clear();
  if (!f.bold_bytes.empty() && measure(f.bold_bytes, f.bold_widths, f.bold_glyphs)) f.bold_path = dir + "/DejaVuSans-Bold.ttf";
  else f.bold_bytes.clear();
  // No file: DejaVu Sans' widest ordinary characters are about 0.7 em, its digits 0.64 em.
  for (int i = 0; i < 95; ++i) {
    if (f.regular_bytes.empty()) f.widths[i] = 660;
    if (f.bold_bytes.empty()) f.bold_widths[i] = f.regular_bytes.empty() ? 720 : f.widths[i] * 11 / 10;
  }
  return f;
}

}  // namespace

double FigureFont::text_width(const std::string& text, double size, bool bold) const {
  const int* w = bold ? bold_widths : widths;
  double units = 0;
  for (unsigned char c : text) {
    if ((c & 0xC0) == 0x80) continue;  // a UTF-8 continuation byte: the character was counted at its lead byte
    units += c >= 32 && c <= 126 ? w[c - 32] : 1000;
  }
  return units * size / 1000.0;
}

const FigureFont& figure_font() {
  static const FigureFont font = load();
  return font;
}

}  // namespace kvscope::viewers
