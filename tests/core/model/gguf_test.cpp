// GGUF reader on valid files built in the test: every metadata type, getters, tensor infos and data.
#include "core/model/gguf.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "tests/core/model/gguf_builder.h"
#include "tests/core/model/test_support.h"

using kvscope::model::GgmlType;
using kvscope::model::GgufArray;
using kvscope::model::GgufFile;
using kvscope::test::error_message;
using kvscope::test::GgufBuilder;
using kvscope::test::TempFile;
namespace t = kvscope::test;

namespace {

GgufBuilder every_type_builder() {
  GgufBuilder b;
  b.u8("u8", 200)
      .i8("i8", -100)
      .u16("u16", 60000)
      .i16("i16", -30000)
      .u32("u32", 4000000000u)
      .i32("i32", -2000000000)
      .f32("f32", 1.25f)
      .boolean("bool.true", true)
      .boolean("bool.false", false)
      .str("string", "h\xC3\xA9llo")
      .str("string.empty", "")
      .u64("u64", 18000000000000000000ull)
      .u64("u64.small", 7)
      .i64("i64", -9000000000000000000ll)
      .f64("f64", -2.5e300)
      .array<uint8_t>("array.u8", t::kGgufU8, {1, 2, 255})
      .array<int8_t>("array.i8", t::kGgufI8, {-1, 2})
      .array<uint16_t>("array.u16", t::kGgufU16, {65535})
      .array<int16_t>("array.i16", t::kGgufI16, {-32768, 32767})
      .array<uint32_t>("array.u32", t::kGgufU32, {1, 4294967295u})
      .array<int32_t>("array.i32", t::kGgufI32, {-5, 6, 7})
      .array<float>("array.f32", t::kGgufF32, {0.5f, -1.5f})
      .array<uint8_t>("array.bool", t::kGgufBool, {1, 0, 1})
      .array<uint64_t>("array.u64", t::kGgufU64, {1ull << 40})
      .array<int64_t>("array.i64", t::kGgufI64, {-(1ll << 40)})
      .array<double>("array.f64", t::kGgufF64, {1e-300, 3.0})
      .array<uint32_t>("array.empty", t::kGgufI32, {})
      .string_array("array.string", {"a", "", "<|im_start|>"});
  return b;
}

template <class T>
T scalar(const GgufFile& file, const std::string& key) {
  return std::get<T>(file.metadata().at(key));
}

const GgufArray& array(const GgufFile& file, const std::string& key) {
  return *std::get<std::shared_ptr<GgufArray>>(file.metadata().at(key));
}

}  // namespace

TEST_CASE("GGUF metadata of every value type parses, in v2 and v3", "[gguf]") {
  for (uint32_t version : {2u, 3u}) {
    INFO("version " << version);
    auto builder = every_type_builder();
    builder.version = version;
    const TempFile tmp("types.gguf", builder.build().bytes);
    const GgufFile file = GgufFile::open(tmp.path());
    CHECK(file.version() == version);
    CHECK(file.tensors().empty());
    CHECK(file.alignment() == 32);
    CHECK(file.metadata().size() == 28);

    CHECK(scalar<uint8_t>(file, "u8") == 200);
    CHECK(scalar<int8_t>(file, "i8") == -100);
    CHECK(scalar<uint16_t>(file, "u16") == 60000);
    CHECK(scalar<int16_t>(file, "i16") == -30000);
    CHECK(scalar<uint32_t>(file, "u32") == 4000000000u);
    CHECK(scalar<int32_t>(file, "i32") == -2000000000);
    CHECK(scalar<float>(file, "f32") == 1.25f);
    CHECK(scalar<bool>(file, "bool.true"));
    CHECK_FALSE(scalar<bool>(file, "bool.false"));
    CHECK(scalar<std::string>(file, "string") == "h\xC3\xA9llo");
    CHECK(scalar<std::string>(file, "string.empty").empty());
    CHECK(scalar<uint64_t>(file, "u64") == 18000000000000000000ull);
    CHECK(scalar<int64_t>(file, "i64") == -9000000000000000000ll);
    CHECK(scalar<double>(file, "f64") == -2.5e300);

    CHECK(array(file, "array.u8").element_type == t::kGgufU8);
    CHECK(std::get<uint8_t>(array(file, "array.u8").values[2]) == 255);
    CHECK(std::get<int8_t>(array(file, "array.i8").values[0]) == -1);
    CHECK(std::get<uint16_t>(array(file, "array.u16").values[0]) == 65535);
    CHECK(std::get<int16_t>(array(file, "array.i16").values[0]) == -32768);
    CHECK(std::get<uint32_t>(array(file, "array.u32").values[1]) == 4294967295u);
    CHECK(std::get<int32_t>(array(file, "array.i32").values[0]) == -5);
    CHECK(std::get<float>(array(file, "array.f32").values[1]) == -1.5f);
    CHECK(std::get<bool>(array(file, "array.bool").values[0]));
    CHECK_FALSE(std::get<bool>(array(file, "array.bool").values[1]));
    CHECK(std::get<uint64_t>(array(file, "array.u64").values[0]) == 1ull << 40);
    CHECK(std::get<int64_t>(array(file, "array.i64").values[0]) == -(1ll << 40));
    CHECK(std::get<double>(array(file, "array.f64").values[0]) == 1e-300);
    CHECK(array(file, "array.empty").values.empty());
    CHECK(array(file, "array.empty").element_type == t::kGgufI32);
    CHECK(kvscope::model::gguf_value_type_name(file.metadata().at("array.string")) == "array of string");
    CHECK(kvscope::model::gguf_value_type_name(file.metadata().at("u64")) == "uint64");
  }
}

