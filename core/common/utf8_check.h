#pragma once
// Where a text stops being UTF-8: JSON output (nlohmann's dump) and Python strings refuse such bytes, so a user's
// file is checked before a run whose result would carry it, and the error names the byte.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace kvscope {

// The offset of the first byte that begins no valid UTF-8 sequence (overlong forms, surrogates, code points past
// U+10FFFF and a sequence cut by the end are invalid too); nothing for valid UTF-8.
std::optional<std::size_t> invalid_utf8_offset(std::string_view text);

// "" for valid UTF-8, else "byte N (0xXX) begins no valid UTF-8 character".
std::string describe_invalid_utf8(std::string_view text);

}  // namespace kvscope
