#pragma once
// A loaded model: the mapped file, its hyperparameters, its weights and its tokenizer.
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>

#include "core/model/config.h"
#include "core/model/gguf.h"
#include "core/model/tokenizer.h"
#include "core/model/weights.h"

namespace kvscope::model {

struct Model {
  Model(GgufFile file, ModelConfig config, ModelWeights weights, std::unique_ptr<Tokenizer> tokenizer);

  GgufFile file;  // owns the mapping the weights point into; declared first so it is destroyed last
  ModelConfig config;
  ModelWeights weights;
  std::unique_ptr<Tokenizer> tokenizer;

  // SHA-256 of the model file, hashed on first use (hashing a large file takes seconds) and then cached.
  const std::string& sha256() const;

 private:
  struct HashCache {
    std::once_flag once;
    std::string hex;
  };
  // Behind a pointer so that Model stays movable.
  std::unique_ptr<HashCache> hash_cache_ = std::make_unique<HashCache>();
};

// Opens the GGUF file and builds config, weights and tokenizer; throws Error naming the file and field.
Model load_model(const std::filesystem::path& path);

// The model to use when the caller has no --model: $KVSCOPE_MODEL, else the default model fetched into the
// source tree's .deps/models, else .deps/models beside the executable's folder. Throws Error telling the
// user to run `make` or pass --model when none exists.
std::filesystem::path default_model_path();

// `explicit_path` when non-empty (the --model flag), else default_model_path().
std::filesystem::path resolve_model_path(const std::string& explicit_path);

inline constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

}  // namespace kvscope::model
