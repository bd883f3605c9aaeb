#pragma once
// The default model (scripts/fetch_model.sh), loaded once per test executable: loading is the slowest
// part of the tests that run it. `make test` always fetches it, so its absence fails the test that asked.
#include <catch2/catch.hpp>
#include <memory>
#include <string>

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

}  // namespace kvscope::test
