#pragma once
// The chat-template goldens of tools/make_chat_template_goldens.py (tests/fixtures/chat_templates): per template,
// the synthetic checkpoint whose tokenizer transformers rendered it with, and its cases (messages, keywords, text,
// ids).
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/model/chat_template.h"
#include "tests/support/golden_compare.h"

namespace kvscope::test {

inline const nlohmann::json& chat_template_golden() {
  static const nlohmann::json json =
      read_json_fixture(std::filesystem::path(KVSCOPE_FIXTURES_DIR) / "chat_templates" / "golden.json");
  return json;
}

// A model folder that is the template's synthetic checkpoint with the template as its chat_template.jinja
// (copied to a fresh temp folder, so the committed fixtures stay as they are).
inline std::filesystem::path folder_with_chat_template(const std::string& name) {
  namespace fs = std::filesystem;
  const nlohmann::json& entry = chat_template_golden()["templates"][name];
  const fs::path fixtures(KVSCOPE_FIXTURES_DIR);
  // temp_file's path, emptied as a folder (temp_file removes only files).
  const fs::path folder =
      fs::temp_directory_path() / "kvscope_tests" / ("chat_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(folder);
  fs::create_directories(folder.parent_path());
  fs::copy(fixtures / "hf_synthetic" / entry["checkpoint"].get<std::string>(), folder);
  fs::copy_file(fixtures / "chat_templates" / entry["template"].get<std::string>(), folder / "chat_template.jinja",
                fs::copy_options::overwrite_existing);
  return folder;
}

inline std::vector<model::ChatMessage> chat_messages_of(const nlohmann::json& messages) {
  std::vector<model::ChatMessage> out;
  for (const auto& m : messages) out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  return out;
}

}  // namespace kvscope::test
