#include "core/model/tokenizer_json.h"

#include <cctype>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/common/error.h"
#include "core/model/config.h"
#include "core/model/hf_folder.h"
#include "core/model/nfc_check.h"
#include "core/model/tokenizer_bpe.h"
#include "core/model/tokenizer_spm.h"

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

bool is_true(const nlohmann::json& node, const char* key) {
  return node.is_object() && node.contains(key) && node[key].is_boolean() && node[key].get<bool>();
}

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

// The BOS a TemplateProcessing post-processor puts before a single sequence, if any; also inside a Sequence of
// processors (Llama 3.1/3.2 write Sequence[ByteLevel, TemplateProcessing]).
std::optional<std::string> template_bos(const nlohmann::json& post) {
  if (is_type(post, "Sequence") && post.contains("processors") && post["processors"].is_array()) {
    for (const auto& inner : post["processors"])
      if (auto bos = template_bos(inner)) return bos;
    return std::nullopt;
  }
  if (!is_type(post, "TemplateProcessing") || !post.contains("single") || !post["single"].is_array() ||
      post["single"].empty())
    return std::nullopt;
  const auto& first = post["single"][0];
  if (first.is_object() && first.contains("SpecialToken") && first["SpecialToken"].contains("id"))
    return first["SpecialToken"]["id"].get<std::string>();
  return std::nullopt;
}

// Token texts and TokenType values by id, from model.vocab and added_tokens.
struct TokenList {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
};

void add_token(const TokenizerJsonReader& reader, TokenList& list, const std::string& text, int64_t id,
               TokenType type) {
  if (id < 0 || id >= kMaxVocab)
    reader.fail("model.vocab", "token \"" + text + "\" has id " + std::to_string(id) + " (expected 0.." +
                                   std::to_string(kMaxVocab - 1) + ")");
  if (static_cast<std::size_t>(id) >= list.tokens.size()) {
    list.tokens.resize(id + 1);
    list.types.resize(id + 1, static_cast<int32_t>(TokenType::Unused));  // ids no entry names
  }
  list.tokens[id] = text;
  list.types[id] = static_cast<int32_t>(type);
}

// model.vocab (typed by `vocab_type`, e.g. <0xXX> byte tokens) and added_tokens (special ones Control, others
// UserDefined). Added tokens that strip neighbouring spaces or match only whole words change how text is
// split, which kvscope does not implement, so they are refused.
TokenList read_token_list(const TokenizerJsonReader& reader, const nlohmann::json& json,
                          TokenType (*vocab_type)(const std::string&)) {
  const auto& model = json["model"];
  TokenList list;
  if (!model.contains("vocab") || !model["vocab"].is_object()) reader.fail("model.vocab", "missing or not an object");
  for (const auto& [text, id] : model["vocab"].items()) {
    if (!id.is_number_integer())
      reader.fail("model.vocab", "token \"" + text + "\" has id " + id.dump() + " (expected an integer)");
    add_token(reader, list, text, id.get<int64_t>(), vocab_type(text));
  }
  if (json.contains("added_tokens") && json["added_tokens"].is_array())
    for (const auto& added : json["added_tokens"]) {
      if (!added.is_object() || !added.contains("id") || !added["id"].is_number_integer() ||
          !added.contains("content") || !added["content"].is_string())
        reader.fail("added_tokens", added.dump() + " (expected an object with integer id and string content)");
      for (const char* flag : {"lstrip", "rstrip", "single_word"})
        if (is_true(added, flag))
          reader.fail("added_tokens", added.dump() + ": " + flag + " true is not supported (expected false)");
      add_token(reader, list, added["content"].get<std::string>(), added["id"].get<int64_t>(),
                is_true(added, "special") ? TokenType::Control : TokenType::UserDefined);
    }
  return list;
}

std::vector<std::string> read_merges(const TokenizerJsonReader& reader, const nlohmann::json& model) {
  std::vector<std::string> merges;
  if (model.contains("merges") && model["merges"].is_array())
    for (const auto& merge : model["merges"]) merges.push_back(merge_text(reader, merge));
  return merges;
}

// BOS, EOS and unk named by tokenizer_config.json, and whether BOS is added: tokenizer_config's add_bos_token
// wins; otherwise BOS is added when the post-processor adds it.
struct SpecialTokens {
  int bos_id = -1, eos_id = -1, unk_id = -1;
  bool add_bos = false;
};

SpecialTokens read_special_tokens(const nlohmann::json& json, const nlohmann::json& config,
                                  const std::vector<std::string>& tokens) {
  SpecialTokens out;
  out.bos_id = id_of(tokens, config_token(config, "bos_token"));
  out.eos_id = id_of(tokens, config_token(config, "eos_token"));
  out.unk_id = id_of(tokens, config_token(config, "unk_token"));
  const auto post_bos = template_bos(json.value("post_processor", nlohmann::json()));
  if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean()) {
    out.add_bos = config["add_bos_token"].get<bool>();
  } else if (post_bos) {
    out.add_bos = true;
    out.bos_id = id_of(tokens, post_bos);
  }
  return out;
}

