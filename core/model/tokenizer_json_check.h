#pragma once
// A Hugging Face folder's tokenizer files checked in C++ before transformers (and the tokenizers library under it)
// reads them: a damaged file must become an error naming the file and the field, never a load that hangs or
// grows until the OOM killer acts (a vocabulary id of 2^31 does the latter in tokenizers).
//
// Bounds (docs/models.md, "Tokenizer bounds"):
//   - tokenizer.json at most kMaxTokenizerJsonBytes, tokenizer_config.json at most kMaxTokenizerConfigBytes,
//     both nested at most kMaxJsonNesting levels (json_text.h);
//   - every token id (model.vocab, added_tokens, the post-processor's special tokens) a non-negative integer below
//     config.json's vocab_size + kAddedTokenExcess (added tokens a fine-tune did not give embedding rows), and
//     always below kMaxTokenId;
//   - at most kMaxTokenId vocabulary entries and merges, kMaxAddedTokens added tokens, each merge two tokens of the
//     vocabulary.
#include <cstdint>
#include <filesystem>

namespace kvscope::model {

inline constexpr uint64_t kMaxTokenizerJsonBytes = uint64_t{512} << 20;
inline constexpr uint64_t kMaxTokenizerConfigBytes = uint64_t{64} << 20;
inline constexpr int64_t kMaxTokenId = int64_t{1} << 24;
inline constexpr int64_t kAddedTokenExcess = 1024;
inline constexpr int64_t kMaxAddedTokens = int64_t{1} << 20;

// Throws Error "<dir>/tokenizer.json: <field>: <what was wrong> (expected ...)". A missing tokenizer.json is an
// error too (the folder's tokenizer, as transformers saves it); a missing tokenizer_config.json is not.
void check_tokenizer_files(const std::filesystem::path& dir);

}  // namespace kvscope::model
