// The PDF font subset (viewers/font_subset.h) read back with a reader of its own here: every kept glyph's outline is
// the original's byte for byte, glyphs not asked for are empty, the tables and the whole file carry valid
// TrueType checksums, and a PDF export embeds the subset under a subset name.
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <string>

#include "viewers/figure_vector.h"
#include "viewers/font_metrics.h"
#include "viewers/font_subset.h"

using namespace kvscope::viewers;

namespace {

uint32_t be16(const std::string& s, std::size_t at) {
  return static_cast<uint32_t>(static_cast<unsigned char>(s.at(at)) << 8 | static_cast<unsigned char>(s.at(at + 1)));
}
uint32_t be32(const std::string& s, std::size_t at) { return be16(s, at) << 16 | be16(s, at + 2); }

struct Font {
  std::map<std::string, std::pair<uint32_t, uint32_t>> tables;  // tag -> offset, length
  std::map<std::string, uint32_t> sums;                          // tag -> recorded checksum
  std::string bytes;

  explicit Font(std::string b) : bytes(std::move(b)) {
    for (uint32_t i = 0; i < be16(bytes, 4); ++i) {
      const std::size_t r = 12 + 16 * i;
      tables[bytes.substr(r, 4)] = {be32(bytes, r + 8), be32(bytes, r + 12)};
      sums[bytes.substr(r, 4)] = be32(bytes, r + 4);
    }
  }
  std::string table(const std::string& tag) const {
    const auto [offset, length] = tables.at(tag);
    return bytes.substr(offset, length);
  }
  std::string glyph(uint32_t g) const {
    const std::string head = table("head"), loca = table("loca"), glyf = table("glyf");
    const bool long_loca = be16(head, 50) == 1;
    const uint32_t a = long_loca ? be32(loca, 4 * g) : 2 * be16(loca, 2 * g);
    const uint32_t b = long_loca ? be32(loca, 4 * (g + 1)) : 2 * be16(loca, 2 * (g + 1));
    return glyf.substr(a, b - a);
  }
};

uint32_t sum32(std::string s) {
  s.append((4 - s.size() % 4) % 4, '\0');
  uint32_t sum = 0;
  for (std::size_t i = 0; i < s.size(); i += 4) sum += be32(s, i);
  return sum;
}

}  // namespace

TEST_CASE("a subset keeps the asked glyphs' outlines exactly, empties the others and stays a valid font", "[figure]") {
  const FigureFont& font = figure_font();
  if (!font.loaded()) {
    WARN("DejaVu Sans is not installed (fonts-dejavu-core): nothing to subset");
    return;
  }
  const Font original(font.regular_bytes);
  const Font subset(subset_truetype(font.regular_bytes, font.glyphs));
  INFO("original " << original.bytes.size() << " bytes, subset " << subset.bytes.size());
  CHECK(subset.bytes.size() * 8 < original.bytes.size());  // DejaVu Sans: 757 KB -> about 60 KB

  const uint32_t n = be16(original.table("maxp"), 4);
  REQUIRE(be16(subset.table("maxp"), 4) == n);  // glyph ids are kept
  // An outline is padded to 4 bytes at most.
  for (int g : font.glyphs) {
    const std::string kept = subset.glyph(static_cast<uint32_t>(g)), was = original.glyph(static_cast<uint32_t>(g));
    CHECK(kept.substr(0, was.size()) == was);
    CHECK(kept.size() - was.size() < 4);
  }
  CHECK(subset.glyph(0) == original.glyph(0).substr(0, subset.glyph(0).size()));  // .notdef stays
  // The last glyph of DejaVu Sans is far outside ASCII and no ASCII glyph's component: empty.
  CHECK_FALSE(original.glyph(n - 1).empty());
  CHECK(subset.glyph(n - 1).empty());
  // Metrics and mapping stay; OpenType layout goes; glyph names go (post version 3).
  for (const char* tag : {"cmap", "hmtx", "hhea", "OS/2"}) CHECK(subset.table(tag) == original.table(tag));
  CHECK(subset.tables.count("GPOS") == 0);
  CHECK(be32(subset.table("post"), 0) == 0x00030000u);

  // Checksums: each table's as recorded, and the whole file's against the magic number.
  for (const auto& [tag, sum] : subset.sums) {
    std::string data = subset.table(tag);
    if (tag == "head") data.replace(8, 4, std::string(4, '\0'));
    CHECK(sum32(data) == sum);
  }
  CHECK(sum32(subset.bytes) == 0xB1B0AFBAu);

  CHECK_THROWS_WITH(subset_truetype(std::string(64, '\0'), {1}), Catch::Contains("no 'head' table"));
}

TEST_CASE("a PDF export embeds the font as a named subset", "[figure]") {
  if (!figure_font().loaded()) return;
  Figure f;
  LinePlot p;
  p.title = "subset";
  LineSeries s;
  s.name = "a";
  s.x = {0, 1, 2};
  s.y = {1, 2, 3};
  p.series.push_back(s);
  f.parts.push_back(p);
  VectorOptions o;
  o.width = 990, o.height = 700, o.dpi = 300, o.font_px = 37.5;
  const std::string pdf = figure_pdf(f, o);
  CHECK(pdf.find("/BaseFont /KVSASC+DejaVuSans") != std::string::npos);
  CHECK(pdf.find("/FontName /KVSASC+DejaVuSans") != std::string::npos);
  const std::size_t at = pdf.find("/Length1 ");
  REQUIRE(at != std::string::npos);
  CHECK(std::stoul(pdf.substr(at + 9)) < 150000);  // the whole font is 757 KB
  CHECK(pdf.size() < 120000);
}
