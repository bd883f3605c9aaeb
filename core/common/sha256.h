#pragma once
// SHA-256 (FIPS 180-4), used to identify the exact model file a trace was made with.
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace kvscope {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t size);
  // Finishes the hash; the object must not be updated afterwards.
  std::array<uint8_t, 32> finish();

 private:
  void compress(const uint8_t* block);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

std::string to_hex(const std::array<uint8_t, 32>& digest);
std::string sha256_hex(std::string_view data);
// Lowercase hex digest of a whole file, read in chunks; throws Error naming the file on I/O failure.
std::string file_sha256(const std::filesystem::path& path);

}  // namespace kvscope
