#include "core/model/config.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>

#include "core/common/error.h"
#include "core/model/gemma.h"
#include "core/model/gpt_oss.h"
#include "core/model/gguf.h"
#include "core/model/gguf_rope_scaling.h"

namespace kvscope::model {
namespace {

// Architectures whose GGUF files use llama's key and tensor names. llama.cpp's converter permutes llama's q/k
// rows for adjacent-pair RoPE; qwen2/qwen3 keep Hugging Face's order and llama.cpp rotates them NEOX-style
// (half split). qwen2 adds q/k/v biases, qwen3 a per-head RMSNorm of q and k. phi3 keeps Phi-3's fused attn_qkv
// and ffn_up (gate and up rows) tensors, NEOX RoPE; qwen3moe is qwen3 with routed experts, and a llama file with
// llama.expert_count is Mixtral (merged expert tensors, gguf_expert_names in weight_binding.h).
struct GgufArchitecture {
  const char* name;
  RopeStyle rope_style;
  bool qkv_bias;
  bool qk_norm;
  bool fused_projections;
};
// gemma2 / gemma3 keep Hugging Face's order too and add what core/model/gemma.h lists.
// gpt-oss adds what core/model/gpt_oss.h lists.
constexpr std::array<GgufArchitecture, 9> kSupportedArchitectures = {
    {{"llama", RopeStyle::AdjacentPairs, false, false, false},
     {"mistral", RopeStyle::AdjacentPairs, false, false, false},
     {"qwen2", RopeStyle::HalfSplit, true, false, false},
     {"qwen3", RopeStyle::HalfSplit, false, true, false},
     {"phi3", RopeStyle::HalfSplit, false, false, true},
     {"qwen3moe", RopeStyle::HalfSplit, false, true, false},
     {"gemma2", RopeStyle::HalfSplit, false, false, false},
     {"gemma3", RopeStyle::HalfSplit, false, true, false},
     {"gpt-oss", RopeStyle::HalfSplit, true, false, false}}};

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
  for (const auto& a : kSupportedArchitectures) list += (list.empty() ? "" : ", ") + std::string(a.name);
  return list;
}

const GgufArchitecture& find_architecture(const GgufFile& file, const std::string& architecture) {
  for (const auto& a : kSupportedArchitectures)
    if (architecture == a.name) return a;
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
  if (!reader.file().has(reader.key("attention.key_length")) && config.dim % config.n_heads != 0)
    reader.fail(reader.key("attention.head_count"),
                std::to_string(config.n_heads) + " does not divide embedding_length " + std::to_string(config.dim) +
                    " (expected a divisor)");
  if (config.n_heads % config.n_kv_heads != 0)
    reader.fail(reader.key("attention.head_count_kv"),
                std::to_string(config.n_kv_heads) + " does not divide head_count " + std::to_string(config.n_heads) +
                    " (expected a divisor)");
  // Qwen3 decouples the head size from dim / heads (key_length); keys and values must still agree.
  config.head_dim = reader.integer("attention.key_length", 2, kMaxDim, config.dim / config.n_heads);
  const int64_t value_length = reader.file().get_int(reader.key("attention.value_length"), config.head_dim);
  if (value_length != config.head_dim)
    reader.fail(reader.key("attention.value_length"), std::to_string(value_length) + " differs from the key length " +
                                                          std::to_string(config.head_dim) + " (expected them to agree)");
}

void read_positions(const ConfigReader& reader, ModelConfig& config) {
  config.context_length = reader.integer("context_length", 1, kMaxContext);
  config.rope_dim = reader.integer("rope.dimension_count", 2, config.head_dim, config.head_dim);
  if (config.rope_dim % 2 != 0)
    reader.fail(reader.key("rope.dimension_count"),
                std::to_string(config.rope_dim) + " is odd (expected an even number of rotated dimensions)");
  const std::string base_key = reader.key("rope.freq_base");
  config.rope_base = reader.positive_float(base_key, reader.file().get_float(base_key, 10000.0), 1e12);
  // Llama 3.1+ GGUFs carry their rope scaling as one frequency divisor per rotated pair (llama.cpp's freq_factors).
  if (const GgufTensorInfo* freqs = reader.file().find_tensor("rope_freqs.weight")) {
    if (freqs->type != GgmlType::F32 || freqs->shape.size() != 1 || freqs->shape[0] != static_cast<uint64_t>(config.rope_dim / 2))
      reader.fail("rope_freqs.weight", "tensor must be F32 of " + std::to_string(config.rope_dim / 2) +
                                           " values (one per rotated pair)");
    config.rope_scaling.type = "rope_freqs";
    config.rope_freq_divisors.resize(static_cast<std::size_t>(config.rope_dim / 2));
    std::memcpy(config.rope_freq_divisors.data(), freqs->data, config.rope_freq_divisors.size() * sizeof(float));
    for (float d : config.rope_freq_divisors)
      if (!std::isfinite(d) || d <= 0.0f) reader.fail("rope_freqs.weight", "holds " + std::to_string(d) + " (expected positive divisors)");
  }
  const std::string eps_key = reader.key("attention.layer_norm_rms_epsilon");
  config.rms_eps = reader.positive_float(eps_key, reader.file().get_float(eps_key), 1.0);
}

// Routed experts (qwen3moe; llama files of Mixtral): expert_count, expert_used_count, the experts' FFN size
// (expert_feed_forward_length, else feed_forward_length) and expert_weights_norm (absent: renormalised, as
// llama.cpp's llama and qwen3moe graphs do).
void read_experts(const ConfigReader& reader, ModelConfig& config) {
  config.n_experts = reader.integer("expert_count", 0, kMaxExperts, 0);
  if (config.architecture == "qwen3moe" && config.n_experts == 0)
    reader.fail(reader.key("expert_count"), "missing or 0 (expected the number of experts of a qwen3moe file)");
  if (config.n_experts == 0) return;
  config.n_experts_used = reader.integer("expert_used_count", 1, config.n_experts);
  config.ffn_dim = reader.integer("expert_feed_forward_length", 1, kMaxFfnDim, config.ffn_dim);
  config.expert_weights_norm = reader.file().get_bool(reader.key("expert_weights_norm"), true);
}

}  // namespace

ModelConfig read_config(const GgufFile& file) {
  ModelConfig config;
  config.architecture = file.get_string("general.architecture");
  const GgufArchitecture& architecture = find_architecture(file, config.architecture);
  config.rope_style = architecture.rope_style;
  config.qkv_bias = architecture.qkv_bias;
  config.qk_norm = architecture.qk_norm;
  config.fused_projections = architecture.fused_projections;
  config.name = file.get_string("general.name", file.path().stem().string());
  const ConfigReader reader(file, config.architecture);
  read_shape(reader, config);
  read_positions(reader, config);
  read_gguf_rope_scaling(file, config);
  read_experts(reader, config);
  // Phi-3 mini 4k attends within a 2047-token window: full attention equals it up to there (as for Mistral folders).
  if (config.architecture == "phi3")
    if (const int window = reader.integer("attention.sliding_window", 0, kMaxContext, 0); window > 0)
      config.context_length = std::min(config.context_length, window);
  config.vocab_size = read_vocab_size(reader);
  config.tied_embeddings = file.find_tensor("output.weight") == nullptr;
  if (config.architecture == "gemma2") read_gemma_fields(file, GemmaFamily::Gemma2, config);
  if (config.architecture == "gemma3") read_gemma_fields(file, GemmaFamily::Gemma3, config);
  if (config.architecture == "gpt-oss") read_gpt_oss_fields(file, config);
  return config;
}

}  // namespace kvscope::model
