#pragma once
// Tokenizer interface; the concrete ones are byte-level BPE (GPT-2 style) and SentencePiece-style BPE.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope::model {

class GgufFile;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Text to ids. Special-token strings (e.g. "<|im_start|>") in the text map to their ids when
  // parse_special is true, as the reference tokenizers do for chat templates.
  virtual std::vector<int> encode(std::string_view text, bool parse_special = true) const = 0;
  // Ids to text; bytes that do not form valid UTF-8 are emitted as the reference tokenizer does.
  virtual std::string decode(const std::vector<int>& ids) const = 0;
  // The text of one token as it would appear when decoded on its own.
  virtual std::string token_text(int id) const = 0;
  virtual int vocab_size() const = 0;
  virtual int bos_id() const = 0;  // -1 when the model has none
  virtual int eos_id() const = 0;
  virtual bool add_bos() const = 0;  // whether encode of a prompt should prepend BOS
  virtual bool is_end_of_generation(int id) const = 0;  // eos, <|im_end|>, <|endoftext|> ...
};

// Builds the tokenizer the GGUF metadata describes (tokenizer.ggml.model = gpt2 | llama).
std::unique_ptr<Tokenizer> load_tokenizer(const GgufFile& file);

}  // namespace kvscope::model
