// The safetensors reader on images written by tests/core/model/safetensors_builder.h: values, and one clear
// error for each way a header can be wrong.
#include <catch2/catch.hpp>

#include "core/model/safetensors.h"
#include "kernels/common/dequantize.h"
#include "tests/core/model/safetensors_builder.h"
#include "tests/core/model/test_support.h"

using kvscope::model::SafetensorsFile;
namespace t = kvscope::test;

namespace {

std::vector<uint8_t> u16_bytes(const std::vector<uint16_t>& values) {
  std::vector<uint8_t> bytes(values.size() * 2);
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

SafetensorsFile open_image(const std::vector<uint8_t>& bytes) {
  return SafetensorsFile::open_memory(bytes.data(), bytes.size(), "test.safetensors");
}

// An image whose header is `header` verbatim, followed by `data_bytes` zero bytes.
std::vector<uint8_t> raw_image(const std::string& header, std::size_t data_bytes) {
  std::vector<uint8_t> bytes(8 + header.size() + data_bytes);
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  std::memcpy(bytes.data() + 8, header.data(), header.size());
  return bytes;
}

std::string error_of(const std::vector<uint8_t>& bytes) {
  return t::error_message([&] { open_image(bytes); });
}

}  // namespace

TEST_CASE("safetensors tensors come back with dtype, shape, offsets and values", "[safetensors]") {
  // 1.0, -2.5, 0.5 in bfloat16 (sign|8-bit exponent|7-bit mantissa) and binary16.
  const auto bytes = t::safetensors_image({{"a", "F32", {2, 3}, t::f32_bytes({1, 2, 3, 4, 5, 6})},
                                           {"b", "BF16", {3}, u16_bytes({0x3F80, 0xC020, 0x3F00})},
                                           {"c", "F16", {3}, u16_bytes({0x3C00, 0xC100, 0x3800})},
                                           {"empty", "F32", {0, 4}, {}}},
                                          {{"format", "pt"}});
  const SafetensorsFile file = open_image(bytes);
  REQUIRE(file.tensors().size() == 4);
  CHECK(file.metadata().at("format") == "pt");
  const auto* a = file.find_tensor("a");
  REQUIRE(a != nullptr);
  CHECK(a->shape == std::vector<uint64_t>{2, 3});
  CHECK(a->n_bytes == 24);
  CHECK(a->type == kvscope::model::GgmlType::F32);
  for (const char* name : {"b", "c"}) {
    const auto* tensor = file.find_tensor(name);
    REQUIRE(tensor != nullptr);
    float values[3];
    kvscope::kernels::dequantize_row(tensor->type, tensor->data, values, 3);
    CHECK(values[0] == 1.0f);
    CHECK(values[1] == -2.5f);
    CHECK(values[2] == 0.5f);
  }
  CHECK(file.find_tensor("b")->dtype == "BF16");
  CHECK(file.find_tensor("empty")->n_bytes == 0);
  CHECK(file.find_tensor("missing") == nullptr);
}

TEST_CASE("safetensors header errors name the file, the tensor and the field", "[safetensors]") {
  using Catch::Contains;
  CHECK_THAT(error_of({1, 2, 3}), Contains("test.safetensors") && Contains("too short"));
  std::vector<uint8_t> too_long = raw_image("{}", 0);
  too_long[0] = 0xFF;  // a header length beyond the end of the file
  CHECK_THAT(error_of(too_long), Contains("header length 255 does not fit"));
  CHECK_THAT(error_of(raw_image("[1, 2]  ", 0)), Contains("does not start with '{'"));
  CHECK_THAT(error_of(raw_image("{\"a\": ", 0)), Contains("not valid JSON"));
  CHECK_THAT(error_of(raw_image(R"({"a": {"a": {"a": {"a": {"a": 1}}}}})", 0)), Contains("nested deeper"));
  CHECK_THAT(error_of(raw_image(R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", 4)),
             Contains("tensor 'w' field 'dtype': missing"));
  CHECK_THAT(error_of(raw_image(R"({"w": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})", 8)),
             Contains("tensor 'w' field 'dtype'") && Contains("\"I64\" is not supported (supported: F32, F16, BF16, U8)"));
  CHECK_THAT(error_of(raw_image(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4)),
             Contains("field 'shape'"));
  CHECK_THAT(
      error_of(raw_image(R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 8], "data_offsets": [0, 4]}})", 4)),
      Contains("overflows"));
  CHECK_THAT(error_of(raw_image(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", 4)),
             Contains("tensor 'w' field 'data_offsets'") && Contains("needs 8"));
  CHECK_THAT(error_of(raw_image(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", 8)),
             Contains("begin <= end"));
  CHECK_THAT(error_of(raw_image(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4)),
             Contains("truncated"));
  CHECK_THAT(error_of(raw_image(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8)),
             Contains("starts at byte 4 (expected 0"));
  CHECK_THAT(error_of(raw_image(R"({"v": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                                R"( "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                                8)),
             Contains("gaps or overlaps"));
  CHECK_THAT(error_of(raw_image(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 12)),
             Contains("cover 4 of the 12"));
  CHECK_THAT(error_of(raw_image(R"({"__metadata__": {"k": 1}})", 0)), Contains("'__metadata__' entry 'k'"));
  CHECK_THAT(t::error_message([] { SafetensorsFile::open("/nonexistent/model.safetensors"); }),
             Contains("/nonexistent/model.safetensors") && Contains("cannot open"));
}
