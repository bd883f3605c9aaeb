#include "core/model/hf_folder.h"

#include <fstream>
#include <set>
#include <sstream>

#include "core/common/error.h"
#include "core/common/json_text.h"

namespace kvscope::model {
namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// A shard name from the index must stay inside the folder.
void check_shard_name(const std::filesystem::path& index, const std::string& tensor, const std::string& shard) {
  const bool plain = !shard.empty() && shard.find('/') == std::string::npos && shard != "." && shard != "..";
  if (!plain)
    throw Error(index.string() + ": weight_map entry '" + tensor + "': \"" + shard +
                "\" is not a file name in this folder (expected e.g. model-00001-of-00002.safetensors)");
}

// tensor name -> shard file name, from the index's weight_map.
std::map<std::string, std::string> read_weight_map(const std::filesystem::path& index) {
  const nlohmann::json json = read_json_file(index);
  if (!json.is_object() || !json.contains("weight_map") || !json["weight_map"].is_object())
    throw Error(index.string() + ": field 'weight_map': missing or not an object (expected tensor name -> shard file)");
  std::map<std::string, std::string> map;
  for (const auto& [tensor, shard] : json["weight_map"].items()) {
    if (!shard.is_string())
      throw Error(index.string() + ": weight_map entry '" + tensor + "': " + shard.dump() + " is not a file name");
    check_shard_name(index, tensor, shard.get<std::string>());
    map[tensor] = shard.get<std::string>();
  }
  if (map.empty()) throw Error(index.string() + ": field 'weight_map' is empty (expected the model's tensors)");
  return map;
}

}  // namespace

nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open (expected a JSON file)");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_json_text(text.str(), path.string());
}

bool is_hf_folder(const std::filesystem::path& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec) && std::filesystem::is_regular_file(path / "config.json", ec);
}

HfFolder HfFolder::open(const std::filesystem::path& dir) {
  HfFolder folder;
  folder.dir_ = dir;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw Error(dir.string() + ": not a folder (expected a Hugging Face model folder)");
  if (!std::filesystem::is_regular_file(dir / "config.json", ec))
    throw Error(dir.string() +
                ": no config.json (expected a Hugging Face model folder: config.json, *.safetensors, tokenizer.json)");
  folder.config_ = read_json_file(dir / "config.json");
  if (!folder.config_.is_object()) throw Error((dir / "config.json").string() + ": not a JSON object");

  if (std::filesystem::is_regular_file(dir / kIndexFile, ec)) {
    const auto weight_map = read_weight_map(dir / kIndexFile);
    std::map<std::string, std::size_t> shard_index;
    for (const auto& [tensor, shard] : weight_map) {
      if (!shard_index.count(shard)) {
        shard_index[shard] = folder.shards_.size();
        folder.shards_.push_back(SafetensorsFile::open(dir / shard));
      }
      const std::size_t s = shard_index[shard];
      const SafetensorsTensor* found = folder.shards_[s].find_tensor(tensor);
      if (!found)
        throw Error((dir / kIndexFile).string() + ": weight_map places tensor '" + tensor + "' in " + shard +
                    ", which does not contain it");
      folder.tensors_[tensor] = {s, found};
    }
  } else if (std::filesystem::is_regular_file(dir / kSingleFile, ec)) {
    folder.shards_.push_back(SafetensorsFile::open(dir / kSingleFile));
    for (const auto& t : folder.shards_.front().tensors()) folder.tensors_[t.name] = {0, &t};
  } else {
    throw Error(dir.string() + ": no " + kSingleFile + " or " + kIndexFile +
                " (expected the weights in safetensors files)");
  }
  return folder;
}

const SafetensorsTensor* HfFolder::find_tensor(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second.second;
}

const SafetensorsFile& HfFolder::shard_of(const std::string& name) const { return shards_[tensors_.at(name).first]; }

uint64_t HfFolder::weight_bytes() const {
  uint64_t bytes = 0;
  for (const auto& [name, where] : tensors_) bytes += where.second->n_bytes;
  return bytes;
}

std::vector<std::filesystem::path> HfFolder::defining_files() const {
  std::set<std::filesystem::path> files = {dir_ / "config.json"};
  for (const auto& shard : shards_) files.insert(shard.path());
  std::error_code ec;
  for (const char* name : {kIndexFile, "tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    if (std::filesystem::is_regular_file(dir_ / name, ec)) files.insert(dir_ / name);
  return {files.begin(), files.end()};
}

}  // namespace kvscope::model
