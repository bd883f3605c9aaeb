#pragma once
// JSON from a user's file (config.json, tokenizer.json, tokenizer_config.json, a messages file), parsed with a
// nesting limit: nlohmann's dump and comparison recurse per level, so a damaged file nested a hundred thousand
// levels deep would overflow the stack in the first error message that quotes it. Real files nest under ten.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace kvscope {

inline constexpr int kMaxJsonNesting = 64;

// Throws Error "<what>: not valid JSON (...)" or "<what>: JSON nested deeper than 64 levels".
nlohmann::json parse_json_text(std::string_view text, const std::string& what);
// The same checks without keeping the document (for a file another library reads next).
void check_json_text(std::string_view text, const std::string& what);

}  // namespace kvscope
