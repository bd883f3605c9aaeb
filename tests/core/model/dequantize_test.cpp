// Dequantizers and half-precision conversions against references written here from the format
// descriptions (closed forms in double precision), and against gguf-py's output in the golden file.
#include "kernels/common/dequantize.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/common/error.h"
#include "tests/core/model/gguf_builder.h"
#include "tests/core/model/test_support.h"

using kvscope::model::GgmlType;
using kvscope::test::Rng;

namespace {

// IEEE binary16 as sign * 2^e * 1.m (or 0.m for subnormals), straight from the format definition.
double reference_half(uint16_t h) {
  const int exponent = (h >> 10) & 31;
  const int mantissa = h & 1023;
  double magnitude;
  if (exponent == 31)
    magnitude = mantissa ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (exponent == 0)
    magnitude = std::ldexp(mantissa, -24);
  else
    magnitude = std::ldexp(1024 + mantissa, exponent - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}

// bfloat16: 8 exponent bits (bias 127) and 7 mantissa bits.
double reference_bf16(uint16_t h) {
  const int exponent = (h >> 7) & 255;
  const int mantissa = h & 127;
  double magnitude;
  if (exponent == 255)
    magnitude = mantissa ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (exponent == 0)
    magnitude = std::ldexp(mantissa, -133);
  else
    magnitude = std::ldexp(128 + mantissa, exponent - 134);
  return (h & 0x8000) ? -magnitude : magnitude;
}

// A finite normal half of moderate size, as quantizers write for scales.
uint16_t random_scale(Rng& rng) {
  const auto exponent = static_cast<uint16_t>(5 + rng.below(16));
  return static_cast<uint16_t>((rng.below(2) << 15) | (exponent << 10) | rng.below(1024));
}

void put_half(std::vector<uint8_t>& bytes, std::size_t at, uint16_t h) {
  bytes[at] = static_cast<uint8_t>(h & 0xFF);
  bytes[at + 1] = static_cast<uint8_t>(h >> 8);
}

uint16_t get_half(const std::vector<uint8_t>& bytes, std::size_t at) {
  return static_cast<uint16_t>(bytes[at] | (bytes[at + 1] << 8));
}

std::vector<uint8_t> random_bytes(Rng& rng, std::size_t n) {
  std::vector<uint8_t> bytes(n);
  for (auto& b : bytes) b = rng.byte();
  return bytes;
}

// A reference value with the sum of the magnitudes of its terms, which bounds float rounding error.
struct Expected {
  double value;
  double magnitude;
};

void check_against(GgmlType type, const std::vector<uint8_t>& bytes, const std::vector<Expected>& expected) {
  std::vector<float> got(expected.size());
  kvscope::kernels::dequantize_row(type, bytes.data(), got.data(), static_cast<int64_t>(got.size()));
  for (std::size_t i = 0; i < expected.size(); ++i) {
    INFO("element " << i);
    REQUIRE(std::abs(got[i] - expected[i].value) <= 1e-6 * expected[i].magnitude + 1e-30);
  }
}

// Q4_0: 32 values per 18-byte block; byte j holds element j in its low nibble and j + 16 in its high one.
std::vector<Expected> reference_q4_0(const std::vector<uint8_t>& bytes, int blocks) {
  std::vector<Expected> out;
  for (int b = 0; b < blocks; ++b) {
    const uint8_t* block = bytes.data() + 18 * b;
    const double d = reference_half(get_half(bytes, 18 * b));
    for (int i = 0; i < 32; ++i) {
      const int q = i < 16 ? (block[2 + i] & 15) : (block[2 + i - 16] >> 4);
      out.push_back({d * (q - 8), std::abs(d * (q - 8))});
    }
  }
  return out;
}

std::vector<Expected> reference_q4_1(const std::vector<uint8_t>& bytes, int blocks) {
  std::vector<Expected> out;
  for (int b = 0; b < blocks; ++b) {
    const uint8_t* block = bytes.data() + 20 * b;
    const double d = reference_half(get_half(bytes, 20 * b));
    const double m = reference_half(get_half(bytes, 20 * b + 2));
    for (int i = 0; i < 32; ++i) {
      const int q = i < 16 ? (block[4 + i] & 15) : (block[4 + i - 16] >> 4);
      out.push_back({d * q + m, std::abs(d * q) + std::abs(m)});
    }
  }
  return out;
}

std::vector<Expected> reference_q8_0(const std::vector<uint8_t>& bytes, int blocks) {
  std::vector<Expected> out;
  for (int b = 0; b < blocks; ++b) {
    const double d = reference_half(get_half(bytes, 34 * b));
    for (int i = 0; i < 32; ++i) {
      const int q = static_cast<int8_t>(bytes[34 * b + 2 + i]);
      out.push_back({d * q, std::abs(d * q)});
    }
  }
  return out;
}

// Q4_K: 256 values in 8 groups of 32. The 12 scale bytes are three rows of four (D, M, X): group g < 4 has
// scale D[g] & 63 and min M[g] & 63; group g >= 4 has scale (X[g-4] & 15) | (D[g-4] >> 6) << 4 and min
// (X[g-4] >> 4) | (M[g-4] >> 6) << 4. Element i sits in chunk i / 64, byte 32 * chunk + i % 32, and uses the
// high nibble when i % 64 >= 32.
std::vector<Expected> reference_q4_k(const std::vector<uint8_t>& bytes, int blocks) {
  std::vector<Expected> out;
  for (int b = 0; b < blocks; ++b) {
    const uint8_t* block = bytes.data() + 144 * b;
    const double d = reference_half(get_half(bytes, 144 * b));
    const double dmin = reference_half(get_half(bytes, 144 * b + 2));
    const uint8_t* D = block + 4;
    const uint8_t* M = block + 8;
    const uint8_t* X = block + 12;
    for (int i = 0; i < 256; ++i) {
      const int group = i / 32;
      const int scale = group < 4 ? (D[group] & 63) : ((X[group - 4] & 15) | ((D[group - 4] >> 6) << 4));
      const int min = group < 4 ? (M[group] & 63) : ((X[group - 4] >> 4) | ((M[group - 4] >> 6) << 4));
      const int chunk = i / 64;
      const uint8_t byte = block[16 + 32 * chunk + i % 32];
      const int q = (i % 64 >= 32) ? (byte >> 4) : (byte & 15);
      out.push_back({d * scale * q - dmin * min, std::abs(d * scale * q) + std::abs(dmin * min)});
    }
  }
  return out;
}

// Q6_K: 256 values; element i = 128 * half + 32 * quarter + l has its low 4 bits in
// ql[64 * half + l + 32 * (quarter & 1)] (high nibble for quarters 2 and 3), its top 2 bits in
// qh[32 * half + l] at bit 2 * quarter, and the signed scale of its group of 16, scales[i / 16].
std::vector<Expected> reference_q6_k(const std::vector<uint8_t>& bytes, int blocks) {
  std::vector<Expected> out;
  for (int b = 0; b < blocks; ++b) {
    const uint8_t* block = bytes.data() + 210 * b;
    const double d = reference_half(get_half(bytes, 210 * b + 208));
    for (int i = 0; i < 256; ++i) {
      const int half = i / 128, quarter = (i % 128) / 32, l = i % 32;
      const uint8_t low_byte = block[64 * half + l + 32 * (quarter & 1)];
      const int low = quarter >= 2 ? (low_byte >> 4) : (low_byte & 15);
      const int high = (block[128 + 32 * half + l] >> (2 * quarter)) & 3;
      const int q = (low | (high << 4)) - 32;
      const int scale = static_cast<int8_t>(block[192 + i / 16]);
      out.push_back({d * scale * q, std::abs(d * scale * q)});
    }
  }
  return out;
}

}  // namespace

TEST_CASE("fp16_to_fp32 is exact for every half, including subnormals, infinities and NaN", "[dequantize][fp16]") {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const double expected = reference_half(static_cast<uint16_t>(h));
    const float got = kvscope::kernels::fp16_to_fp32(static_cast<uint16_t>(h));
    INFO("half 0x" << std::hex << h);
    if (std::isnan(expected)) {
      REQUIRE(std::isnan(got));
    } else {
      REQUIRE(static_cast<double>(got) == expected);
      REQUIRE(std::signbit(got) == ((h & 0x8000) != 0));
    }
  }
  CHECK(kvscope::kernels::fp16_to_fp32(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(kvscope::kernels::fp16_to_fp32(0x03FF) == std::ldexp(1023.0f, -24));  // largest subnormal
  CHECK(kvscope::kernels::fp16_to_fp32(0x7BFF) == 65504.0f);
  CHECK(std::isinf(kvscope::kernels::fp16_to_fp32(0xFC00)));
}

TEST_CASE("bf16_to_fp32 is exact for every bfloat16", "[dequantize][bf16]") {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const double expected = reference_bf16(static_cast<uint16_t>(h));
    const float got = kvscope::kernels::bf16_to_fp32(static_cast<uint16_t>(h));
    INFO("bf16 0x" << std::hex << h);
    if (std::isnan(expected))
      REQUIRE(std::isnan(got));
    else
      REQUIRE(static_cast<double>(got) == expected);
  }
}

TEST_CASE("fp32_to_fp16 round-trips every half and rounds to nearest even", "[dequantize][fp16]") {
  using kvscope::kernels::fp32_to_fp16;
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const double value = reference_half(static_cast<uint16_t>(h));
    INFO("half 0x" << std::hex << h);
    if (std::isnan(value))
      REQUIRE(std::isnan(reference_half(fp32_to_fp16(static_cast<float>(value)))));
    else
      REQUIRE(fp32_to_fp16(static_cast<float>(value)) == h);
  }
  CHECK(fp32_to_fp16(65519.99f) == 0x7BFF);
  CHECK(fp32_to_fp16(65520.0f) == 0x7C00);  // the tie goes to the even neighbour, which is infinity
  CHECK(fp32_to_fp16(-1e9f) == 0xFC00);
  CHECK(fp32_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);  // tie between 0 and the smallest subnormal
  CHECK(fp32_to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
  CHECK(fp32_to_fp16(std::ldexp(3.0f, -25)) == 0x0002);  // 1.5 units: tie, to even
  CHECK(fp32_to_fp16(std::ldexp(5.0f, -25)) == 0x0002);  // 2.5 units: tie, to even
  CHECK(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);
  CHECK(fp32_to_fp16(1.0f + std::ldexp(3.0f, -11)) == 0x3C02);
  CHECK(fp32_to_fp16(std::nextafter(std::ldexp(1.0f, -14), 0.0f)) == 0x0400);  // rounds up into the normals
  CHECK(fp32_to_fp16(-0.0f) == 0x8000);

  // Random floats in the half range: the result is a nearest half, and an even one on ties.
  Rng rng(7);
  for (int i = 0; i < 200000; ++i) {
    const float f = static_cast<float>(rng.uniform(-1.0, 1.0) * std::ldexp(1.0, static_cast<int>(rng.below(42)) - 26));
    const uint16_t h = fp32_to_fp16(f);
    const double distance = std::abs(reference_half(h) - f);
    for (int step : {-1, 1}) {
      const auto neighbour = static_cast<uint16_t>((h & 0x7FFF) + step) | (h & 0x8000);
      if ((h & 0x7FFF) == 0 && step < 0) continue;
      const double other = std::abs(reference_half(static_cast<uint16_t>(neighbour)) - f);
      INFO("f = " << f << " h = 0x" << std::hex << h);
      REQUIRE(distance <= other);
      if (distance == other) REQUIRE((h & 1) == 0);
    }
  }
}

TEST_CASE("dequantize_row matches the format definitions on random blocks", "[dequantize]") {
  Rng rng(42);
  const int blocks = 16;
  SECTION("F32 copies") {
    std::vector<float> values = {1.5f, -2.25f, 0.0f, 3e-39f};
    const auto bytes = kvscope::test::f32_bytes(values);
    std::vector<float> got(values.size());
    kvscope::kernels::dequantize_row(GgmlType::F32, bytes.data(), got.data(), 4);
    CHECK(got == values);
  }
  SECTION("F16 and BF16") {
    auto bytes = random_bytes(rng, 2 * 512);
    std::vector<float> got(512);
    kvscope::kernels::dequantize_row(GgmlType::F16, bytes.data(), got.data(), 512);
    for (int i = 0; i < 512; ++i) {
      const double expected = reference_half(get_half(bytes, 2 * i));
      if (std::isnan(expected))
        CHECK(std::isnan(got[i]));
      else
        CHECK(static_cast<double>(got[i]) == expected);
    }
    kvscope::kernels::dequantize_row(GgmlType::BF16, bytes.data(), got.data(), 512);
    for (int i = 0; i < 512; ++i) {
      const double expected = reference_bf16(get_half(bytes, 2 * i));
      if (std::isnan(expected))
        CHECK(std::isnan(got[i]));
      else
        CHECK(static_cast<double>(got[i]) == expected);
    }
  }
  SECTION("Q4_0") {
    auto bytes = random_bytes(rng, 18 * blocks);
    for (int b = 0; b < blocks; ++b) put_half(bytes, 18 * b, random_scale(rng));
    check_against(GgmlType::Q4_0, bytes, reference_q4_0(bytes, blocks));
  }
  SECTION("Q4_1") {
    auto bytes = random_bytes(rng, 20 * blocks);
    for (int b = 0; b < blocks; ++b) {
      put_half(bytes, 20 * b, random_scale(rng));
      put_half(bytes, 20 * b + 2, random_scale(rng));
    }
    check_against(GgmlType::Q4_1, bytes, reference_q4_1(bytes, blocks));
  }
  SECTION("Q8_0") {
    auto bytes = random_bytes(rng, 34 * blocks);
    for (int b = 0; b < blocks; ++b) put_half(bytes, 34 * b, random_scale(rng));
    check_against(GgmlType::Q8_0, bytes, reference_q8_0(bytes, blocks));
  }
  SECTION("Q4_K") {
    auto bytes = random_bytes(rng, 144 * 4);
    for (int b = 0; b < 4; ++b) {
      put_half(bytes, 144 * b, random_scale(rng));
      put_half(bytes, 144 * b + 2, random_scale(rng));
    }
    check_against(GgmlType::Q4_K, bytes, reference_q4_k(bytes, 4));
  }
  SECTION("Q6_K") {
    auto bytes = random_bytes(rng, 210 * 4);
    for (int b = 0; b < 4; ++b) put_half(bytes, 210 * b + 208, random_scale(rng));
    check_against(GgmlType::Q6_K, bytes, reference_q6_k(bytes, 4));
  }
}

TEST_CASE("dequantize_row rejects partial blocks and unsupported types", "[dequantize]") {
  std::vector<uint8_t> bytes(1024);
  std::vector<float> out(512);
  using kvscope::test::error_message;
  CHECK_THAT(error_message([&] { kvscope::kernels::dequantize_row(GgmlType::Q4_1, bytes.data(), out.data(), 33); }),
             Catch::Contains("Q4_1") && Catch::Contains("multiple of 32"));
  CHECK_THAT(error_message([&] { kvscope::kernels::dequantize_row(GgmlType::Q4_K, bytes.data(), out.data(), 32); }),
             Catch::Contains("multiple of 256"));
  CHECK_THAT(error_message([&] { kvscope::kernels::dequantize_row(GgmlType::Q5_K, bytes.data(), out.data(), 256); }),
             Catch::Contains("Q5_K") && Catch::Contains("not supported"));
  CHECK_THAT(error_message([&] { kvscope::kernels::dequantize_row(GgmlType::F32, bytes.data(), out.data(), -1); }),
             Catch::Contains("-1"));
}

TEST_CASE("dequantize_row agrees with gguf-py on the golden random blocks", "[dequantize][golden]") {
  std::ifstream in(std::string(KVSCOPE_FIXTURES_DIR) + "/dequant_smollm2.json");
  REQUIRE(in.good());
  const auto golden = nlohmann::json::parse(in);
  const std::map<std::string, GgmlType> types = {{"F16", GgmlType::F16},   {"BF16", GgmlType::BF16},
                                                 {"Q4_0", GgmlType::Q4_0}, {"Q4_1", GgmlType::Q4_1},
                                                 {"Q8_0", GgmlType::Q8_0}, {"Q4_K", GgmlType::Q4_K},
                                                 {"Q6_K", GgmlType::Q6_K}};
  REQUIRE(golden["random_blocks"].size() == types.size());
  for (const auto& [name, type] : types) {
    INFO("type " << name);
    const auto& entry = golden["random_blocks"][name];
    const std::string hex = entry["bytes"];
    std::vector<uint8_t> bytes(hex.size() / 2);
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
    const std::vector<float> expected = entry["values"];
    REQUIRE(expected.size() == entry["elements"].get<std::size_t>());
    std::vector<float> got(expected.size());
    kvscope::kernels::dequantize_row(type, bytes.data(), got.data(), static_cast<int64_t>(got.size()));
    // gguf-py and kvscope round the same float32 operations, but a compiler may fuse a multiply-add, so
    // differences of an ulp of the largest term are allowed.
    float largest = 1.0f;
    for (float v : expected) largest = std::max(largest, std::abs(v));
    for (std::size_t i = 0; i < expected.size(); ++i) {
      INFO("element " << i);
      REQUIRE(std::abs(got[i] - expected[i]) <= 1e-6f * largest);
    }
  }
}
