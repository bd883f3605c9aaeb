#pragma once
// The figure font, DejaVu Sans (Debian's fonts-dejavu-core, installed by scripts/setup_deps.sh): its file for
// the PNG renderer and the PDF writer to embed, and its advance widths so the SVG and PDF writers place and
// fit text by the widths a viewer will draw it with. Without the file, a width per character that
// over-estimates DejaVu Sans keeps text from overlapping, and PDF falls back to Helvetica.
#include <string>
#include <vector>

namespace kvscope::viewers {

struct FigureFont {
  std::string regular_path, bold_path;  // empty when the file is missing
  std::string regular_bytes, bold_bytes;
  // Advance widths of characters 32..126 in ems (1000 units per em, as PDF's /Widths wants them).
  int widths[95] = {}, bold_widths[95] = {};
  // Glyph ids of characters 32..126 (what a PDF's WinAnsi text can show), for the embedded subset (font_subset.h).
  std::vector<int> glyphs, bold_glyphs;
  bool loaded() const { return !regular_bytes.empty(); }
  // The width of `text` at `size` pixels; characters outside 32..126 count as a wide one.
  double text_width(const std::string& text, double size, bool bold = false) const;
};

// Loaded once per process: $KVSCOPE_FIGURE_FONT_DIR, else /usr/share/fonts/truetype/dejavu.
const FigureFont& figure_font();

}  // namespace kvscope::viewers