TokenType normal_token(const std::string&) { return TokenType::Normal; }

TokenType normal_or_byte_token(const std::string& text) {
  const bool byte = text.size() == 6 && text.starts_with("<0x") && text[5] == '>' &&
                    std::isxdigit(static_cast<unsigned char>(text[3])) &&
                    std::isxdigit(static_cast<unsigned char>(text[4]));
  return byte ? TokenType::Byte : TokenType::Normal;
}

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581 '▁'

bool is_string_pattern(const nlohmann::json& node, std::string_view text) {
  return node.is_object() && node.contains("String") && node["String"].is_string() &&
         node["String"].get<std::string>() == text;
}

// The decoder of SentencePiece-style files: Sequence[Replace("▁", " "), ByteFallback, Fuse, Strip(" ", 1, 0)],
// Strip optional. Returns whether it strips one leading space, nullopt for any other decoder.
std::optional<bool> metaspace_decoder_strips(const nlohmann::json& decoder) {
  if (!is_type(decoder, "Sequence") || !decoder.contains("decoders") || !decoder["decoders"].is_array())
    return std::nullopt;
  const auto& steps = decoder["decoders"];
  if (steps.size() != 3 && steps.size() != 4) return std::nullopt;
  if (!is_type(steps[0], "Replace") || !is_string_pattern(steps[0].value("pattern", nlohmann::json()), kMetaspace) ||
      steps[0].value("content", std::string()) != " " || !is_type(steps[1], "ByteFallback") ||
      !is_type(steps[2], "Fuse"))
    return std::nullopt;
  if (steps.size() == 3) return false;
  if (!is_type(steps[3], "Strip") || steps[3].value("content", std::string()) != " " ||
      steps[3].value("start", 0) != 1 || steps[3].value("stop", 0) != 0)
    return std::nullopt;
  return true;
}

bool is_replace_space(const nlohmann::json& node) {
  return is_type(node, "Replace") && is_string_pattern(node.value("pattern", nlohmann::json()), " ") &&
         node.value("content", std::string()) == kMetaspace;
}

// How '▁' reaches the text: the legacy normalizer Sequence[Prepend("▁")?, Replace(" ", "▁")] with no
// pre-tokenizer, or no normalizer and a Metaspace pre-tokenizer. Sets the vocabulary's prefix and split rules
// and returns a description.
std::string read_metaspace_rules(const TokenizerJsonReader& reader, const nlohmann::json& json, SpmVocab& vocab) {
  const auto normalizer = json.value("normalizer", nlohmann::json());
  const auto pre = json.value("pre_tokenizer", nlohmann::json());
  if (!normalizer.is_null()) {
    const auto steps = is_type(normalizer, "Sequence") ? normalizer.value("normalizers", nlohmann::json::array())
                                                       : nlohmann::json::array({normalizer});
    const bool prepend = steps.size() == 2 && is_type(steps[0], "Prepend") &&
                         steps[0].value("prepend", std::string()) == kMetaspace && is_replace_space(steps[1]);
    const bool replace_only = steps.size() == 1 && is_replace_space(steps[0]);
    if (!prepend && !replace_only)
      reader.fail("normalizer", normalizer.dump().substr(0, 200) +
                                    " is not supported (expected Sequence[Prepend(\"▁\"), Replace(\" \", \"▁\")], "
                                    "Replace(\" \", \"▁\") or null)");
    if (!pre.is_null())
      reader.fail("pre_tokenizer",
                  pre.dump().substr(0, 200) + " is not supported after a Replace normalizer (expected null)");
    vocab.space_prefix = prepend ? SpacePrefix::EveryPiece : SpacePrefix::None;
    return prepend ? "Prepend/Replace normalizer" : "Replace normalizer";
  }
  if (!is_type(pre, "Metaspace") || pre.value("replacement", std::string()) != kMetaspace)
    reader.fail("pre_tokenizer", pre.dump().substr(0, 200) +
                                     " is not supported with this decoder (expected Metaspace with replacement "
                                     "\"▁\", or a Prepend/Replace normalizer)");
  // Older files spell prepend_scheme as add_prefix_space (true = "always").
  const std::string scheme = pre.contains("prepend_scheme")
                                 ? pre.value("prepend_scheme", std::string())
                                 : (pre.value("add_prefix_space", true) ? "always" : "never");
  if (scheme == "always") {
    vocab.space_prefix = SpacePrefix::EveryPieceUnlessSpace;
  } else if (scheme == "first") {
    vocab.space_prefix = SpacePrefix::FirstPieceUnlessSpace;
  } else if (scheme == "never") {
    vocab.space_prefix = SpacePrefix::None;
  } else {
    reader.fail("pre_tokenizer.prepend_scheme", "\"" + scheme + "\" (expected \"first\", \"always\" or \"never\")");
  }
  vocab.split_at_spaces = !pre.contains("split") || is_true(pre, "split");
  return "Metaspace prepend_scheme " + scheme + (vocab.split_at_spaces ? ", split" : "");
}

