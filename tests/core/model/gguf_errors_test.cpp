// Bad GGUF input: every defect gives a one-line kvscope::Error naming the file and the field.
#include <catch2/catch.hpp>
#include <initializer_list>
#include <limits>
#include <string>

#include "core/model/gguf.h"
#include "tests/core/model/gguf_builder.h"
#include "tests/core/model/test_support.h"

using kvscope::model::GgufFile;
using kvscope::test::BuiltGguf;
using kvscope::test::error_message;
using kvscope::test::GgufBuilder;
using kvscope::test::TempFile;
namespace t = kvscope::test;

namespace {

// Writes the bytes to a file, opens it and checks the message: one line, the path, and every fragment.
void expect_error(const std::vector<uint8_t>& bytes, std::initializer_list<std::string> fragments) {
  const TempFile tmp("bad.gguf", bytes);
  const std::string message = error_message([&] { GgufFile::open(tmp.path()); });
  INFO("message: " << message);
  CHECK(message.find('\n') == std::string::npos);
  CHECK_THAT(message, Catch::Contains(tmp.path().string()));
  for (const auto& fragment : fragments) CHECK_THAT(message, Catch::Contains(fragment));
}

// A small valid file: metadata first, then two tensors (kv0 is general.architecture).
GgufBuilder small_builder() {
  GgufBuilder b;
  b.str("general.architecture", "llama").u32("llama.block_count", 2).string_array("names", {"x", "y"});
  b.tensor("blk.0.attn_q.weight", {32, 2}, t::kTypeQ8_0, t::tensor_bytes(t::kTypeQ8_0, 64, 1));
  b.tensor("output_norm.weight", {8}, t::kTypeF32, t::tensor_bytes(t::kTypeF32, 8, 2));
  return b;
}

std::vector<uint8_t> encoded_string(const std::string& s) {
  t::ByteWriter w;
  w.put_string(s);
  return w.bytes();
}

}  // namespace

TEST_CASE("GGUF open reports missing, unreadable and empty files", "[gguf][errors]") {
  const std::string missing = "/nonexistent-kvscope-dir/missing-model.gguf";
  CHECK_THAT(error_message([&] { GgufFile::open(missing); }),
             Catch::Contains(missing) && Catch::Contains("cannot open") && Catch::Contains("No such file"));
  const TempFile empty("empty.gguf", {});
  CHECK_THAT(error_message([&] { GgufFile::open(empty.path()); }),
             Catch::Contains(empty.path().string()) && Catch::Contains("empty"));
  CHECK_THAT(error_message([&] { GgufFile::open(empty.path().parent_path()); }),
             Catch::Contains("not a regular file"));
}

TEST_CASE("GGUF header defects", "[gguf][errors]") {
  const BuiltGguf valid = small_builder().build();
  SECTION("wrong magic") {
    auto bytes = valid.bytes;
    std::memcpy(bytes.data(), "GGML", 4);
    expect_error(bytes, {"magic", "'GGML'", "expected 'GGUF'"});
    bytes[0] = 0x89;
    expect_error(bytes, {"magic", "\\x89"});
  }
  SECTION("too short for a magic") { expect_error({'G', 'G'}, {"magic", "2 bytes"}); }
  SECTION("version 1") {
    auto built = valid;
    built.patch<uint32_t>("version", 1);
    expect_error(built.bytes, {"version", "v1 is not supported", "expected 2 or 3"});
  }
  SECTION("version 99") {
    auto built = valid;
    built.patch<uint32_t>("version", 99);
    expect_error(built.bytes, {"version", "99 is not supported", "expected 2 or 3"});
  }
  SECTION("big-endian") {
    auto built = valid;
    built.patch<uint32_t>("version", 0x03000000u);
    expect_error(built.bytes, {"version", "big-endian"});
  }
  SECTION("absurd kv count") {
    auto built = valid;
    built.patch<uint64_t>("kv_count", uint64_t{1} << 62);
    expect_error(built.bytes, {"kv_count", "4611686018427387904 entries cannot fit"});
  }
  SECTION("absurd tensor count") {
    auto built = valid;
    built.patch<uint64_t>("tensor_count", std::numeric_limits<uint64_t>::max());
    expect_error(built.bytes, {"tensor_count", "cannot fit"});
  }
}