TEST_CASE("GGUF typed getters convert where the value fits and name the key otherwise", "[gguf]") {
  const TempFile tmp("getters.gguf", every_type_builder().build().bytes);
  const GgufFile file = GgufFile::open(tmp.path());
  const std::string path = tmp.path().string();

  CHECK(file.get_int("u8") == 200);
  CHECK(file.get_int("i16") == -30000);
  CHECK(file.get_int("u32") == 4000000000ll);
  CHECK(file.get_int("u64.small") == 7);
  CHECK(file.get_int("i64") == -9000000000000000000ll);
  CHECK(file.get_int("missing", 42) == 42);
  CHECK(file.get_float("f32") == 1.25);
  CHECK(file.get_float("f64") == -2.5e300);
  CHECK(file.get_float("i32") == -2000000000.0);
  CHECK(file.get_float("missing", 0.5) == 0.5);
  CHECK(file.get_bool("bool.true", false));
  CHECK(file.get_bool("missing", true));
  CHECK(file.get_string("string") == "h\xC3\xA9llo");
  CHECK(file.get_string("missing", "fallback") == "fallback");
  CHECK(file.get_string_array("array.string") == std::vector<std::string>{"a", "", "<|im_start|>"});
  CHECK(file.get_float_array("array.f32") == std::vector<float>{0.5f, -1.5f});
  CHECK(file.get_float_array("array.i32") == std::vector<float>{-5.0f, 6.0f, 7.0f});
  CHECK(file.get_int_array("array.i32") == std::vector<int64_t>{-5, 6, 7});
  CHECK(file.get_int_array("array.u64") == std::vector<int64_t>{1ll << 40});
  CHECK(file.get_int_array("array.empty").empty());

  auto expect = [&](auto fn, const std::string& key, const std::string& expected) {
    const std::string message = error_message(fn);
    CHECK_THAT(message, Catch::Contains(path) && Catch::Contains("'" + key + "'") && Catch::Contains(expected));
  };
  expect([&] { file.get_int("u64"); }, "u64", "fits in int64");
  expect([&] { file.get_int("string"); }, "string", "expected an integer");
  expect([&] { file.get_int("bool.true"); }, "bool.true", "found bool");
  expect([&] { file.get_int("missing"); }, "missing", "missing");
  expect([&] { file.get_float("string"); }, "string", "expected a number");
  expect([&] { file.get_bool("u8", false); }, "u8", "expected a bool");
  expect([&] { file.get_string("u32"); }, "u32", "found uint32");
  expect([&] { file.get_string("missing"); }, "missing", "missing");
  expect([&] { file.get_string_array("array.i32"); }, "array.i32", "found array of int32");
  expect([&] { file.get_string_array("string"); }, "string", "found string");
  expect([&] { file.get_float_array("array.string"); }, "array.string", "array of string");
  expect([&] { file.get_int_array("array.f32"); }, "array.f32", "element #0");
}