// Llama 2 / Mistral tokenizer.json: a BPE with ranked merges over characters, byte fallback and '▁' for spaces.
LoadedTokenizer load_metaspace_bpe(const TokenizerJsonReader& reader, const nlohmann::json& json,
                                   const nlohmann::json& config, bool strip_leading_space) {
  const auto& model = json["model"];
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(affix) && !model[affix].is_null() && model[affix] != "")
      reader.fail(std::string("model.") + affix, model[affix].dump() + " is not supported (expected null)");
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"] != 0)
    reader.fail("model.dropout", model["dropout"].dump() + " is not supported (expected null)");
  if (is_true(model, "ignore_merges"))
    reader.fail("model.ignore_merges", "true is not supported here (expected false)");
  if (json.contains("added_tokens") && json["added_tokens"].is_array())
    for (const auto& added : json["added_tokens"])
      if (is_true(added, "normalized"))
        reader.fail("added_tokens", added.dump() + ": normalized true is not supported (expected false)");

  SpmVocab vocab;
  const std::string rules = read_metaspace_rules(reader, json, vocab);
  TokenList list = read_token_list(reader, json, normal_or_byte_token);
  const SpecialTokens specials = read_special_tokens(json, config, list.tokens);
  vocab.merges = read_merges(reader, model);
  vocab.tokens = std::move(list.tokens);
  vocab.token_types = std::move(list.types);
  vocab.bos_id = specials.bos_id;
  vocab.eos_id = specials.eos_id;
  vocab.add_bos = specials.add_bos;
  // The model's own unk_token is what the reference falls back to; tokenizer_config's only names it.
  vocab.unk_id = model.contains("unk_token") && model["unk_token"].is_string()
                     ? id_of(vocab.tokens, model["unk_token"].get<std::string>())
                     : -1;
  if (model.contains("unk_token") && model["unk_token"].is_string() && vocab.unk_id < 0)
    reader.fail("model.unk_token", model["unk_token"].dump() + " is not in the vocabulary");
  vocab.byte_fallback = is_true(model, "byte_fallback");
  vocab.fuse_unk = is_true(model, "fuse_unk");
  vocab.strip_leading_space = strip_leading_space;
  LoadedTokenizer loaded;
  try {
    loaded.tokenizer = std::make_unique<SpmTokenizer>(std::move(vocab));
  } catch (const Error& e) {
    throw Error(reader.file().string() + ": " + e.what());
  }
  loaded.description =
      "tokenizer.json SentencePiece-style BPE (" + rules + (is_true(model, "byte_fallback") ? ", byte fallback)" : ")");
  return loaded;
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

namespace {
LoadedTokenizer read_tokenizer_json(const std::filesystem::path& dir);
}  // namespace

LoadedTokenizer load_tokenizer_json(const std::filesystem::path& dir) {
  try {
    return read_tokenizer_json(dir);
  } catch (const nlohmann::json::exception& e) {
    // A field of another type than the reader expects (a damaged or hand-edited file): name the files.
    throw Error((dir / "tokenizer.json").string() + " (or tokenizer_config.json): a field has an unexpected type or "
                "value (" + e.what() + ")");
  }
}

namespace {
LoadedTokenizer read_tokenizer_json(const std::filesystem::path& dir) {
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
  // The decoder tells the two families apart: byte-level BPE (GPT-2, Llama 3, Qwen2) or SentencePiece-style.
  const auto decoder = json.value("decoder", nlohmann::json());
  if (const auto strips = metaspace_decoder_strips(decoder)) return load_metaspace_bpe(reader, json, config, *strips);
  if (!is_type(decoder, "ByteLevel"))
    reader.fail("decoder", decoder.dump().substr(0, 200) +
                               " is not supported (expected ByteLevel, or Sequence[Replace(\"▁\", \" \"), "
                               "ByteFallback, Fuse, Strip])");
  if (is_true(model, "byte_fallback"))
    reader.fail("model.byte_fallback", "true with a ByteLevel decoder is not supported (expected false)");
  const bool nfc = json.contains("normalizer") && is_type(json["normalizer"], "NFC");
  if (json.contains("normalizer") && !json["normalizer"].is_null() && !nfc)
    reader.fail("normalizer", json["normalizer"].dump().substr(0, 200) + " is not supported (expected null or NFC)");
  const auto [pre, pre_name] = read_pre_tokenizer(reader, json.value("pre_tokenizer", nlohmann::json()));

  TokenList list = read_token_list(reader, json, normal_token);
  const SpecialTokens specials = read_special_tokens(json, config, list.tokens);
  BpeVocab vocab;
  vocab.merges = read_merges(reader, model);
  vocab.tokens = std::move(list.tokens);
  vocab.token_types = std::move(list.types);
  vocab.ignore_merges = is_true(model, "ignore_merges");
  vocab.bos_id = specials.bos_id;
  vocab.eos_id = specials.eos_id;
  vocab.unk_id = specials.unk_id;
  vocab.add_bos = specials.add_bos;
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

}  // namespace

}  // namespace kvscope::model
