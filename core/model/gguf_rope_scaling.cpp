#include "core/model/gguf_rope_scaling.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/common/error.h"
#include "core/model/gguf.h"
#include "core/model/rope_scaling.h"

namespace kvscope::model {
namespace {

// The `{arch}.rope.scaling.` keys of one file, with the checks every reader of them needs.
class ScalingKeys {
 public:
  ScalingKeys(const GgufFile& file, const std::string& architecture)
      : file_(file), prefix_(architecture + ".rope.scaling.") {}

  std::string key(const char* suffix) const { return prefix_ + suffix; }
  bool has(const char* suffix) const { return file_.has(key(suffix)); }
  const GgufFile& file() const { return file_; }

  [[noreturn]] void fail(const std::string& name, const std::string& what) const {
    throw Error(file_.path().string() + ": metadata '" + name + "': " + what);
  }

  double positive(const char* suffix, double fallback) const {
    const double value = file_.get_float(key(suffix), fallback);
    if (!std::isfinite(value) || value <= 0.0 || value > 1e6)
      fail(key(suffix), std::to_string(value) + " is out of range (expected a finite value in (0, 1e6])");
    return value;
  }

  double unit_interval(const char* suffix, double fallback) const {
    const double value = file_.get_float(key(suffix), fallback);
    if (!(value >= 0.0 && value <= 1.0))  // NaN too
      fail(key(suffix), std::to_string(value) + " is out of range (expected a value in [0, 1])");
    return value;
  }

  int context(const char* suffix, int fallback) const {
    const int64_t value = file_.get_int(key(suffix), fallback);
    if (value < 1 || value > kMaxContext)
      fail(key(suffix), std::to_string(value) + " is out of range (expected 1.." + std::to_string(kMaxContext) + ")");
    return static_cast<int>(value);
  }

