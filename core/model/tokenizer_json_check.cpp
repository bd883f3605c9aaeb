#include "core/model/tokenizer_json_check.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_set>

#include "core/common/error.h"
#include "core/common/file_text.h"
#include "core/common/json_text.h"

namespace kvscope::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A token or key as it reads in a message: quoted, at most 40 characters, bytes that are not UTF-8 replaced.
std::string quoted(const std::string& text) {
  const std::string cut = text.size() > 40 ? text.substr(0, 40) : text;
  return json(cut).dump(-1, ' ', false, json::error_handler_t::replace) + (text.size() > 40 ? "..." : "");
}

std::string shown(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  return text.size() > 60 ? text.substr(0, 60) + "..." : text;
}

// config.json's vocab_size (or its text_config's, for a multimodal model); nothing when the folder has no usable
// config.json (a tokenizer-only folder, or a damaged config that the model loader reports on its own).
std::optional<int64_t> declared_vocab_size(const fs::path& dir) {
  const auto text = read_file_text(dir / "config.json");
  if (!text || text->size() > kMaxTokenizerConfigBytes) return std::nullopt;
  json config;
  try {
    config = parse_json_text(*text, (dir / "config.json").string());
  } catch (const Error&) {
    return std::nullopt;
  }
  for (const json* node : {&config, config.is_object() && config.contains("text_config") ? &config["text_config"]
                                                                                          : nullptr}) {
    if (!node || !node->is_object() || !node->contains("vocab_size")) continue;
    const json& size = (*node)["vocab_size"];
    if (size.is_number_unsigned() && size.get<uint64_t>() > 0 && size.get<uint64_t>() < uint64_t(kMaxTokenId))
      return size.get<int64_t>();
  }
  return std::nullopt;
}

class TokenizerJsonCheck {
 public:
  TokenizerJsonCheck(fs::path file, std::optional<int64_t> vocab_size) : file_(std::move(file)) {
    if (vocab_size) {
      id_limit_ = std::min(*vocab_size + kAddedTokenExcess, kMaxTokenId);
      limit_text_ = "config.json's vocab_size " + std::to_string(*vocab_size) + " + " +
                    std::to_string(kAddedTokenExcess) + " for added tokens";
    } else {
      id_limit_ = kMaxTokenId;
      limit_text_ = "kvscope's bound on token ids";
    }
  }

  void run(const json& root) {
    if (!root.is_object()) fail("", "the file is " + shown(root) + ", not a JSON object");
    if (root.contains("model") && root["model"].is_object()) check_model(root["model"]);
    if (root.contains("added_tokens")) check_added_tokens(root["added_tokens"]);
    if (root.contains("post_processor")) check_post_processor(root["post_processor"], "post_processor");
  }

