// SHA-256 against the FIPS 180-2 / NIST example vectors.
#include "core/common/sha256.h"

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "core/common/error.h"

TEST_CASE("SHA-256 of the FIPS example messages", "[sha256]") {
  using kvscope::sha256_hex;
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
                   "mnopqrstnopqrstu") == "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  CHECK(sha256_hex(std::string(1000000, 'a')) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("SHA-256 is independent of how the input is split", "[sha256]") {
  std::string message;
  for (int i = 0; i < 1000; ++i) message += static_cast<char>(i * 7 + 3);
  const std::string whole = kvscope::sha256_hex(message);
  for (std::size_t chunk : {1u, 3u, 55u, 56u, 63u, 64u, 65u, 127u, 999u}) {
    kvscope::Sha256 hash;
    for (std::size_t at = 0; at < message.size(); at += chunk)
      hash.update(message.data() + at, std::min(chunk, message.size() - at));
    CHECK(kvscope::to_hex(hash.finish()) == whole);
  }
  // Lengths around the padding boundary (55, 56 and 64 bytes need one or two final blocks).
  CHECK(kvscope::sha256_hex(std::string(55, 'a')) == "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  CHECK(kvscope::sha256_hex(std::string(56, 'a')) == "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  CHECK(kvscope::sha256_hex(std::string(64, 'a')) == "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST_CASE("file_sha256 hashes a file and names a missing one", "[sha256]") {
  const auto path = std::filesystem::temp_directory_path() / ("kvscope_sha_" + std::to_string(::getpid()) + ".bin");
  {
    std::ofstream out(path, std::ios::binary);
    out << std::string(3 << 20, 'x') << "abc";  // spans several read chunks
  }
  CHECK(kvscope::file_sha256(path) == kvscope::sha256_hex(std::string(3 << 20, 'x') + "abc"));
  std::filesystem::remove(path);
  try {
    kvscope::file_sha256(path);
    FAIL("expected an error");
  } catch (const kvscope::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains(path.string()));
  }
}
