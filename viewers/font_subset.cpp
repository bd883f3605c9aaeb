#include "viewers/font_subset.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>

#include "core/common/error.h"

namespace kvscope::viewers {

namespace {

uint32_t get16(const std::string& s, std::size_t at) {
  if (at + 2 > s.size()) throw Error("font subset: the font ends inside a table (offset " + std::to_string(at) + ")");
  return static_cast<uint32_t>(static_cast<unsigned char>(s[at]) << 8 | static_cast<unsigned char>(s[at + 1]));
}
uint32_t get32(const std::string& s, std::size_t at) { return get16(s, at) << 16 | get16(s, at + 2); }
void put16(std::string& s, std::size_t at, uint32_t v) {
  s[at] = static_cast<char>(v >> 8 & 0xFF);
  s[at + 1] = static_cast<char>(v & 0xFF);
}
void put32(std::string& s, std::size_t at, uint32_t v) {
  put16(s, at, v >> 16);
  put16(s, at + 2, v & 0xFFFF);
}
void append32(std::string& s, uint32_t v) {
  s.append(4, '\0');
  put32(s, s.size() - 4, v);
}

uint32_t checksum(const std::string& data) {
  std::string padded = data;
  padded.append((4 - padded.size() % 4) % 4, '\0');
  uint32_t sum = 0;
  for (std::size_t i = 0; i < padded.size(); i += 4) sum += get32(padded, i);
  return sum;
}

// The tables a PDF viewer reads to draw TrueType text by glyph outline; the rest are dropped.
const std::set<std::string> kKept = {"cmap", "cvt ", "fpgm", "glyf", "head", "hhea", "hmtx", "loca", "maxp", "name",
                                     "OS/2", "post", "prep"};

}  // namespace

std::string subset_truetype(const std::string& font, std::vector<int> glyphs) {
  std::map<std::string, std::string> tables;
  const uint32_t n_tables = get16(font, 4);
  for (uint32_t i = 0; i < n_tables; ++i) {
    const std::size_t record = 12 + 16 * static_cast<std::size_t>(i);
    if (record + 16 > font.size()) throw Error("font subset: the table directory is cut short");
    const std::string tag = font.substr(record, 4);
    const uint32_t offset = get32(font, record + 8), length = get32(font, record + 12);
    if (static_cast<std::size_t>(offset) + length > font.size())
      throw Error("font subset: table '" + tag + "' reaches past the end of the font");
    if (kKept.count(tag)) tables[tag] = font.substr(offset, length);
  }
  for (const char* need : {"head", "maxp", "loca", "glyf"})
    if (!tables.count(need)) throw Error(std::string("font subset: the font has no '") + need + "' table (not a TrueType outline font)");
  std::string& head = tables["head"];
  const bool long_loca = get16(head, 50) == 1;
  const uint32_t n_glyphs = get16(tables["maxp"], 4);
  const std::string& loca = tables["loca"];
  const std::string& glyf = tables["glyf"];
  auto glyph_range = [&](uint32_t g) {
    const uint32_t a = long_loca ? get32(loca, 4 * g) : 2 * get16(loca, 2 * g);
    const uint32_t b = long_loca ? get32(loca, 4 * (g + 1)) : 2 * get16(loca, 2 * (g + 1));
    if (b < a || b > glyf.size()) throw Error("font subset: glyph " + std::to_string(g) + "'s outline is outside 'glyf'");
    return std::pair{a, b};
  };

  // Glyphs to keep: those asked for, .notdef, and the components of composite glyphs (recursively).
  std::set<uint32_t> keep{0};
  std::vector<uint32_t> todo;
  for (int g : glyphs)
    if (g >= 0 && static_cast<uint32_t>(g) < n_glyphs) todo.push_back(static_cast<uint32_t>(g));
  while (!todo.empty()) {
    const uint32_t g = todo.back();
    todo.pop_back();
    keep.insert(g);
    const auto [a, b] = glyph_range(g);
    if (b - a < 10 || static_cast<int16_t>(get16(glyf, a)) >= 0) continue;  // empty or a simple outline
    for (std::size_t at = a + 10;;) {
      const uint32_t flags = get16(glyf, at), component = get16(glyf, at + 2);
      if (component < n_glyphs && !keep.count(component)) todo.push_back(component);
      at += 4 + ((flags & 0x0001) ? 4 : 2) + ((flags & 0x0008) ? 2 : (flags & 0x0040) ? 4 : (flags & 0x0080) ? 8 : 0);
      if (!(flags & 0x0020)) break;  // MORE_COMPONENTS
    }
  }

  // glyf without the other outlines, loca in the long format.
  std::string new_glyf, new_loca;
  for (uint32_t g = 0; g < n_glyphs; ++g) {
    append32(new_loca, static_cast<uint32_t>(new_glyf.size()));
    if (!keep.count(g)) continue;
    const auto [a, b] = glyph_range(g);
    new_glyf += glyf.substr(a, b - a);
    new_glyf.append((4 - new_glyf.size() % 4) % 4, '\0');
  }
  append32(new_loca, static_cast<uint32_t>(new_glyf.size()));
  tables["glyf"] = new_glyf;
  tables["loca"] = new_loca;
  put16(head, 50, 1);
  put32(head, 8, 0);  // checkSumAdjustment, set below
  if (tables.count("post") && tables["post"].size() >= 32) {
    tables["post"].resize(32);  // version 3: no glyph names
    put32(tables["post"], 0, 0x00030000);
  }

  // The file: directory (tables in tag order), then the tables, each on a 4-byte boundary.
  const uint32_t count = static_cast<uint32_t>(tables.size());
  uint32_t power = 1, log2 = 0;
  while (power * 2 <= count) power *= 2, ++log2;
  std::string out(12 + 16 * static_cast<std::size_t>(count), '\0');
  put32(out, 0, 0x00010000);
  put16(out, 4, count);
  put16(out, 6, power * 16);
  put16(out, 8, log2);
  put16(out, 10, count * 16 - power * 16);
  std::size_t record = 12, head_offset = 0;
  for (const auto& [tag, data] : tables) {
    out.replace(record, 4, tag);
    put32(out, record + 4, checksum(data));
    put32(out, record + 8, static_cast<uint32_t>(out.size()));
    put32(out, record + 12, static_cast<uint32_t>(data.size()));
    if (tag == "head") head_offset = out.size();
    out += data;
    out.append((4 - out.size() % 4) % 4, '\0');
    record += 16;
  }
  put32(out, head_offset + 8, 0xB1B0AFBAu - checksum(out));
  return out;
}

}  // namespace kvscope::viewers
