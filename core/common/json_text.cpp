#include "core/common/json_text.h"

#include "core/common/error.h"

namespace kvscope {

namespace {

// The nesting limit, checked by a scan of the brackets outside strings before nlohmann parses: its callback
// parser (the other way to see the depth) took 9 s on a 10 MB messages file that the plain parser reads in well
// under one.
void check_nesting(std::string_view text, const std::string& what) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonNesting)
        throw Error(what + ": JSON nested deeper than " + std::to_string(kMaxJsonNesting) + " levels");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

nlohmann::json parse_limited(std::string_view text, const std::string& what, bool keep) {
  check_nesting(text, what);
  try {
    // accept() builds nothing; only a document it refuses is parsed, for the error that names the place.
    if (!keep && nlohmann::json::accept(text.begin(), text.end())) return nullptr;
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    throw Error(what + ": not valid JSON (" + e.what() + ")");
  }
}

}  // namespace

nlohmann::json parse_json_text(std::string_view text, const std::string& what) { return parse_limited(text, what, true); }

void check_json_text(std::string_view text, const std::string& what) { parse_limited(text, what, false); }

}  // namespace kvscope
