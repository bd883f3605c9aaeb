#include "core/common/json_text.h"

#include "core/common/error.h"

namespace kvscope {

nlohmann::json parse_json_text(std::string_view text, const std::string& what) {
  const nlohmann::json::parser_callback_t limit = [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > kMaxJsonNesting)
      throw Error(what + ": JSON nested deeper than " + std::to_string(kMaxJsonNesting) + " levels");
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), limit);
  } catch (const nlohmann::json::exception& e) {
    throw Error(what + ": not valid JSON (" + e.what() + ")");
  }
}

}  // namespace kvscope