TEST_CASE("GGUF tensor infos give shapes, sizes and data inside the mapping", "[gguf]") {
  const std::vector<float> values = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  for (uint32_t alignment : {32u, 64u, 1u}) {
    INFO("alignment " << alignment);
    GgufBuilder b;
    b.str("general.architecture", "llama");
    if (alignment != 32) b.alignment(alignment);
    b.tensor("a", {3, 2}, t::kTypeF32, t::f32_bytes(values));
    b.tensor("b", {64, 2, 1}, t::kTypeQ8_0, t::tensor_bytes(t::kTypeQ8_0, 128, 3));
    b.tensor("c.weight", {5}, t::kTypeF16, std::vector<uint8_t>(10, 0x11));
    const auto built = b.build();
    const TempFile tmp("tensors.gguf", built.bytes);
    const GgufFile file = GgufFile::open(tmp.path());
    CHECK(file.alignment() == alignment);
    CHECK(file.file_size() == built.bytes.size());
    REQUIRE(file.tensors().size() == 3);

    const auto& a = file.tensor("a");
    CHECK(a.shape == std::vector<uint64_t>{3, 2});
    CHECK(a.type == GgmlType::F32);
    CHECK(a.elements() == 6);
    CHECK(a.n_bytes == 24);
    CHECK(a.offset == 0);
    CHECK(std::memcmp(a.data, values.data(), 24) == 0);

    const auto& b8 = file.tensor("b");
    CHECK(b8.shape == std::vector<uint64_t>{64, 2, 1});
    CHECK(b8.type == GgmlType::Q8_0);
    CHECK(b8.n_bytes == 4 * 34);
    CHECK(b8.offset % alignment == 0);
    CHECK(std::memcmp(b8.data, built.bytes.data() + built.at.at("tensor1.data"), b8.n_bytes) == 0);

    const auto* c = file.find_tensor("c.weight");
    REQUIRE(c != nullptr);
    CHECK(c->n_bytes == 10);
    CHECK(c->data[9] == 0x11);
    CHECK(file.find_tensor("nope") == nullptr);
    CHECK_THAT(error_message([&] { file.tensor("nope"); }),
               Catch::Contains(tmp.path().string()) && Catch::Contains("tensor 'nope'") && Catch::Contains("not found"));
  }
}

TEST_CASE("GgufFile moves keep tensor data valid, and open_memory reads the same as open", "[gguf]") {
  const auto built = t::tiny_llama_builder().build();
  const TempFile tmp("tiny.gguf", built.bytes);
  GgufFile from_disk = GgufFile::open(tmp.path());
  GgufFile from_memory = GgufFile::open_memory(built.bytes.data(), built.bytes.size(), "tiny-in-memory.gguf");
  CHECK(from_memory.path().string() == "tiny-in-memory.gguf");
  REQUIRE(from_disk.tensors().size() == from_memory.tensors().size());
  for (std::size_t i = 0; i < from_disk.tensors().size(); ++i) {
    const auto& x = from_disk.tensors()[i];
    const auto& y = from_memory.tensors()[i];
    CHECK(x.name == y.name);
    CHECK(x.shape == y.shape);
    CHECK(x.n_bytes == y.n_bytes);
    CHECK(std::memcmp(x.data, y.data, x.n_bytes) == 0);
  }
  GgufFile moved = std::move(from_disk);
  const auto& embd = moved.tensor("token_embd.weight");
  CHECK(std::memcmp(embd.data, built.bytes.data() + built.at.at("tensor0.data"), embd.n_bytes) == 0);
  moved = std::move(from_memory);
  CHECK(moved.path().string() == "tiny-in-memory.gguf");
  CHECK(moved.tensor("token_embd.weight").data[0] == built.bytes[built.at.at("tensor0.data")]);
}

TEST_CASE("GGUF reader opens the real default model", "[gguf][real]") {
  KVSCOPE_REQUIRE_REAL_MODEL();
  const GgufFile file = GgufFile::open(kvscope::test::real_model_path());
  CHECK(file.version() == 3);
  CHECK(file.tensors().size() == 272);
  CHECK(file.metadata().size() == 33);
  CHECK(file.get_string("general.architecture") == "llama");
  CHECK(file.get_string_array("tokenizer.ggml.tokens").size() == 49152);
  CHECK(file.get_string_array("tokenizer.ggml.merges").size() == 48900);
  CHECK(file.get_int_array("tokenizer.ggml.token_type").size() == 49152);
  int q4_1 = 0, f32 = 0, q8_0 = 0;
  for (const auto& t : file.tensors()) {
    q4_1 += t.type == GgmlType::Q4_1;
    f32 += t.type == GgmlType::F32;
    q8_0 += t.type == GgmlType::Q8_0;
  }
  CHECK(q4_1 == 210);
  CHECK(f32 == 61);
  CHECK(q8_0 == 1);
  const auto& embd = file.tensor("token_embd.weight");
  CHECK(embd.shape == std::vector<uint64_t>{576, 49152});
  CHECK(embd.offset == 0);
  CHECK(embd.n_bytes == 30081024);
  CHECK(file.find_tensor("output.weight") == nullptr);
}
