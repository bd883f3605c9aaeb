#pragma once
// Tokenizer interface. A GGUF file's is kvscope's own (byte-level BPE or SentencePiece-style BPE, as llama.cpp
// reads the file); a Hugging Face folder's is transformers' own, run in the embedded Python
// (tokenizer_transformers.h).
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope::model {

class GgufFile;

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
