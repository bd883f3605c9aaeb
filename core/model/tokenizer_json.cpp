#include "core/model/tokenizer_json.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/common/error.h"
#include "core/model/config.h"
#include "core/model/hf_folder.h"
#include "core/model/nfc_check.h"
#include "core/model/tokenizer_bpe.h"

namespace kvscope::model {
namespace {

// The split patterns of the families' tokenizer.json files, exactly as they spell them.
constexpr const char* kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

class TokenizerJsonReader {
 public:
  explicit TokenizerJsonReader(std::filesystem::path file) : file_(std::move(file)) {}
  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw Error(file_.string() + ": field '" + field + "': " + what);
  }
  const std::filesystem::path& file() const { return file_; }

 private:
  std::filesystem::path file_;
};

bool is_type(const nlohmann::json& node, const char* type) {
  return node.is_object() && node.value("type", std::string()) == type;
}

// ByteLevel as a pre-tokenizer: `with_regex` says whether it applies the GPT-2 split itself.
bool is_byte_level(const nlohmann::json& node, bool with_regex) {
  return is_type(node, "ByteLevel") && !node.value("add_prefix_space", false) &&
         node.value("use_regex", true) == with_regex;
}

std::pair<BpePreTokenizer, std::string> read_pre_tokenizer(const TokenizerJsonReader& reader,
                                                           const nlohmann::json& pre) {
  if (is_byte_level(pre, true)) return {BpePreTokenizer::Gpt2, "gpt2"};
  if (is_type(pre, "Sequence") && pre.contains("pretokenizers") && pre["pretokenizers"].is_array() &&
      pre["pretokenizers"].size() == 2) {
    const auto& first = pre["pretokenizers"][0];
    const auto& second = pre["pretokenizers"][1];
    if (is_type(first, "Digits") && first.value("individual_digits", false) && is_byte_level(second, true))
      return {BpePreTokenizer::SmolLM, "smollm"};
    if (is_type(first, "Split") && first.value("behavior", std::string()) == "Isolated" &&
        !first.value("invert", false) && first.contains("pattern") && first["pattern"].is_object() &&
        first["pattern"].contains("Regex") && first["pattern"]["Regex"].is_string() && is_byte_level(second, false)) {
      const auto pattern = first["pattern"]["Regex"].get<std::string>();
      if (pattern == kLlama3Pattern) return {BpePreTokenizer::Llama3, "llama3"};
      if (pattern == kQwen2Pattern) return {BpePreTokenizer::Qwen2, "qwen2"};
      reader.fail("pre_tokenizer.pretokenizers[0].pattern",
                  "the split regex " + nlohmann::json(pattern).dump() +
                      " is not one kvscope implements (expected Llama 3's or Qwen2's)");
    }
  }
  reader.fail(
      "pre_tokenizer",
      pre.dump().substr(0, 200) +
          " is not supported (expected ByteLevel, Digits + ByteLevel, or the Llama 3 / Qwen2 Split + ByteLevel)");
}

std::string merge_text(const TokenizerJsonReader& reader, const nlohmann::json& merge) {
  if (merge.is_string()) return merge.get<std::string>();
  if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string())
    return merge[0].get<std::string>() + " " + merge[1].get<std::string>();
  reader.fail("model.merges", merge.dump() + " (expected \"left right\" or [\"left\", \"right\"])");
}

// A token named in tokenizer_config.json: a string, or an object with "content".
std::optional<std::string> config_token(const nlohmann::json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const auto& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

int id_of(const std::vector<std::string>& tokens, const std::optional<std::string>& text) {
  if (!text) return -1;
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] == *text) return static_cast<int>(i);
  return -1;
}

// The BOS a TemplateProcessing post-processor puts before a single sequence, if any.
std::optional<std::string> template_bos(const nlohmann::json& post) {
  if (!is_type(post, "TemplateProcessing") || !post.contains("single") || !post["single"].is_array() ||
      post["single"].empty())
    return std::nullopt;
  const auto& first = post["single"][0];
  if (first.is_object() && first.contains("SpecialToken") && first["SpecialToken"].contains("id"))
    return first["SpecialToken"]["id"].get<std::string>();
  return std::nullopt;
}

void add_token(const TokenizerJsonReader& reader, BpeVocab& vocab, const std::string& text, int64_t id,
               TokenType type) {
  if (id < 0 || id >= kMaxVocab)
    reader.fail("model.vocab", "token \"" + text + "\" has id " + std::to_string(id) + " (expected 0.." +
                                   std::to_string(kMaxVocab - 1) + ")");
  if (static_cast<std::size_t>(id) >= vocab.tokens.size()) {
    vocab.tokens.resize(id + 1);
    vocab.token_types.resize(id + 1, static_cast<int32_t>(TokenType::Unused));  // ids no entry names
  }
  vocab.tokens[id] = text;
  vocab.token_types[id] = static_cast<int32_t>(type);
}