 private:
  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw Error(file_.string() + ": " + (field.empty() ? "" : "field '" + field + "': ") + what);
  }

  void check_id(const json& id, const std::string& field) const {
    const bool in_range = id.is_number_unsigned() && id.get<uint64_t>() < static_cast<uint64_t>(id_limit_);
    if (!in_range)
      fail(field, "token id " + shown(id) + " is not a token id of this model (expected an integer 0 <= id < " +
                      std::to_string(id_limit_) + ": " + limit_text_ + ")");
  }

  void check_count(std::size_t n, int64_t limit, const std::string& field, const std::string& what) const {
    if (static_cast<uint64_t>(n) > static_cast<uint64_t>(limit))
      fail(field, std::to_string(n) + " " + what + " exceed kvscope's bound of " + std::to_string(limit));
  }

  void check_model(const json& model) {
    const std::string type = model.contains("type") && model["type"].is_string() ? model["type"].get<std::string>() : "";
    if (model.contains("vocab")) {
      const json& vocab = model["vocab"];
      if (vocab.is_object()) {  // BPE, WordPiece, WordLevel: token -> id
        check_count(vocab.size(), id_limit_, "model.vocab", "vocabulary entries");
        for (const auto& [token, id] : vocab.items()) check_id(id, "model.vocab entry " + quoted(token));
      } else if (vocab.is_array()) {  // Unigram: [piece, score] at each id
        check_count(vocab.size(), id_limit_, "model.vocab", "vocabulary entries");
      }
    }
    if (model.contains("merges") && (type.empty() || type == "BPE")) check_merges(model);
  }

  // tokenizers refuses a merge of tokens outside the vocabulary too; refusing it here names the entry.
  void check_merges(const json& model) {
    const json& merges = model["merges"];
    if (!merges.is_array()) return;  // tokenizers names a merges field of the wrong type itself
    check_count(merges.size(), kMaxTokenId, "model.merges", "merges");
    const json* vocab = model.contains("vocab") && model["vocab"].is_object() ? &model["vocab"] : nullptr;
    for (std::size_t rank = 0; rank < merges.size(); ++rank) {
      const json& merge = merges[rank];
      const std::string field = "model.merges[" + std::to_string(rank) + "]";
      std::string left, right;
      if (merge.is_string()) {
        const std::string text = merge.get<std::string>();
        const auto space = text.find(' ');
        if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos)
          fail(field, shown(merge) + " is not a merge (expected two tokens separated by one space)");
        left = text.substr(0, space), right = text.substr(space + 1);
      } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
        left = merge[0].get<std::string>(), right = merge[1].get<std::string>();
      } else {
        fail(field, shown(merge) + " is not a merge (expected \"a b\" or [\"a\", \"b\"])");
      }
      if (!vocab) continue;
      for (const std::string* part : {&left, &right})
        if (!vocab->contains(*part))
          fail(field, "merges token " + quoted(*part) + ", which is not in model.vocab");
    }
  }

  void check_added_tokens(const json& added) {
    if (!added.is_array()) return;
    check_count(added.size(), kMaxAddedTokens, "added_tokens", "added tokens");
    for (std::size_t i = 0; i < added.size(); ++i)
      if (added[i].is_object() && added[i].contains("id"))
        check_id(added[i]["id"], "added_tokens[" + std::to_string(i) + "].id");
  }

  // TemplateProcessing's special_tokens.*.ids, BertProcessing's and RobertaProcessing's [token, id] pairs, in a
  // Sequence's processors as well.
  void check_post_processor(const json& node, const std::string& field) {
    if (node.is_array()) {
      for (std::size_t i = 0; i < node.size(); ++i) check_post_processor(node[i], field + "[" + std::to_string(i) + "]");
      return;
    }
    if (!node.is_object()) return;
    for (const auto& [key, value] : node.items()) {
      const std::string at = field + "." + key;
      if (key == "ids" && value.is_array()) {
        check_count(value.size(), kMaxAddedTokens, at, "ids");
        for (std::size_t i = 0; i < value.size(); ++i) check_id(value[i], at + "[" + std::to_string(i) + "]");
      } else if ((key == "sep" || key == "cls") && value.is_array() && value.size() == 2) {
        check_id(value[1], at + "[1]");
      } else {
        check_post_processor(value, at);
      }
    }
  }

  fs::path file_;
  int64_t id_limit_;
  std::string limit_text_;
};

std::string read_bounded(const fs::path& file, uint64_t limit) {
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  if (ec) throw Error(file.string() + ": cannot be read (" + ec.message() + ")");
  if (size > limit)
    throw Error(file.string() + ": " + std::to_string(size) + " bytes exceed kvscope's bound of " +
                std::to_string(limit) + " bytes for this file (docs/models.md, tokenizer bounds)");
  const auto text = read_file_text(file);
  if (!text) throw Error(file.string() + ": cannot be read");
  return *text;
}

}  // namespace

void check_tokenizer_files(const fs::path& dir) {
  const auto tokenizer_json = dir / "tokenizer.json";
  std::error_code ec;
  if (!fs::is_regular_file(tokenizer_json, ec))
    throw Error(tokenizer_json.string() + ": missing (expected the folder's tokenizer, as transformers saves it)");
  const json root = parse_json_text(read_bounded(tokenizer_json, kMaxTokenizerJsonBytes), tokenizer_json.string());
  TokenizerJsonCheck(tokenizer_json, declared_vocab_size(dir)).run(root);
  const auto config = dir / "tokenizer_config.json";
  if (fs::is_regular_file(config, ec))
    check_json_text(read_bounded(config, kMaxTokenizerConfigBytes), config.string());
}

}  // namespace kvscope::model
