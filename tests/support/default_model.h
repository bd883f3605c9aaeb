#pragma once
// The default model (scripts/fetch_model.sh), loaded once per test executable: loading is the slowest
// part of the tests that run it. `make test` always fetches it, so its absence fails the test that asked.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/model/model.h"

namespace kvscope::test {

inline const model::Model* default_model() {
  static std::string failure;
  static std::unique_ptr<model::Model> loaded = []() -> std::unique_ptr<model::Model> {
    try {
      return std::make_unique<model::Model>(model::load_model(model::default_model_path()));
    } catch (const std::exception& e) {
      failure = e.what();
      return nullptr;
    }
  }();
  INFO("the default model could not be loaded (run `make` first): " << failure);
  REQUIRE(loaded != nullptr);
  return loaded.get();
}

// A sample prompt (sample_data/prompts/<file>) as the model's tokens, BOS first when the model wants one.
inline std::vector<int> sample_prompt_tokens(const model::Model& model, const std::string& file) {
  std::ifstream in(std::filesystem::path(KVSCOPE_SOURCE_DIR) / "sample_data" / "prompts" / file);
  INFO("sample prompt " << file);
  REQUIRE(in.good());
  std::ostringstream text;
  text << in.rdbuf();
  std::vector<int> ids;
  if (model.tokenizer->add_bos() && model.tokenizer->bos_id() >= 0) ids.push_back(model.tokenizer->bos_id());
  const auto body = model.tokenizer->encode(text.str(), false);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

}  // namespace kvscope::test
