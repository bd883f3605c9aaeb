#include "core/model/model.h"

#include <cstdlib>
#include <system_error>
#include <vector>

#include "core/common/error.h"
#include "core/common/project_paths.h"
#include "core/common/sha256.h"
#include "core/model/tokenizer_transformers.h"

namespace kvscope::model {
namespace {

bool is_file(const std::filesystem::path& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

bool is_model(const std::filesystem::path& path) { return is_file(path) || is_hf_folder(path); }

}  // namespace

Model::Model(std::variant<GgufFile, HfFolder> files_in, ModelConfig config_in, ModelWeights weights_in,
             std::unique_ptr<Tokenizer> tokenizer_in, std::string tokenizer_description_in)
    : files(std::move(files_in)),
      config(std::move(config_in)),
      weights(std::move(weights_in)),
      tokenizer(std::move(tokenizer_in)),
      tokenizer_description(std::move(tokenizer_description_in)) {}

const std::filesystem::path& Model::path() const { return gguf() ? gguf()->path() : hf_folder()->dir(); }

const std::string& Model::sha256() const {
  std::call_once(hash_cache_->once, [&] {
    if (gguf()) {
      hash_cache_->hex = file_sha256(gguf()->path());
      return;
    }
    std::string listing;
    for (const auto& file : hf_folder()->defining_files())
      listing += file_sha256(file) + "  " + file.filename().string() + "\n";
    hash_cache_->hex = sha256_hex(listing);
  });
  return hash_cache_->hex;
}

const char* format_name(ModelFormat format) { return format == ModelFormat::Gguf ? "gguf" : "huggingface"; }

namespace {

ModelText text_of_folder(const std::filesystem::path& dir) {
  LoadedTokenizer loaded = load_transformers_tokenizer(dir);
  ChatTemplateChoice chat = choose_chat_template(read_chat_template(dir), *loaded.tokenizer);
  return {std::move(loaded.tokenizer), std::move(loaded.description), std::move(chat)};
}

ModelText text_of(const GgufFile& file) {
  std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(file);
  const std::string kind = file.get_string("tokenizer.ggml.model", "unknown");
  const std::string pre = file.get_string("tokenizer.ggml.pre", "");
  ChatTemplateChoice chat = choose_chat_template(read_chat_template(file), *tokenizer);
  return {std::move(tokenizer), kind + (pre.empty() ? "" : " (pre-tokenizer " + pre + ")"), std::move(chat)};
}

void check_is_model_path(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error(path.string() + ": folder has no config.json (expected a GGUF file or a Hugging Face model folder)");
}

}  // namespace

ModelText load_model_text(const std::filesystem::path& path) {
  // A folder with a tokenizer and no weights (config.json) is enough here.
  std::error_code ec;
  if (is_hf_folder(path) || std::filesystem::is_regular_file(path / "tokenizer.json", ec)) return text_of_folder(path);
  check_is_model_path(path);
  return text_of(GgufFile::open(path));
}

Model load_model(const std::filesystem::path& path) {
  if (is_hf_folder(path)) {
    HfFolder folder = HfFolder::open(path);
    ModelConfig config = read_config(folder);
    ModelWeights weights = bind_weights(folder, config);
    ModelText text = text_of_folder(path);
    Model model(std::move(folder), std::move(config), std::move(weights), std::move(text.tokenizer),
                std::move(text.tokenizer_description));
    model.chat_template = std::move(text.chat_template);
    return model;
  }
  check_is_model_path(path);
  GgufFile file = GgufFile::open(path);
  ModelConfig config = read_config(file);
  ModelWeights weights = bind_weights(file, config);
  ModelText text = text_of(file);
  Model model(std::move(file), std::move(config), std::move(weights), std::move(text.tokenizer),
              std::move(text.tokenizer_description));
  model.chat_template = std::move(text.chat_template);
  return model;
}

std::filesystem::path default_model_path() {
  if (const char* env = std::getenv("KVSCOPE_MODEL"); env && *env) {
    if (!is_model(env))
      throw Error(std::string(env) + ": KVSCOPE_MODEL names no model (expected a GGUF file or a Hugging Face folder)");
    return env;
  }
  const auto candidates = project_path_candidates(std::filesystem::path(".deps") / "models" / kDefaultModelFile);
  for (const auto& candidate : candidates)
    if (is_file(candidate)) return candidate;
  throw Error(candidates.front().string() +
              ": default model not found; run `make` to fetch it (scripts/fetch_model.sh) or pass --model PATH");
}

std::filesystem::path resolve_model_path(const std::string& explicit_path) {
  return explicit_path.empty() ? default_model_path() : std::filesystem::path(explicit_path);
}

}  // namespace kvscope::model
