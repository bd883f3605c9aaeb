#pragma once
// SHA-256 (FIPS 180-4), used to identify the exact model file a trace was made with. Computed by
// OpenSSL's libcrypto, which uses the CPU's SHA instructions where it has them (a 100 MB model hashes in
// a fraction of the time a portable implementation takes, and every trace hashes its model).
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

namespace kvscope {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, std::size_t size);
  // Finishes the hash; the object must not be updated afterwards.
  std::array<uint8_t, 32> finish();

 private:
  struct Context;
  std::unique_ptr<Context> context_;
};

std::string to_hex(const std::array<uint8_t, 32>& digest);
std::string sha256_hex(std::string_view data);
// Lowercase hex digest of a whole file, read in chunks; throws Error naming the file on I/O failure.
std::string file_sha256(const std::filesystem::path& path);

}  // namespace kvscope
