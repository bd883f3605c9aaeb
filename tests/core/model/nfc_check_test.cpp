// The NFC quick check against texts whose NFC status Python's unicodedata (Unicode 16.0) reports:
// normalize("NFC", s) == s for the first group, != for the second.
#include <catch2/catch.hpp>

#include "core/model/nfc_check.h"

using kvscope::model::first_non_nfc_position;

TEST_CASE("text already in NFC passes the quick check", "[nfc]") {
  for (const char* text : {"caf\xC3\xA9",               // café, precomposed
                           "\xED\x95\x9C\xEA\xB5\xAD",  // 한국, Hangul syllables
                           "\xD7\x90\xD6\xB0\xD6\xB1",  // alef, sheva (ccc 10), hataf segol (ccc 11)
                           "na\xC3\xAF"
                           "ve \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x99\x82",
                           "\xE0\xA4\x95\xE0\xA5\x8D\xE0\xA4\xB7",  // क्ष, virama (ccc 9) between consonants
                           "plain ASCII", ""}) {
    INFO(text);
    CHECK_FALSE(first_non_nfc_position(text).has_value());
  }
}

TEST_CASE("text NFC would change is caught at the first character that may change", "[nfc]") {
  CHECK(first_non_nfc_position("cafe\xCC\x81") == 4u);              // e + combining acute (Maybe)
  CHECK(first_non_nfc_position("x\xE0\xA5\x98") == 1u);             // U+0958, excluded from composition (No)
  CHECK(first_non_nfc_position("\xE1\x84\x80\xE1\x85\xA1") == 3u);  // Hangul L + V jamo compose
  CHECK(first_non_nfc_position("\xD7\x90\xD6\xB1\xD6\xB0") == 4u);  // combining classes 11 then 10: reordered
}
