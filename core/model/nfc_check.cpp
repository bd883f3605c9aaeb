#include "core/model/nfc_check.h"

#include <algorithm>

#include "core/model/tokenizer_bpe.h"

namespace kvscope::model {
namespace {

struct CodepointRange {
  char32_t first, last;
};
struct CombiningClassRange {
  char32_t first, last;
  int combining_class;
};
#include "core/model/nfc_tables.inc"

template <class Range, std::size_t N>
const Range* find_range(const Range (&table)[N], char32_t cp) {
  const Range* it = std::upper_bound(std::begin(table), std::end(table), cp,
                                     [](char32_t value, const Range& r) { return value < r.first; });
  if (it == std::begin(table)) return nullptr;
  --it;
  return cp <= it->last ? it : nullptr;
}

int combining_class(char32_t cp) {
  const CombiningClassRange* r = find_range(kCombiningClassRanges, cp);
  return r ? r->combining_class : 0;
}

}  // namespace

std::optional<std::size_t> first_non_nfc_position(std::string_view utf8) {
  int last_class = 0;
  for (std::size_t pos = 0; pos < utf8.size();) {
    const unicode::Utf8Char ch = unicode::decode_utf8(utf8, pos);
    // Below U+0300 every character is quick-check "yes" with combining class 0 (UAX #15's fast path).
    if (ch.invalid || ch.cp < 0x300) {
      last_class = 0;
    } else {
      const int cls = combining_class(ch.cp);
      if ((cls != 0 && last_class > cls) || find_range(kNfcQuickCheckNotYesRanges, ch.cp)) return pos;
      last_class = cls;
    }
    pos += static_cast<std::size_t>(ch.length);
  }
  return std::nullopt;
}

}  // namespace kvscope::model
