#include "core/model/config.h"

#include <array>
#include <cmath>
#include <string>

#include "core/common/error.h"
#include "core/model/gguf.h"

namespace kvscope::model {
namespace {

// Architectures whose GGUF files use llama's keys, tensor names and permuted (adjacent-pair) RoPE.
// qwen2 is not here: its GGUF files carry q/k/v biases and use half-split RoPE, which the engine lacks.
constexpr std::array<const char*, 2> kSupportedArchitectures = {"llama", "mistral"};

// Upper bounds well beyond any model kvscope could run; they only catch corrupt or hostile metadata
// before a value reaches a size computation.
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxDim = 1 << 16;
constexpr int64_t kMaxFfnDim = 1 << 20;
constexpr int64_t kMaxVocab = 1 << 22;
constexpr int64_t kMaxContext = 1 << 24;

class ConfigReader {
 public:
  ConfigReader(const GgufFile& file, std::string prefix) : file_(file), prefix_(std::move(prefix)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw Error(file_.path().string() + ": metadata '" + key + "': " + what);
  }

  std::string key(const std::string& suffix) const { return prefix_ + "." + suffix; }

  int integer(const std::string& suffix, int64_t low, int64_t high) const {
    return in_range(key(suffix), file_.get_int(key(suffix)), low, high);
  }

  int integer(const std::string& suffix, int64_t low, int64_t high, int64_t fallback) const {
    return in_range(key(suffix), file_.get_int(key(suffix), fallback), low, high);
  }

  int in_range(const std::string& name, int64_t value, int64_t low, int64_t high) const {
    if (value < low || value > high)
      fail(name, std::to_string(value) + " is out of range (expected " + std::to_string(low) + ".." +
                     std::to_string(high) + ")");
    return static_cast<int>(value);
  }

  // Floats must be finite and in (low, high]; a zero or negative epsilon or RoPE base breaks the math.
  float positive_float(const std::string& name, double value, double high) const {
    if (!std::isfinite(value) || value <= 0.0 || value > high)
      fail(name, std::to_string(value) + " is out of range (expected a finite value in (0, " +
                     std::to_string(high) + "])");
    return static_cast<float>(value);
  }

  const GgufFile& file() const { return file_; }

 private:
  const GgufFile& file_;
  std::string prefix_;
};

std::string supported_list() {
  std::string list;
  for (const char* name : kSupportedArchitectures) list += (list.empty() ? "" : ", ") + std::string(name);
  return list;
}

void check_architecture(const GgufFile& file, const std::string& architecture) {
  for (const char* name : kSupportedArchitectures)
    if (architecture == name) return;
  throw Error(file.path().string() + ": metadata 'general.architecture': '" + architecture +
              "' is not supported (supported: " + supported_list() + ")");
}

int read_vocab_size(const ConfigReader& reader) {
  const std::string key = reader.key("vocab_size");
  if (reader.file().has(key)) return reader.integer("vocab_size", 1, kMaxVocab);
  if (reader.file().has("tokenizer.ggml.tokens")) {
    const auto tokens = reader.file().get_string_array("tokenizer.ggml.tokens");
    return reader.in_range("tokenizer.ggml.tokens", static_cast<int64_t>(tokens.size()), 1, kMaxVocab);
  }
  reader.fail(key, "missing, and there is no 'tokenizer.ggml.tokens' list to count (expected the vocabulary size)");
}

void read_shape(const ConfigReader& reader, ModelConfig& config) {
  config.n_layers = reader.integer("block_count", 1, kMaxLayers);
  config.dim = reader.integer("embedding_length", 1, kMaxDim);
  config.ffn_dim = reader.integer("feed_forward_length", 1, kMaxFfnDim);
  config.n_heads = reader.integer("attention.head_count", 1, kMaxHeads);
  config.n_kv_heads = reader.integer("attention.head_count_kv", 1, config.n_heads, config.n_heads);
  if (config.dim % config.n_heads != 0)
    reader.fail(reader.key("attention.head_count"),
                std::to_string(config.n_heads) + " does not divide embedding_length " + std::to_string(config.dim) +
                    " (expected a divisor)");
  if (config.n_heads % config.n_kv_heads != 0)
    reader.fail(reader.key("attention.head_count_kv"),
                std::to_string(config.n_kv_heads) + " does not divide head_count " + std::to_string(config.n_heads) +
                    " (expected a divisor)");
  config.head_dim = config.dim / config.n_heads;
  // Some architectures decouple the head size from dim / heads; the engine assumes they agree.
  for (const char* suffix : {"attention.key_length", "attention.value_length"}) {
    const int64_t length = reader.file().get_int(reader.key(suffix), config.head_dim);
    if (length != config.head_dim)
      reader.fail(reader.key(suffix), std::to_string(length) + " differs from embedding_length / head_count = " +
                                          std::to_string(config.head_dim) + " (expected them to agree)");
  }
}

void read_positions(const ConfigReader& reader, ModelConfig& config) {
  config.context_length = reader.integer("context_length", 1, kMaxContext);
  config.rope_dim = reader.integer("rope.dimension_count", 2, config.head_dim, config.head_dim);
  if (config.rope_dim % 2 != 0)
    reader.fail(reader.key("rope.dimension_count"),
                std::to_string(config.rope_dim) + " is odd (expected an even number of rotated dimensions)");
  const std::string base_key = reader.key("rope.freq_base");
  config.rope_base = reader.positive_float(base_key, reader.file().get_float(base_key, 10000.0), 1e12);
  const std::string eps_key = reader.key("attention.layer_norm_rms_epsilon");
  config.rms_eps = reader.positive_float(eps_key, reader.file().get_float(eps_key), 1.0);
  // GGUF llama converters permute q/k so that RoPE rotates adjacent pairs.
  config.rope_style = RopeStyle::AdjacentPairs;
}

}  // namespace

ModelConfig read_config(const GgufFile& file) {
  ModelConfig config;
  config.architecture = file.get_string("general.architecture");
  check_architecture(file, config.architecture);
  config.name = file.get_string("general.name", file.path().stem().string());
  const ConfigReader reader(file, config.architecture);
  read_shape(reader, config);
  read_positions(reader, config);
  config.vocab_size = read_vocab_size(reader);
  config.tied_embeddings = file.find_tensor("output.weight") == nullptr;
  return config;
}

}  // namespace kvscope::model