TEST_CASE("GGUF metadata defects", "[gguf][errors]") {
  const BuiltGguf valid = small_builder().build();
  SECTION("absurd key length") {
    auto built = valid;
    built.patch<uint64_t>("kv1.key", uint64_t{1} << 60);
    expect_error(built.bytes, {"metadata key #1 length", "exceeds the limit of 65535"});
  }
  SECTION("key longer than the rest of the file") {
    auto built = valid;
    built.patch<uint64_t>("kv1.key", 60000);
    expect_error(built.bytes, {"metadata key #1 length", "60000 exceeds the", "bytes left in the file"});
  }
  SECTION("absurd string value length") {
    auto built = valid;
    built.patch<uint64_t>("kv0.value", std::numeric_limits<uint64_t>::max());
    expect_error(built.bytes, {"metadata key #0 'general.architecture' value length", "bytes left"});
  }
  SECTION("absurd array length") {
    auto built = valid;
    built.patch<uint64_t>("kv2.value", uint64_t{1} << 61, 4);
    expect_error(built.bytes, {"metadata key #2 'names' value array length", "exceeds the limit of 16777216"});
    built.patch<uint64_t>("kv2.value", 1000, 4);
    expect_error(built.bytes, {"metadata key #2 'names' value array length", "1000 string elements need at least 8"});
  }
  SECTION("unknown value type") {
    auto built = valid;
    built.patch<uint32_t>("kv1.type", 13);
    expect_error(built.bytes, {"metadata key #1 'llama.block_count' value type", "13 is not a GGUF value type"});
  }
  SECTION("unknown array element type") {
    auto built = valid;
    built.patch<uint32_t>("kv2.value", 99);
    expect_error(built.bytes, {"metadata key #2 'names' value array element type", "99"});
  }
  SECTION("nested array") {
    auto built = valid;
    built.patch<uint32_t>("kv2.value", t::kGgufArray);
    expect_error(built.bytes, {"'names' value array element type", "nested arrays are not supported"});
  }
  SECTION("bool that is neither 0 nor 1") {
    GgufBuilder b;
    b.raw_kv("flag", t::kGgufBool, {7});
    expect_error(b.build().bytes, {"metadata key #0 'flag' value", "expected 0 or 1"});
  }
  SECTION("duplicate key") {
    GgufBuilder b;
    b.u32("a", 1).u32("a", 2);
    expect_error(b.build().bytes, {"metadata key #1 'a'", "duplicate key"});
  }
  SECTION("empty key") {
    GgufBuilder b;
    b.u32("", 1);
    expect_error(b.build().bytes, {"metadata key #0", "key is empty"});
  }
  SECTION("key over 65535 bytes") {
    GgufBuilder b;
    b.u32(std::string(65536, 'k'), 1);
    expect_error(b.build().bytes, {"metadata key #0 length", "65536 exceeds the limit"});
  }
  SECTION("truncated inside a value") {
    auto bytes = valid.bytes;
    bytes.resize(valid.at.at("kv1.value") + 2);
    expect_error(bytes, {"metadata key #1 'llama.block_count' value", "file truncated", "needs 4 bytes"});
  }
  SECTION("bad general.alignment") {
    for (uint32_t alignment : {0u, 3u, 48u}) {
      GgufBuilder b;
      b.u32("general.alignment", alignment);
      expect_error(b.build().bytes, {"metadata 'general.alignment'", std::to_string(alignment), "power of two"});
    }
    GgufBuilder b;
    b.str("general.alignment", "32");
    expect_error(b.build().bytes, {"metadata 'general.alignment'", "found string"});
  }
}