// A tokenizer whose tokenizer.json normalizes to NFC: text that is certainly NFC already is passed through, any
// other text is refused with the position, since kvscope has no NFC implementation to match the reference with.
class NfcCheckedTokenizer final : public Tokenizer {
 public:
  explicit NfcCheckedTokenizer(std::unique_ptr<Tokenizer> inner) : inner_(std::move(inner)) {}
  std::vector<int> encode(std::string_view text, bool parse_special) const override {
    if (const auto pos = first_non_nfc_position(text)) {
      const unicode::Utf8Char ch = unicode::decode_utf8(text, *pos);
      char code[16];
      std::snprintf(code, sizeof code, "U+%04X", static_cast<unsigned>(ch.cp));
      throw Error("text at byte " + std::to_string(*pos) + " (" + code +
                  ") may change under the tokenizer's NFC normalizer, which kvscope does not implement "
                  "(expected text already in NFC, e.g. precomposed accents)");
    }
    return inner_->encode(text, parse_special);
  }
  std::string decode(const std::vector<int>& ids) const override { return inner_->decode(ids); }
  std::string token_text(int id) const override { return inner_->token_text(id); }
  int vocab_size() const override { return inner_->vocab_size(); }
  int bos_id() const override { return inner_->bos_id(); }
  int eos_id() const override { return inner_->eos_id(); }
  bool add_bos() const override { return inner_->add_bos(); }
  bool is_end_of_generation(int id) const override { return inner_->is_end_of_generation(id); }

 private:
  std::unique_ptr<Tokenizer> inner_;
};

}  // namespace

LoadedTokenizer load_tokenizer_json(const std::filesystem::path& dir) {
  const TokenizerJsonReader reader(dir / "tokenizer.json");
  std::error_code ec;
  if (!std::filesystem::is_regular_file(reader.file(), ec))
    throw Error(reader.file().string() + ": missing (expected the folder's tokenizer in tokenizer.json)");
  const nlohmann::json json = read_json_file(reader.file());
  const nlohmann::json config = std::filesystem::is_regular_file(dir / "tokenizer_config.json", ec)
                                    ? read_json_file(dir / "tokenizer_config.json")
                                    : nlohmann::json::object();
  if (!json.is_object() || !json.contains("model") || !json["model"].is_object()) reader.fail("model", "missing");
  const auto& model = json["model"];
  if (model.value("type", std::string()) != "BPE")
    reader.fail("model.type", model.value("type", nlohmann::json()).dump() + " is not supported (expected \"BPE\")");
  if (model.value("byte_fallback", false))
    reader.fail("model.byte_fallback",
                "true (SentencePiece-style byte fallback) is not supported yet (expected byte-level BPE)");
  const bool nfc = json.contains("normalizer") && is_type(json["normalizer"], "NFC");
  if (json.contains("normalizer") && !json["normalizer"].is_null() && !nfc)
    reader.fail("normalizer", json["normalizer"].dump().substr(0, 200) + " is not supported (expected null or NFC)");
  if (!json.contains("decoder") || !is_type(json["decoder"], "ByteLevel"))
    reader.fail("decoder", json.value("decoder", nlohmann::json()).dump().substr(0, 200) +
                               " is not supported (expected ByteLevel)");
  const auto [pre, pre_name] = read_pre_tokenizer(reader, json.value("pre_tokenizer", nlohmann::json()));

  BpeVocab vocab;
  if (!model.contains("vocab") || !model["vocab"].is_object()) reader.fail("model.vocab", "missing or not an object");
  for (const auto& [text, id] : model["vocab"].items()) {
    if (!id.is_number_integer())
      reader.fail("model.vocab", "token \"" + text + "\" has id " + id.dump() + " (expected an integer)");
    add_token(reader, vocab, text, id.get<int64_t>(), TokenType::Normal);
  }
  if (json.contains("added_tokens") && json["added_tokens"].is_array())
    for (const auto& added : json["added_tokens"]) {
      if (!added.is_object() || !added.contains("id") || !added["id"].is_number_integer() ||
          !added.contains("content") || !added["content"].is_string())
        reader.fail("added_tokens", added.dump() + " (expected an object with integer id and string content)");
      add_token(reader, vocab, added["content"].get<std::string>(), added["id"].get<int64_t>(),
                added.value("special", false) ? TokenType::Control : TokenType::UserDefined);
    }
  if (model.contains("merges") && model["merges"].is_array())
    for (const auto& merge : model["merges"]) vocab.merges.push_back(merge_text(reader, merge));
  vocab.ignore_merges = model.value("ignore_merges", false);

  const auto bos_text = config_token(config, "bos_token");
  vocab.bos_id = id_of(vocab.tokens, bos_text);
  vocab.eos_id = id_of(vocab.tokens, config_token(config, "eos_token"));
  vocab.unk_id = id_of(vocab.tokens, config_token(config, "unk_token"));
  // tokenizer_config's add_bos_token wins; otherwise BOS is added when the post-processor adds it.
  const auto post_bos = template_bos(json.value("post_processor", nlohmann::json()));
  if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean()) {
    vocab.add_bos = config["add_bos_token"].get<bool>();
  } else if (post_bos) {
    vocab.add_bos = true;
    vocab.bos_id = id_of(vocab.tokens, post_bos);
  }
  LoadedTokenizer loaded;
  try {
    loaded.tokenizer = std::make_unique<BpeTokenizer>(std::move(vocab), pre);
  } catch (const Error& e) {
    throw Error(reader.file().string() + ": " + e.what());
  }
  loaded.description = "tokenizer.json byte-level BPE (pre-tokenizer " + pre_name + ")";
  if (nfc) {
    loaded.tokenizer = std::make_unique<NfcCheckedTokenizer>(std::move(loaded.tokenizer));
    loaded.description += ", NFC input required";
  }
  return loaded;
}

}  // namespace kvscope::model
