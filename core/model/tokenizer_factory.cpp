#include "core/common/error.h"
#include "core/model/gguf.h"
#include "core/model/tokenizer.h"
#include "core/model/tokenizer_bpe.h"
#include "core/model/tokenizer_spm.h"

namespace kvscope::model {

namespace {

std::vector<int32_t> read_token_types(const GgufFile& file) {
  if (!file.has("tokenizer.ggml.token_type")) return {};
  std::vector<int32_t> out;
  for (int64_t t : file.get_int_array("tokenizer.ggml.token_type")) out.push_back(static_cast<int32_t>(t));
  return out;
}

int read_id(const GgufFile& file, const std::string& key) { return static_cast<int>(file.get_int(key, -1)); }

std::string where(const GgufFile& file, const std::string& key) {
  return file.path().string() + ": metadata '" + key + "'";
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const GgufFile& file) {
  const std::string model = file.get_string("tokenizer.ggml.model");
  if (model == "gpt2") {
    const std::string pre_name = file.get_string("tokenizer.ggml.pre", "default");
    const auto pre = bpe_pre_tokenizer_from_name(pre_name);
    if (!pre)
      throw Error(where(file, "tokenizer.ggml.pre") + ": \"" + pre_name +
                  "\" is not a supported pre-tokenizer (expected default, gpt2, smollm, llama-bpe, llama3, qwen2)");
    BpeVocab vocab;
    vocab.tokens = file.get_string_array("tokenizer.ggml.tokens");
    vocab.token_types = read_token_types(file);
    if (file.has("tokenizer.ggml.merges")) vocab.merges = file.get_string_array("tokenizer.ggml.merges");
    vocab.bos_id = read_id(file, "tokenizer.ggml.bos_token_id");
    vocab.eos_id = read_id(file, "tokenizer.ggml.eos_token_id");
    vocab.unk_id = read_id(file, "tokenizer.ggml.unknown_token_id");
    // The reference's GPT-2 tokenizer adds no BOS unless the file asks for it.
    vocab.add_bos = file.get_bool("tokenizer.ggml.add_bos_token", false);
    vocab.ignore_merges = *pre == BpePreTokenizer::Llama3;
    try {
      return std::make_unique<BpeTokenizer>(std::move(vocab), *pre);
    } catch (const Error& e) {
      throw Error(file.path().string() + ": " + e.what());
    }
  }
  if (model == "llama") {
    SpmVocab vocab;
    vocab.tokens = file.get_string_array("tokenizer.ggml.tokens");
    if (file.has("tokenizer.ggml.scores")) vocab.scores = file.get_float_array("tokenizer.ggml.scores");
    vocab.token_types = read_token_types(file);
    vocab.bos_id = read_id(file, "tokenizer.ggml.bos_token_id");
    vocab.eos_id = read_id(file, "tokenizer.ggml.eos_token_id");
    vocab.unk_id = read_id(file, "tokenizer.ggml.unknown_token_id");
    // Older files lack both flags; llama.cpp and the reference then add BOS and the space prefix.
    vocab.add_bos = file.get_bool("tokenizer.ggml.add_bos_token", true);
    const bool add_space_prefix = file.get_bool("tokenizer.ggml.add_space_prefix", true);
    vocab.space_prefix = add_space_prefix ? SpacePrefix::EveryPiece : SpacePrefix::None;
    vocab.strip_leading_space = add_space_prefix;
    try {
      return std::make_unique<SpmTokenizer>(std::move(vocab));
    } catch (const Error& e) {
      throw Error(file.path().string() + ": " + e.what());
    }
  }
  throw Error(where(file, "tokenizer.ggml.model") + ": \"" + model +
              "\" is not a supported tokenizer (expected \"gpt2\" or \"llama\")");
}

}  // namespace kvscope::model
