#pragma once
// The tokenizer of a Hugging Face folder: tokenizer.json (the `tokenizers` library's file) with the special
// tokens of tokenizer_config.json. Byte-level BPE with the GPT-2, SmolLM, Llama-3 and Qwen2 split patterns, and the
// SentencePiece-style BPE (byte fallback, Prepend/Replace normalizer or Metaspace) of Llama 2 and Mistral.
#include <filesystem>
#include <memory>
#include <string>

#include "core/model/tokenizer.h"

namespace kvscope::model {

struct LoadedTokenizer {
  std::unique_ptr<Tokenizer> tokenizer;
  std::string description;  // e.g. "tokenizer.json byte-level BPE (pre-tokenizer smollm)"
};

// Throws Error naming the file and the field for a missing file or a model, normalizer, pre-tokenizer or
// post-processor kvscope does not implement.
LoadedTokenizer load_tokenizer_json(const std::filesystem::path& dir);

}  // namespace kvscope::model
