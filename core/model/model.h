#pragma once
// A loaded model: the mapped files, its hyperparameters, its weights and its tokenizer. It comes from a GGUF
// file or from a Hugging Face folder (config.json, safetensors, tokenizer.json).
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <variant>

#include "core/model/chat_template.h"
#include "core/model/config.h"
#include "core/model/gguf.h"
#include "core/model/hf_folder.h"
#include "core/model/tokenizer.h"
#include "core/model/weights.h"

namespace kvscope::model {

enum class ModelFormat { Gguf, HuggingFace };

struct Model {
  Model(std::variant<GgufFile, HfFolder> files, ModelConfig config, ModelWeights weights,
        std::unique_ptr<Tokenizer> tokenizer, std::string tokenizer_description);

  // Owns the mappings the weights point into; declared first so it is destroyed last.
  std::variant<GgufFile, HfFolder> files;
  ModelConfig config;
  ModelWeights weights;
  std::unique_ptr<Tokenizer> tokenizer;
  std::string tokenizer_description;  // the tokenizer's kind, e.g. "gpt2 (pre-tokenizer smollm)"
  ChatTemplateChoice chat_template;   // what --chat renders, from the model's template or its architecture

  ModelFormat format() const { return files.index() == 0 ? ModelFormat::Gguf : ModelFormat::HuggingFace; }
  const std::filesystem::path& path() const;  // the GGUF file or the folder
  const GgufFile* gguf() const { return std::get_if<GgufFile>(&files); }
  const HfFolder* hf_folder() const { return std::get_if<HfFolder>(&files); }

  // SHA-256 identifying the weights, hashed on first use (hashing a large file takes seconds) and then cached:
  // of the GGUF file; for a folder, of the sha256sum-style listing "<hash>  <name>\n" of its defining files.
  const std::string& sha256() const;

 private:
  struct HashCache {
    std::once_flag once;
    std::string hex;
  };
  // Behind a pointer so that Model stays movable.
  std::unique_ptr<HashCache> hash_cache_ = std::make_unique<HashCache>();
};

const char* format_name(ModelFormat format);

// What turns text into a model's tokens, without its weights: the tokenizer and the chat template. For
// `kvscope tokenize`, which also reads GGUF files that hold a vocabulary and no tensors (llama.cpp's vocab
// files) and folders with a tokenizer.json and no config.json.
struct ModelText {
  std::unique_ptr<Tokenizer> tokenizer;
  std::string tokenizer_description;
  ChatTemplateChoice chat_template;
};
ModelText load_model_text(const std::filesystem::path& path);  // "gguf", "huggingface"

// Opens a GGUF file or a Hugging Face folder and builds config, weights and tokenizer; throws Error naming the
// file and field.
Model load_model(const std::filesystem::path& path);

// The model to use when the caller has no --model: $KVSCOPE_MODEL, else the default model fetched into the
// source tree's .deps/models, else .deps/models beside the executable's folder. Throws Error telling the
// user to run `make` or pass --model when none exists.
std::filesystem::path default_model_path();

// `explicit_path` when non-empty (the --model flag), else default_model_path().
std::filesystem::path resolve_model_path(const std::string& explicit_path);

inline constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

}  // namespace kvscope::model
