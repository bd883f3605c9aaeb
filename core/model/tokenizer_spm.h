#pragma once
// SentencePiece-style BPE as Llama-2 GGUF files describe it: merges chosen by piece score, spaces written
// as U+2581 ('▁'), an optional leading space, and <0xXX> byte tokens for characters outside the vocabulary.
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/model/tokenizer.h"
#include "core/model/tokenizer_bpe.h"

namespace kvscope::model {

struct SpmVocab {
  std::vector<std::string> tokens;   // pieces, with '▁' for spaces; byte tokens spelled "<0xXX>"
  std::vector<float> scores;         // higher merges first; empty means all 0
  std::vector<int32_t> token_types;  // TokenType values; empty means Normal, or Byte for "<0xXX>" spellings
  int bos_id = -1;
  int eos_id = -1;
  int unk_id = -1;
  bool add_bos = true;
  bool add_space_prefix = true;
};

class SpmTokenizer final : public Tokenizer {
 public:
  // Throws Error when the vocabulary is empty, the arrays disagree in length, or special ids are out of range.
  explicit SpmTokenizer(SpmVocab vocab);

  std::vector<int> encode(std::string_view text, bool parse_special = true) const override;
  // As the reference's Llama decoder: '▁' -> ' ', runs of byte tokens joined (a run that is not valid
  // UTF-8 gives one U+FFFD per byte), and the one leading space that add_space_prefix put there removed.
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
  void encode_text(std::string_view text, std::vector<int>& out) const;

  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<int> byte_value_;  // per id: the byte a <0xXX> token stands for, or -1
  // Pieces merges may produce: normal and user-defined ones. As in sentencepiece, control, unknown, unused
  // and byte pieces are never formed from text.
  std::unordered_map<std::string, int> piece_ids_;
  int byte_token_[256];
  SpecialTokenMatcher specials_;
  std::vector<bool> end_of_generation_;
  int bos_id_, eos_id_, unk_id_;
  bool add_bos_, add_space_prefix_;
};

}  // namespace kvscope::model
