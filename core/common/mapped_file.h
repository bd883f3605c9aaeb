#pragma once
// A whole file mapped read-only into memory (or an owned in-memory copy, for tests and fuzzing), so that
// model weights are read where they lie instead of being copied.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace kvscope {

class MappedFile {
 public:
  MappedFile() = default;
  // Maps `path`; `kind` names what the file should be in messages ("GGUF model file", "safetensors file").
  // Throws Error naming the file when it cannot be opened, is not a regular file, is empty or cannot be mapped.
  static MappedFile open(const std::filesystem::path& path, const std::string& kind);
  static MappedFile copy_of(const uint8_t* data, std::size_t size);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return mapping_ ? static_cast<const uint8_t*>(mapping_) : owned_.data(); }
  uint64_t size() const { return size_; }

 private:
  void release();
  void* mapping_ = nullptr;
  uint64_t size_ = 0;
  std::vector<uint8_t> owned_;
};

}  // namespace kvscope
