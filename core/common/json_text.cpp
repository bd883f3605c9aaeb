#include "core/common/json_text.h"

#include "core/common/error.h"

namespace kvscope {

namespace {

nlohmann::json parse_limited(std::string_view text, const std::string& what, bool keep) {
  const nlohmann::json::parser_callback_t limit = [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > kMaxJsonNesting)
      throw Error(what + ": JSON nested deeper than " + std::to_string(kMaxJsonNesting) + " levels");
    return keep;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), limit);
  } catch (const nlohmann::json::exception& e) {
    throw Error(what + ": not valid JSON (" + e.what() + ")");
  }
}

}  // namespace

nlohmann::json parse_json_text(std::string_view text, const std::string& what) { return parse_limited(text, what, true); }

void check_json_text(std::string_view text, const std::string& what) { parse_limited(text, what, false); }

}  // namespace kvscope
