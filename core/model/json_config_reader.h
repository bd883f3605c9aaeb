#pragma once
// Reads and checks config.json fields, naming config.json and the field in every error (core/model/hf_config.cpp
// and the per-family readers).
#include <cmath>
#include <string>

#include "core/common/error.h"
#include "core/model/hf_folder.h"

namespace kvscope::model {

class JsonConfigReader {
 public:
  explicit JsonConfigReader(const HfFolder& folder)
      : json_(folder.config()), file_((folder.dir() / "config.json").string()) {}

  // The object under `key` (a multimodal model's text_config), its fields named "key.field" in errors.
  JsonConfigReader nested(const std::string& key) const {
    if (!has(key) || !json_[key].is_object()) fail(key, "missing or not an object (expected the text model's config)");
    return JsonConfigReader(json_[key], file_, prefix_ + key + ".");
  }

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw Error(file_ + ": field '" + prefix_ + key + "': " + what);
  }
  bool has(const std::string& key) const { return json_.contains(key) && !json_[key].is_null(); }
  bool present(const std::string& key) const { return json_.contains(key); }  // even when null
  const nlohmann::json& at(const std::string& key) const { return json_[key]; }

  int integer(const std::string& key, int64_t low, int64_t high) const {
    if (!has(key))
      fail(key, "missing (expected an integer in " + std::to_string(low) + ".." + std::to_string(high) + ")");
    return integer_value(key, json_[key], low, high);
  }
  int integer(const std::string& key, int64_t low, int64_t high, int64_t fallback) const {
    return has(key) ? integer(key, low, high) : static_cast<int>(fallback);
  }
  int integer_value(const std::string& key, const nlohmann::json& value, int64_t low, int64_t high) const {
    if (!value.is_number_integer() || value.get<int64_t>() < low || value.get<int64_t>() > high)
      fail(key, value.dump() + " (expected an integer in " + std::to_string(low) + ".." + std::to_string(high) + ")");
    return static_cast<int>(value.get<int64_t>());
  }
  float positive(const std::string& key, double fallback, double high) const {
    if (has(key) && !json_[key].is_number()) fail(key, json_[key].dump() + " (expected a number)");
    const double value = has(key) ? json_[key].get<double>() : fallback;
    if (!std::isfinite(value) || value <= 0.0 || value > high)
      fail(key, std::to_string(value) + " (expected a finite value in (0, " + std::to_string(high) + "])");
    return static_cast<float>(value);
  }
  bool boolean(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!json_[key].is_boolean()) fail(key, json_[key].dump() + " (expected true or false)");
    return json_[key].get<bool>();
  }
  std::string text(const std::string& key) const {
    if (!has(key) || !json_[key].is_string()) fail(key, "missing or not a string");
    return json_[key].get<std::string>();
  }

 private:
  JsonConfigReader(const nlohmann::json& json, std::string file, std::string prefix)
      : json_(json), file_(std::move(file)), prefix_(std::move(prefix)) {}

  const nlohmann::json& json_;
  std::string file_;
  std::string prefix_;  // "text_config." for a nested reader
};

struct ModelConfig;
// One rope object (rope_parameters, rope_scaling, or Gemma 3's per-layer-type entries) into config.rope_base,
// rope_scaling and rope_freq_divisors; `key` names it in errors.
void read_rope_object(const JsonConfigReader& reader, const std::string& key, const nlohmann::json& rope,
                      ModelConfig& config);

}  // namespace kvscope::model
