#include "core/model/model.h"

#include <cstdlib>
#include <system_error>
#include <vector>

#include "core/common/error.h"
#include "core/common/sha256.h"

namespace kvscope::model {
namespace {

bool is_file(const std::filesystem::path& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

std::filesystem::path executable_dir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path() : exe.parent_path();
}

}  // namespace

Model::Model(GgufFile file_in, ModelConfig config_in, ModelWeights weights_in, std::unique_ptr<Tokenizer> tokenizer_in)
    : file(std::move(file_in)),
      config(std::move(config_in)),
      weights(std::move(weights_in)),
      tokenizer(std::move(tokenizer_in)) {}

const std::string& Model::sha256() const {
  std::call_once(hash_cache_->once, [&] { hash_cache_->hex = file_sha256(file.path()); });
  return hash_cache_->hex;
}

Model load_model(const std::filesystem::path& path) {
  GgufFile file = GgufFile::open(path);
  ModelConfig config = read_config(file);
  ModelWeights weights = bind_weights(file, config);
  std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(file);
  return Model(std::move(file), std::move(config), std::move(weights), std::move(tokenizer));
}

std::filesystem::path default_model_path() {
  if (const char* env = std::getenv("KVSCOPE_MODEL"); env && *env) {
    if (!is_file(env))
      throw Error(std::string(env) + ": KVSCOPE_MODEL names no model file (expected a GGUF file path)");
    return env;
  }
  const std::filesystem::path relative = std::filesystem::path(".deps") / "models" / kDefaultModelFile;
  std::vector<std::filesystem::path> candidates = {std::filesystem::path(KVSCOPE_SOURCE_DIR) / relative};
  if (const auto dir = executable_dir(); !dir.empty()) {
    candidates.push_back(dir.parent_path() / relative);                // <prefix>/bin/kvscope
    candidates.push_back(dir.parent_path().parent_path() / relative);  // <source>/build/app/kvscope
  }
  for (const auto& candidate : candidates)
    if (is_file(candidate)) return candidate;
  throw Error(candidates.front().string() +
              ": default model not found; run `make` to fetch it (scripts/fetch_model.sh) or pass --model PATH");
}

std::filesystem::path resolve_model_path(const std::string& explicit_path) {
  return explicit_path.empty() ? default_model_path() : std::filesystem::path(explicit_path);
}

}  // namespace kvscope::model