TEST_CASE("GGUF tensor info defects", "[gguf][errors]") {
  const BuiltGguf valid = small_builder().build();
  const std::string q = "tensor 'blk.0.attn_q.weight' ";
  SECTION("n_dims 0 and 5") {
    for (uint32_t n_dims : {0u, 5u, 0xFFFFFFFFu}) {
      auto built = valid;
      built.patch<uint32_t>("tensor0.n_dims", n_dims);
      expect_error(built.bytes, {q + "n_dims", std::to_string(n_dims) + " (expected 1..4)"});
    }
  }
  SECTION("zero dimension") {
    auto built = valid;
    built.patch<uint64_t>("tensor0.dim1", 0);
    expect_error(built.bytes, {q + "dimension #1", "expected >= 1"});
  }
  SECTION("dimensions whose product overflows") {
    GgufBuilder b;
    b.tensor("huge", {uint64_t{1} << 32, uint64_t{1} << 32}, t::kTypeF32, {});
    expect_error(b.build().bytes, {"tensor 'huge' dimension #1", "2^63-1 elements"});
  }
  SECTION("byte size that overflows") {
    GgufBuilder b;
    b.tensor("big", {uint64_t{1} << 62, 1}, t::kTypeF32, {});
    expect_error(b.build().bytes, {"tensor 'big' size", "overflows"});
  }
  SECTION("unknown tensor type") {
    for (uint32_t type : {4u, 31u, 1000u}) {
      auto built = valid;
      built.patch<uint32_t>("tensor0.type", type);
      expect_error(built.bytes, {q + "type", "unknown ggml type id " + std::to_string(type)});
    }
  }
  SECTION("row not a whole number of blocks") {
    GgufBuilder b;
    b.tensor("odd", {48, 2}, t::kTypeQ4_0, std::vector<uint8_t>(100));
    expect_error(b.build().bytes, {"tensor 'odd' dimension #0", "48 is not a multiple of the Q4_0 block size 32"});
  }
  SECTION("misaligned offset") {
    auto built = valid;
    built.patch<uint64_t>("tensor1.offset", 8);
    expect_error(built.bytes, {"tensor 'output_norm.weight' offset", "8 is not a multiple of the alignment 32"});
  }
  SECTION("data beyond the end of the file") {
    for (uint64_t offset : {uint64_t{1} << 20, std::numeric_limits<uint64_t>::max() - 31}) {
      auto built = valid;
      built.patch<uint64_t>("tensor1.offset", offset);
      expect_error(built.bytes, {"tensor 'output_norm.weight' data", "past the end of the file"});
    }
    auto bytes = valid.bytes;
    bytes.resize(bytes.size() - 1);
    expect_error(bytes, {"tensor 'output_norm.weight' data", "32 bytes at offset 96"});
  }
  SECTION("duplicate tensor name") {
    GgufBuilder b;
    b.tensor("w", {4}, t::kTypeF32, std::vector<uint8_t>(16));
    b.tensor("w", {4}, t::kTypeF32, std::vector<uint8_t>(16));
    expect_error(b.build().bytes, {"tensor 'w' name", "duplicate tensor name"});
  }
  SECTION("tensor name over 64 bytes") {
    GgufBuilder b;
    b.tensor(std::string(65, 'n'), {4}, t::kTypeF32, std::vector<uint8_t>(16));
    expect_error(b.build().bytes, {"tensor #0 name length", "65 exceeds the limit of 64"});
  }
  SECTION("truncated inside the tensor infos") {
    auto bytes = valid.bytes;
    bytes.resize(valid.at.at("tensor1.offset") + 3);
    expect_error(bytes, {"tensor 'output_norm.weight' offset", "file truncated"});
  }
}

TEST_CASE("GGUF truncated at every length gives an error naming the file", "[gguf][errors]") {
  const BuiltGguf valid = small_builder().build();
  for (std::size_t length = 0; length < valid.bytes.size(); ++length) {
    INFO("truncated to " << length << " bytes");
    const std::string message = error_message([&] { GgufFile::open_memory(valid.bytes.data(), length, "cut.gguf"); });
    REQUIRE_THAT(message, Catch::StartsWith("cut.gguf: "));
  }
  // Every header field and a sample of lengths through the real file system path.
  for (const auto& [field, offset] : valid.at) {
    INFO("cut inside " << field);
    const std::vector<uint8_t> prefix(valid.bytes.begin(), valid.bytes.begin() + static_cast<long>(offset) + 1);
    const TempFile tmp("cut.gguf", prefix);
    CHECK_THAT(error_message([&] { GgufFile::open(tmp.path()); }), Catch::Contains(tmp.path().string()));
  }
  CHECK_NOTHROW(GgufFile::open_memory(valid.bytes.data(), valid.bytes.size(), "whole.gguf"));
}

TEST_CASE("GGUF strings of any length that fits parse", "[gguf][errors]") {
  GgufBuilder b;
  b.raw_kv("long", t::kGgufString, encoded_string(std::string(100000, 'x')));
  const auto built = b.build();
  const GgufFile file = GgufFile::open_memory(built.bytes.data(), built.bytes.size(), "long.gguf");
  CHECK(file.get_string("long").size() == 100000);
}
