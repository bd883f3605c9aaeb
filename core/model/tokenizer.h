#pragma once
// Tokenizer interface. A GGUF file's is kvscope's own (byte-level BPE or SentencePiece-style BPE, as llama.cpp
// reads the file); a Hugging Face folder's is transformers' own, run in the embedded Python
// (tokenizer_transformers.h).
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope::model {

class GgufFile;

// The bytes of an encoded text that one token stands for, [begin, end). Empty (begin == end) for a token that
// stands for none of them: one the tokenizer adds (BOS), or one whose bytes cannot be told apart.
struct TokenBytes {
  std::size_t begin = 0, end = 0;
};
// Ids with each token's bytes of the text (same length): what lets a stretch of text be found among a
// prompt's tokens (issue 35's evidence spans) without guessing from decoded pieces.
struct Encoding {
  std::vector<int> ids;
  std::vector<TokenBytes> bytes;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Text to ids, nothing added around it (a rendered chat template carries its own BOS). Special-token strings
  // (e.g. "<|im_start|>") in the text map to their ids when parse_special is true, as the reference tokenizers
  // do by default; false reads them as plain text (transformers' split_special_tokens).
  virtual std::vector<int> encode(std::string_view text, bool parse_special = true) const = 0;
  // A plain prompt's ids: the text with whatever the tokenizer adds around one sequence (BOS for most models;
  // for a Hugging Face folder, what its post-processor and tokenizer_config.json say).
  virtual std::vector<int> encode_prompt(std::string_view text, bool parse_special = true) const {
    std::vector<int> ids;
    if (add_bos() && bos_id() >= 0) ids.push_back(bos_id());
    const std::vector<int> body = encode(text, parse_special);
    ids.insert(ids.end(), body.begin(), body.end());
    return ids;
  }
  // encode and encode_prompt with each token's bytes of `text`; the ids are the same as theirs. Exact per kind:
  // byte-level BPE walks each token's raw bytes over the text, SentencePiece-style BPE maps its escaped text
  // ('▁' for spaces, the space prefix) back to the input, and a Hugging Face folder asks transformers for its
  // offsets mapping. A token that straddles a stretch holds bytes of it (a UTF-8 character split over byte
  // tokens: each of them holds the whole character).
  virtual Encoding encode_with_bytes(std::string_view text, bool parse_special = true) const = 0;
  virtual Encoding encode_prompt_with_bytes(std::string_view text, bool parse_special = true) const {
    Encoding out;
    if (add_bos() && bos_id() >= 0) {
      out.ids.push_back(bos_id());
      out.bytes.push_back({});
    }
    Encoding body = encode_with_bytes(text, parse_special);
    out.ids.insert(out.ids.end(), body.ids.begin(), body.ids.end());
    out.bytes.insert(out.bytes.end(), body.bytes.begin(), body.bytes.end());
    return out;
  }
  // Ids to text; bytes that do not form valid UTF-8 are emitted as the reference tokenizer does.
  virtual std::string decode(const std::vector<int>& ids) const = 0;
  // The text of one token as it would appear when decoded on its own.
  virtual std::string token_text(int id) const = 0;
  virtual int vocab_size() const = 0;
  virtual int bos_id() const = 0;  // -1 when the model has none
  virtual int eos_id() const = 0;
  virtual bool add_bos() const = 0;  // whether encode_prompt prepends BOS
  virtual bool is_end_of_generation(int id) const = 0;  // eos, <|im_end|>, <|endoftext|> ...
};

// Builds the tokenizer the GGUF metadata describes (tokenizer.ggml.model = gpt2 | llama).
std::unique_ptr<Tokenizer> load_tokenizer(const GgufFile& file);

}  // namespace kvscope::model
