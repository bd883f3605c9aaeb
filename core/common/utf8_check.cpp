#include "core/common/utf8_check.h"

#include <cstdio>

namespace kvscope {

std::optional<std::size_t> invalid_utf8_offset(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
    const unsigned char c = byte(i);
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;  // the allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) length = 2;
    else if (c == 0xE0) length = 3, low = 0xA0;
    else if (c >= 0xE1 && c <= 0xEC) length = 3;
    else if (c == 0xED) length = 3, high = 0x9F;  // no surrogates
    else if (c >= 0xEE && c <= 0xEF) length = 3;
    else if (c == 0xF0) length = 4, low = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) length = 4;
    else if (c == 0xF4) length = 4, high = 0x8F;  // nothing past U+10FFFF
    else return i;
    if (i + length > text.size() || byte(i + 1) < low || byte(i + 1) > high) return i;
    for (std::size_t k = 2; k < length; ++k)
      if ((byte(i + k) & 0xC0) != 0x80) return i;
    i += length;
  }
  return std::nullopt;
}

std::string describe_invalid_utf8(std::string_view text) {
  const auto at = invalid_utf8_offset(text);
  if (!at) return "";
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned char>(text[*at]));
  return "byte " + std::to_string(*at) + " (" + hex + ") begins no valid UTF-8 character";
}

}  // namespace kvscope
