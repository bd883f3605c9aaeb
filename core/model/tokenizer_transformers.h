#pragma once
// The tokenizer of a Hugging Face folder, as transformers loads it: `AutoTokenizer.from_pretrained(folder)` in
// the embedded Python (transformers and tokenizers pinned in scripts/requirements-embedded.txt, installed into
// .deps/embedded-venv). Every component of tokenizer.json (normalizers, pre-tokenizers, models, post-processors,
// decoders, added tokens and their flags) and every tokenizer_config.json rule transformers applies on top
// (add_bos_token / add_eos_token rewriting the post-processor, a tokenizer class rebuilding the pipeline,
// special tokens named only in the config) is then exactly the reference's, because it is the reference.
#include <filesystem>
#include <memory>
#include <string>

#include "core/model/tokenizer.h"

namespace kvscope::model {

struct LoadedTokenizer {
  std::unique_ptr<Tokenizer> tokenizer;
  std::string description;  // "transformers 5.2.0 Qwen2Tokenizer (BPE, normalizer NFC, pre-tokenizer Sequence, ...)"
};

// Throws Error naming the folder when transformers is missing from the embedded Python or refuses the folder
// (a missing or damaged tokenizer.json, a tokenizer class it does not know), with transformers' own message.
LoadedTokenizer load_transformers_tokenizer(const std::filesystem::path& dir);

}  // namespace kvscope::model
