#include "core/model/gemma.h"

#include <cmath>
#include <string>

#include "core/common/error.h"
#include "core/model/gguf.h"

namespace kvscope::model {

void apply_gemma_architecture(ModelConfig& config, GemmaFamily family) {
  config.activation = kernels::ModelShape::Activation::GeluTanh;
  // transformers multiplies by the float32 value of sqrt(hidden_size) computed in double.
  config.embedding_scale = static_cast<float>(std::sqrt(static_cast<double>(config.dim)));
  config.post_norms = true;
  config.qk_norm = family == GemmaFamily::Gemma3;
  config.qkv_bias = false;
  config.o_bias = false;
}

std::vector<bool> local_layers_from_pattern(int n_layers, int pattern) {
  std::vector<bool> local(static_cast<std::size_t>(n_layers), false);
  for (int l = 0; l < n_layers; ++l) local[l] = pattern > 1 && (l + 1) % pattern != 0;
  return local;
}

float gemma_query_scale(int head_dim, double query_pre_attn_scalar) {
  return static_cast<float>(std::sqrt(static_cast<double>(head_dim) / query_pre_attn_scalar));
}

int default_window_pattern(GemmaFamily family) { return family == GemmaFamily::Gemma2 ? 2 : 6; }

namespace {

[[noreturn]] void gguf_fail(const GgufFile& file, const std::string& key, const std::string& what) {
  throw Error(file.path().string() + ": metadata '" + key + "': " + what);
}

float gguf_positive(const GgufFile& file, const std::string& key, double fallback) {
  const double value = file.get_float(key, fallback);
  if (!std::isfinite(value) || value < 0.0)
    gguf_fail(file, key, std::to_string(value) + " (expected a finite value >= 0)");
  return static_cast<float>(value);
}

}  // namespace

// llama.cpp's converter writes the norms as 1 + w, the soft-caps (Gemma 2) and the sliding window; llama.cpp itself fixes the pattern (2 or 6), Gemma 3's local base (10000) and the
// query scale (query_pre_attn_scalar = head_dim, except the 27B models: dim / heads), which are read here from
// the keys llama.cpp defines for them when a file carries them.
void read_gemma_fields(const GgufFile& file, GemmaFamily family, ModelConfig& config) {
  const std::string arch = config.architecture;
  apply_gemma_architecture(config, family);
  config.tied_embeddings = file.find_tensor("output.weight") == nullptr;
  const bool gemma2 = family == GemmaFamily::Gemma2;
  config.attn_logit_softcap = gguf_positive(file, arch + ".attn_logit_softcapping", 0.0);
  config.final_logit_softcap = gguf_positive(file, arch + ".final_logit_softcapping", 0.0);
  const std::string window_key = arch + ".attention.sliding_window";
  const int64_t window = file.get_int(window_key, 4096);
  if (window < 1 || window > kMaxContext) gguf_fail(file, window_key, std::to_string(window) + " is out of range");
  config.sliding_window = static_cast<int>(window);
  const std::string pattern_key = arch + ".attention.sliding_window_pattern";
  const int64_t pattern = file.get_int(pattern_key, default_window_pattern(family));
  if (pattern < 1 || pattern > kMaxLayers) gguf_fail(file, pattern_key, std::to_string(pattern) + " is out of range");
  config.layer_is_local = local_layers_from_pattern(config.n_layers, static_cast<int>(pattern));
  const bool is_27b = config.n_layers == (gemma2 ? 46 : 62);
  config.query_pre_attn_scalar = is_27b ? static_cast<double>(config.dim) / config.n_heads : config.head_dim;
  config.query_scale = gemma_query_scale(config.head_dim, config.query_pre_attn_scalar);
  // Gemma 3's global layers take the rope scaling read for every architecture (core/model/gguf_rope_scaling.h);
  // its local layers rotate with their own base and none.
  if (family == GemmaFamily::Gemma3) config.rope_local_base = gguf_positive(file, arch + ".rope.freq_base_swa", 10000.0);
}

}  // namespace kvscope::model
