#pragma once
// safetensors reader (the format of Hugging Face checkpoints): an 8-byte little-endian header length, a JSON
// header naming each tensor's dtype, shape and byte range, then the data. The data stays memory-mapped.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/common/mapped_file.h"
#include "core/model/ggml_type.h"

namespace kvscope::model {

struct SafetensorsTensor {
  bool is_float() const { return dtype != "U8"; }  // F32, F16 or BF16: values the kernels widen
  std::string name;
  std::string dtype;              // as the header spells it: "F32", "F16", "BF16", "U8" (raw bytes)
  GgmlType type = GgmlType::F32;  // the same element type in ggml's terms, for the kernels (U8: I8)
  std::vector<uint64_t> shape;    // outermost first (row-major): a matrix is [rows, cols]
  uint64_t offset = 0;            // from the start of the data section
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // into the mapping
};

class SafetensorsFile {
 public:
  // Maps and validates the whole file: header length, JSON, every dtype, shape and byte range, and that the
  // ranges tile the data section exactly. Throws Error naming the file, the tensor and the field.
  static SafetensorsFile open(const std::filesystem::path& path);
  // Parses a copy of an in-memory image; `name` stands in for the path in messages (tests, fuzzing).
  static SafetensorsFile open_memory(const uint8_t* data, std::size_t size, const std::string& name);

  const std::filesystem::path& path() const { return path_; }
  uint64_t file_size() const { return image_.size(); }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const SafetensorsTensor* find_tensor(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  void parse();

  std::filesystem::path path_;
  MappedFile image_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::size_t> tensor_index_;
  std::map<std::string, std::string> metadata_;  // "__metadata__": free-form string pairs
};

}  // namespace kvscope::model
