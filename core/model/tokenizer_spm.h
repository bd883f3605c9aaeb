#pragma once
// SentencePiece-style BPE: spaces written as U+2581 ('▁'), an optional leading '▁', and <0xXX> byte tokens for
// characters outside the vocabulary. Two sources describe it: Llama-2 GGUF files (merges chosen by piece score,
// as sentencepiece does) and the tokenizer.json of Llama 2 / Mistral folders (a BPE model with ranked `merges`,
// `byte_fallback`, and a Prepend/Replace normalizer or a Metaspace pre-tokenizer).
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/model/tokenizer.h"
#include "core/model/tokenizer_bpe.h"

namespace kvscope::model {

// Where the word-start marker '▁' is put before text, before spaces become '▁'.
enum class SpacePrefix {
  None,                   // Metaspace prepend_scheme "never"; GGUF add_space_prefix false
  EveryPiece,             // GGUF add_space_prefix; tokenizer.json Prepend("▁") normalizer: before every run of
                          // text between special tokens, even one that starts with a space
  EveryPieceUnlessSpace,  // Metaspace "always": as EveryPiece, but not before text that starts with a space
  FirstPieceUnlessSpace,  // Metaspace "first": only before text at the very start of the input (not after a
                          // special token), and not when it starts with a space
};

struct SpmVocab {
  std::vector<std::string> tokens;   // pieces, with '▁' for spaces; byte tokens spelled "<0xXX>"
  std::vector<float> scores;         // higher merges first; empty means all 0
  std::vector<int32_t> token_types;  // TokenType values; empty means Normal, or Byte for "<0xXX>" spellings
  int bos_id = -1;
  int eos_id = -1;
  int unk_id = -1;
  bool add_bos = true;
  SpacePrefix space_prefix = SpacePrefix::EveryPiece;
  // tokenizer.json's ranked merges ("left right", best first). When given they choose the merges, as the
  // reference's BPE model does, instead of piece scores.
  std::vector<std::string> merges;
  bool split_at_spaces = false;     // Metaspace split: each '▁' starts a word that BPE sees on its own
  bool byte_fallback = true;        // characters outside the vocabulary as <0xXX> tokens (else unk)
  bool fuse_unk = false;            // consecutive unknown characters give one unk (tokenizer.json fuse_unk)
  bool strip_leading_space = true;  // decode drops one leading space (tokenizer.json's Strip decoder)
};

class SpmTokenizer final : public Tokenizer {
 public:
  // Throws Error when the vocabulary is empty, the arrays disagree in length, or special ids are out of range.
  explicit SpmTokenizer(SpmVocab vocab);

  std::vector<int> encode(std::string_view text, bool parse_special = true) const override;
  // The escaped text's tokens mapped back to the input: a '▁' for a space stands for that space, the space
  // prefix for nothing, an unknown token for its character (a fused run of them, with fuse_unk).
  Encoding encode_with_bytes(std::string_view text, bool parse_special = true) const override;
  // As the reference's Llama decoder (Replace '▁' -> ' ', ByteFallback, Fuse, Strip): runs of byte tokens
  // joined (a run that is not valid UTF-8 gives one U+FFFD per byte), and one leading space removed when
  // strip_leading_space.
  std::string decode(const std::vector<int>& ids) const override;
  // The piece with '▁' as a space and its leading space kept, so labels show word starts; a byte token
  // that is not ASCII on its own shows as U+FFFD.
  std::string token_text(int id) const override;
  int vocab_size() const override { return static_cast<int>(tokens_.size()); }
  int bos_id() const override { return bos_id_; }
  int eos_id() const override { return eos_id_; }
  bool add_bos() const override { return add_bos_; }
  bool is_end_of_generation(int id) const override;

 private:
  // One run of text between special tokens escaped ('▁' for spaces, the space prefix); `starts` (when given)
  // gets, per escaped byte and one past the end, the byte of `piece` it came from.
  std::string escape_piece(std::string_view piece, bool at_start, std::vector<size_t>* starts) const;
  std::vector<int> encode_escaped(const std::string& escaped) const;
  // Bytes of `escaped` that token `id` covers from `at` (an unknown token: its character, or a fused run).
  size_t escaped_length(int id, std::string_view escaped, size_t at) const;
  void encode_text(std::string_view text, std::vector<int>& out) const;
  void encode_by_score(std::string_view text, std::vector<int>& out) const;
  void encode_by_rank(std::string_view text, std::vector<int>& out) const;
  // Appends the tokens of one character outside the vocabulary: its bytes' tokens, else unk (or nothing).
  void append_unknown(std::string_view character, std::vector<int>& out) const;

  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<int> byte_value_;  // per id: the byte a <0xXX> token stands for, or -1
  // Pieces merges may produce: normal and user-defined ones. As in sentencepiece, control, unknown, unused
  // and byte pieces are never formed from text.
  std::unordered_map<std::string, int> piece_ids_;
  BpeMerges merges_;
  int byte_token_[256];
  SpecialTokenMatcher specials_;
  std::vector<bool> end_of_generation_;
  int bos_id_, eos_id_, unk_id_;
  bool add_bos_;
  SpacePrefix space_prefix_;
  bool split_at_spaces_, byte_fallback_, fuse_unk_, strip_leading_space_;
};

}  // namespace kvscope::model
