#pragma once
// GGUF v2/v3 reader: header, typed metadata, tensor infos; tensor data stays memory-mapped.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/common/mapped_file.h"
#include "core/model/ggml_type.h"

namespace kvscope::model {

// One metadata value. Arrays keep their element type; nested arrays are rejected as unsupported.
struct GgufArray;
using GgufValue = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string,
                               uint64_t, int64_t, double, std::shared_ptr<GgufArray>>;
struct GgufArray {
  uint32_t element_type = 0;  // GGUF value type id of the elements
  std::vector<GgufValue> values;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> shape;  // ggml order: shape[0] is the contiguous (row) dimension
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;          // relative to the start of the data section
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // into the mapping
  uint64_t elements() const;
};

class GgufFile {
 public:
  // Opens and validates the whole file (header, metadata, tensor bounds). Throws Error naming file and field.
  static GgufFile open(const std::filesystem::path& path);
  // Parses a copy of an in-memory image; `name` stands in for the path in messages (tests, fuzzing).
  static GgufFile open_memory(const uint8_t* data, std::size_t size, const std::string& name);

  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;

  const std::filesystem::path& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t file_size() const { return size_; }
  uint64_t alignment() const { return alignment_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

  bool has(const std::string& key) const { return metadata_.count(key) != 0; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  const GgufTensorInfo& tensor(const std::string& name) const;  // throws Error when missing

  // Typed getters: any integer type converts to an integer if it fits; each throws Error naming the key.
  int64_t get_int(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_float(const std::string& key) const;
  double get_float(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<float> get_float_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;

 private:
  GgufFile() = default;
  void parse(const uint8_t* data, uint64_t size);

  std::filesystem::path path_;
  uint32_t version_ = 0;
  uint64_t size_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, std::size_t> tensor_index_;
  MappedFile image_;  // the mapping of path_, or the copy open_memory took
};

// The GGUF name of a value's type ("uint32", "string", "array of string", ...), for messages.
std::string gguf_value_type_name(const GgufValue& value);

}  // namespace kvscope::model
