#pragma once
// Byte-level BPE (GPT-2 style) as Hugging Face `tokenizers` runs it, plus the Unicode and UTF-8 helpers
// that both tokenizers share.
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/model/tokenizer.h"

namespace kvscope::model {

// llama.cpp's token types as GGUF files store them (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6
};

namespace unicode {

// The classes of the reference's regexes, from core/model/unicode_tables.inc (Unicode 16.0).
bool is_letter(char32_t cp);      // \p{L}
bool is_number(char32_t cp);      // \p{N}
bool is_whitespace(char32_t cp);  // \s (White_Space)

// One step of UTF-8 decoding. A byte that does not start a valid sequence is returned as `invalid` with
// length 1, so callers can keep raw bytes and still walk the text.
struct Utf8Char {
  char32_t cp = 0;
  int length = 1;
  bool invalid = false;
};
Utf8Char decode_utf8(std::string_view text, size_t pos);

// Decodes bytes as Rust's String::from_utf8_lossy (what the reference's byte-level decoder calls): each
// maximal ill-formed subpart becomes one U+FFFD, as Unicode's "best practice for U+FFFD substitution" says.
std::string utf8_lossy(std::string_view bytes);

void append_utf8(std::string& out, char32_t cp);

}  // namespace unicode

// Special-token strings found in text before pre-tokenizing, for both tokenizers. Matching is leftmost,
// then longest, as the reference's added-token matcher does.
struct TextPiece {
  std::string_view text;
  int id = -1;  // -1: raw text between special tokens
};
class SpecialTokenMatcher {
 public:
  // Control tokens are matched only when encode is asked to parse special tokens; user-defined ones always.
  void add(std::string text, int id, bool control);
  std::vector<TextPiece> split(std::string_view text, bool parse_special) const;
  size_t size() const { return tokens_.size(); }

 private:
  struct Entry {
    std::string text;
    int id;
    bool control;
  };
  std::vector<Entry> tokens_;
  std::vector<int> by_first_byte_[256];  // entry indices, longest first
};

// The ranked merges of a BPE model, as the reference's BPE applies them to a word's symbols: the adjacent pair
// with the lowest rank first, leftmost on ties, until no listed pair is left. Shared by the byte-level and the
// SentencePiece-style (tokenizer.json byte-fallback) tokenizers.
class BpeMerges {
 public:
  BpeMerges() = default;
  // `merges` are "left right", best first; `ids` maps token text to id. A merge whose parts or result are not in
  // `ids` can never fire, so it is skipped rather than refusing the file; the first of duplicate merges keeps
  // its rank, as llama.cpp does.
  BpeMerges(const std::vector<std::string>& merges, const std::unordered_map<std::string, int>& ids);
  bool empty() const { return table_.empty(); }
  // Merges `symbols` (token ids) in place.
  void apply(std::vector<int>& symbols) const;

 private:
  std::unordered_map<uint64_t, std::pair<int, int>> table_;  // (left id << 32 | right id) -> (rank, merged id)
};

// How text is cut into words before BPE, named by tokenizer.ggml.pre.
enum class BpePreTokenizer {
  Gpt2,    // "gpt2", "default": the GPT-2 regex
  SmolLM,  // "smollm": every digit alone (HF Digits(individual_digits)), then the GPT-2 regex
  Llama3,  // "llama-bpe", "llama3", ...: the Llama-3 regex (case-insensitive contractions, \p{N}{1,3})
  Qwen2,   // "qwen2", ...: the Llama-3 regex with single digits
};
// nullopt when the name is not one we implement.
std::optional<BpePreTokenizer> bpe_pre_tokenizer_from_name(std::string_view name);

struct BpeVocab {
  std::vector<std::string> tokens;   // as stored: byte-level alphabet for normal tokens, raw text for added ones
  std::vector<int32_t> token_types;  // TokenType values; empty means all Normal
  std::vector<std::string> merges;   // "left right", best first
  int bos_id = -1;
  int eos_id = -1;
  int unk_id = -1;
  bool add_bos = false;
  // Llama-3 takes a whole word straight from the vocabulary before trying merges (HF BPE ignore_merges).
  bool ignore_merges = false;
};

class BpeTokenizer final : public Tokenizer {
 public:
  // Throws Error when the vocabulary is empty, token_type disagrees with it in length, or a special id is
  // out of range. Malformed merges are skipped (see the constructor).
  BpeTokenizer(BpeVocab vocab, BpePreTokenizer pre);

  std::vector<int> encode(std::string_view text, bool parse_special = true) const override;
  // Each token's raw bytes walked over the text: byte-level BPE keeps every byte, except the bytes the vocabulary
  // has no token for (dropped by encode), which belong to no token.
  Encoding encode_with_bytes(std::string_view text, bool parse_special = true) const override;
  std::string decode(const std::vector<int>& ids) const override;
  std::string token_text(int id) const override;
  int vocab_size() const override { return static_cast<int>(tokens_.size()); }
  int bos_id() const override { return bos_id_; }
  int eos_id() const override { return eos_id_; }
  bool add_bos() const override { return add_bos_; }
  bool is_end_of_generation(int id) const override;

  // The words BPE sees, as raw bytes, for text with no special tokens in it.
  std::vector<std::string> pre_tokenize(std::string_view text) const;
  // Raw bytes of one token (what decode concatenates before the UTF-8 repair).
  const std::string& token_bytes(int id) const;

 private:
  void encode_word(std::string_view word, std::vector<int>& out) const;
  void bpe_word(std::string_view word, std::vector<int>& out) const;

  std::vector<std::string> tokens_;
  std::vector<std::string> bytes_;                            // per id: raw bytes the token stands for
  std::unordered_map<std::string, int> byte_ids_;             // raw bytes -> id of normal tokens, for ignore_merges
  BpeMerges merges_;
  int byte_token_[256];                                       // id of the token for each single byte, -1 when missing
  SpecialTokenMatcher specials_;
  std::vector<bool> end_of_generation_;
  BpePreTokenizer pre_;
  int bos_id_, eos_id_, unk_id_;
  bool add_bos_;
  bool ignore_merges_;

  // Prompts repeat words, so BPE results are kept per word; encode is const and may run on several threads.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int>> cache_;
};

// Token texts that end a turn in common chat formats; both tokenizers treat them as end of generation.
bool is_end_of_turn_text(std::string_view token);

}  // namespace kvscope::model