 private:
  const GgufFile& file_;
  std::string prefix_;
};

std::vector<float> pair_factors(const ScalingKeys& keys, const GgufTensorInfo* info, const char* name, int pairs) {
  if (!info) keys.fail(name, "tensor missing (expected both rope_factors_short and rope_factors_long)");
  if (info->type != GgmlType::F32 || info->shape.size() != 1 || info->shape[0] != static_cast<uint64_t>(pairs))
    keys.fail(name, "tensor must be F32 of " + std::to_string(pairs) + " values (one per rotated pair)");
  std::vector<float> values(static_cast<std::size_t>(pairs));
  std::memcpy(values.data(), info->data, values.size() * sizeof(float));
  for (float v : values)
    if (!std::isfinite(v) || v <= 0.0f) keys.fail(name, "holds " + std::to_string(v) + " (expected positive factors)");
  return values;
}

// Phi-3's longrope as llama.cpp's converter writes it: rope_factors_short/long tensors (one divisor per rotated
// pair), original_context_length and attn_factor. llama.cpp picks one set by the context size; kvscope switches
// per forward call as transformers does (ModelShape::rope_long_after).
void read_longrope(const ScalingKeys& keys, ModelConfig& config) {
  const int pairs = config.rope_dim / 2;
  RopeScaling& scaling = config.rope_scaling;
  scaling.type = "longrope";
  scaling.short_factor =
      pair_factors(keys, keys.file().find_tensor("rope_factors_short.weight"), "rope_factors_short.weight", pairs);
  scaling.long_factor =
      pair_factors(keys, keys.file().find_tensor("rope_factors_long.weight"), "rope_factors_long.weight", pairs);
  if (!keys.has("original_context_length"))
    keys.fail(keys.key("original_context_length"), "missing (expected the context longrope's short factors cover)");
  scaling.original_context = keys.context("original_context_length", 0);
  scaling.attention_factor = keys.positive("attn_factor", 1.0);
  scaling.factor = static_cast<double>(config.context_length) / scaling.original_context;
  config.rope_freq_divisors = scaling.short_factor;
  config.rope_freq_divisors_long = scaling.long_factor;
  config.rope_long_after = scaling.original_context;
  config.rope_attention_factor = static_cast<float>(scaling.attention_factor);
}

// YaRN with transformers' _compute_yarn_parameters (core/model/rope_scaling.cpp), its fields from the keys the
// converter writes them to: factor, original_context_length (absent: the context length, as llama.cpp reads it),
// yarn_beta_fast / yarn_beta_slow (32 / 1) and yarn_attn_factor, the converter's copy of rope_parameters'
// attention_factor, which replaces the default 0.1 ln(factor) + 1 as it does in transformers. Without it, a
// yarn_log_multiplier m gives mscale(1) / mscale(m), as llama.cpp and transformers' mscale_all_dim do. attn_factor
// multiplies the result, as llama.cpp multiplies every rope's. The ramp's ends are rounded outwards
// (transformers' default truncate; gpt-oss's reader turns it off, core/model/gpt_oss.cpp).
// yarn_ext_factor (absent: 1, the whole ramp) weights the ramp's extrapolation as llama.cpp's rope_yarn does
// (RopeScaling::ext_factor). At 0, llama.cpp skips YaRN's magnitude correction as well: cos and sin are scaled by
// yarn_attn_factor (absent: 1) times attn_factor only. Any other value keeps YaRN's attention factor whole, as
// llama.cpp's does not depend on the ext_factor either.
void read_yarn(const ScalingKeys& keys, ModelConfig& config) {
  RopeScaling& scaling = config.rope_scaling;
  scaling.type = "yarn";
  scaling.factor = keys.positive("factor", 1.0);
  scaling.original_context = keys.context("original_context_length", config.context_length);
  scaling.beta_fast = keys.positive("yarn_beta_fast", 32.0);
  scaling.beta_slow = keys.positive("yarn_beta_slow", 1.0);
  scaling.ext_factor = keys.unit_interval("yarn_ext_factor", 1.0);
  const double log_multiplier = keys.file().get_float(keys.key("yarn_log_multiplier"), 0.0);
  if (!std::isfinite(log_multiplier) || log_multiplier < 0.0)
    keys.fail(keys.key("yarn_log_multiplier"), std::to_string(log_multiplier) + " (expected a finite value >= 0)");
  const auto mscale = [&](double m) { return scaling.factor <= 1.0 ? 1.0 : 0.1 * m * std::log(scaling.factor) + 1.0; };
  if (keys.has("yarn_attn_factor"))
    scaling.attention_factor = keys.positive("yarn_attn_factor", 1.0);
  else if (scaling.ext_factor == 0.0)
    scaling.attention_factor = 1.0;
  else if (log_multiplier > 0.0)
    scaling.attention_factor = mscale(1.0) / mscale(log_multiplier);
  else
    scaling.attention_factor = yarn_default_attention_factor(scaling.factor);
  scaling.attention_factor *= keys.positive("attn_factor", 1.0);
  scaling.truncate = true;
  config.rope_freq_divisors = rope_freq_divisors(scaling, config.rope_dim, config.rope_base);
  config.rope_attention_factor = static_cast<float>(scaling.attention_factor);
}

// Position interpolation: every pair's frequency divided by the factor.
void read_linear(const ScalingKeys& keys, ModelConfig& config) {
  RopeScaling& scaling = config.rope_scaling;
  scaling.type = "linear";
  scaling.factor = keys.positive("factor", 1.0);
  scaling.attention_factor = keys.positive("attn_factor", 1.0);
  config.rope_freq_divisors = rope_freq_divisors(scaling, config.rope_dim, config.rope_base);
  config.rope_attention_factor = static_cast<float>(scaling.attention_factor);
}

}  // namespace

void read_gguf_rope_scaling(const GgufFile& file, ModelConfig& config) {
  const ScalingKeys keys(file, config.architecture);
  const std::string type_key = keys.key("type");
  const bool longrope_tensors = file.find_tensor("rope_factors_short.weight") != nullptr ||
                                file.find_tensor("rope_factors_long.weight") != nullptr;
  // Without a type, llama.cpp reads a factor as linear scaling; kvscope also reads Phi-3's tensors as longrope.
  std::string type = "none";
  if (file.has(type_key))
    type = file.get_string(type_key);
  else if (longrope_tensors)
    type = "longrope";
  else if (keys.has("factor"))
    type = "linear";
  if (type != "none" && type != "linear" && type != "yarn" && type != "longrope")
    keys.fail(type_key, "\"" + type + "\" is not supported (supported: none, linear, yarn, longrope)");
  if (longrope_tensors && type != "longrope")
    keys.fail(type_key, "\"" + type + "\" given with rope_factors_short/rope_factors_long tensors (expected longrope)");
  if (type == "none") return;
  // A Llama 3.1 file's rope_freqs tensor is its whole scaling; another on top would be composed by llama.cpp and
  // is not computed here.
  if (config.rope_scaling.type == "rope_freqs" && !(type == "linear" && keys.positive("factor", 1.0) == 1.0))
    keys.fail(type_key,
              "\"" + type + "\" together with a rope_freqs.weight tensor is not supported (expected one of them)");
  if (config.rope_scaling.type == "rope_freqs") return;
  if (type == "longrope") {
    read_longrope(keys, config);
    return;
  }
  if (type == "yarn") {
    read_yarn(keys, config);
    return;
  }
  read_linear(keys, config);
}

}  // namespace kvscope::model
