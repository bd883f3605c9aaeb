#pragma once
// A TrueType font cut down to the glyphs a PDF uses, so an exported figure embeds a subset (tens of KB) instead of
// the whole DejaVu Sans (about 700 KB a face). Glyph ids stay as they are: the glyphs not kept become empty
// outlines, so cmap, hmtx and the PDF's /Widths still hold. Tables a PDF viewer does not read for TrueType text
// (OpenType layout, kerning, hinting device tables, the signature) are left out and `post` keeps no glyph names.
#include <string>
#include <vector>

namespace kvscope::viewers {

// `font` is a TrueType (glyf-outline) font file; `glyphs` the glyph ids to keep (.notdef and the components of
// kept composite glyphs are added). Throws Error naming the table when the font cannot be read.
std::string subset_truetype(const std::string& font, std::vector<int> glyphs);

}  // namespace kvscope::viewers
