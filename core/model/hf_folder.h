#pragma once
// A Hugging Face model folder: config.json, the weights in model.safetensors or in shards listed by
// model.safetensors.index.json, and the tokenizer files. The shards stay memory-mapped.
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/model/safetensors.h"

namespace kvscope::model {

class HfFolder {
 public:
  // Reads config.json and opens every weight file; throws Error naming the folder, file or tensor that is
  // missing or wrong (a shard the index names that is absent, a tensor the index places in a shard without it).
  static HfFolder open(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  const nlohmann::json& config() const { return config_; }
  const std::vector<SafetensorsFile>& shards() const { return shards_; }
  // The shard holding `name` and the tensor, or nullptr when no shard has it.
  const SafetensorsTensor* find_tensor(const std::string& name) const;
  const SafetensorsFile& shard_of(const std::string& name) const;  // only for a tensor find_tensor found
  uint64_t weight_bytes() const;                                   // sum of the tensors' data bytes
  // Files that define the model (config, weights, tokenizer), for provenance hashes.
  std::vector<std::filesystem::path> defining_files() const;

 private:
  std::filesystem::path dir_;
  nlohmann::json config_;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, std::pair<std::size_t, const SafetensorsTensor*>> tensors_;  // name -> (shard, tensor)
};

// True when `path` is a folder with a config.json (the CLI's --model accepts both a GGUF file and this).
bool is_hf_folder(const std::filesystem::path& path);

// Parses a JSON file; throws Error naming the file when it is missing or not valid JSON.
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace kvscope::model
