#include "core/common/sha256.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/common/error.h"

namespace kvscope {

struct Sha256::Context {
  EVP_MD_CTX* md = nullptr;
  ~Context() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : context_(std::make_unique<Context>()) {
  context_->md = EVP_MD_CTX_new();
  if (!context_->md || EVP_DigestInit_ex(context_->md, EVP_sha256(), nullptr) != 1)
    throw Error("SHA-256: cannot initialise OpenSSL's digest");
}

Sha256::~Sha256() = default;

void Sha256::update(const void* data, std::size_t size) {
  if (size > 0 && EVP_DigestUpdate(context_->md, data, size) != 1) throw Error("SHA-256: digest update failed");
}

std::array<uint8_t, 32> Sha256::finish() {
  std::array<uint8_t, 32> digest{};
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(context_->md, digest.data(), &length) != 1 || length != digest.size())
    throw Error("SHA-256: digest finalisation failed");
  return digest;
}

std::string to_hex(const std::array<uint8_t, 32>& digest) {
  static const char* const digits = "0123456789abcdef";
  std::string hex;
  hex.reserve(64);
  for (uint8_t byte : digest) {
    hex += digits[byte >> 4];
    hex += digits[byte & 15];
  }
  return hex;
}

std::string sha256_hex(std::string_view data) {
  Sha256 hash;
  hash.update(data.data(), data.size());
  return to_hex(hash.finish());
}

std::string file_sha256(const std::filesystem::path& path) {
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) throw Error(path.string() + ": cannot open for hashing: " + std::strerror(errno));
  Sha256 hash;
  std::vector<uint8_t> chunk(1 << 20);
  std::size_t got = 0;
  while ((got = std::fread(chunk.data(), 1, chunk.size(), file.get())) > 0) hash.update(chunk.data(), got);
  if (std::ferror(file.get())) throw Error(path.string() + ": read error while hashing");
  return to_hex(hash.finish());
}

}  // namespace kvscope
