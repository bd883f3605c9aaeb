// Half-float conversion against IEEE 754 binary16 values worked out by hand, and the compiler's _Float16.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/trace/float16.h"

using namespace kvscope::trace;

TEST_CASE("float_to_half on known values", "[float16]") {
  CHECK(float_to_half(0.0f) == 0x0000);
  CHECK(float_to_half(-0.0f) == 0x8000);
  CHECK(float_to_half(1.0f) == 0x3c00);
  CHECK(float_to_half(-2.0f) == 0xc000);
  CHECK(float_to_half(0.5f) == 0x3800);
  CHECK(float_to_half(65504.0f) == 0x7bff);                  // largest finite half
  CHECK(float_to_half(65520.0f) == 0x7c00);                  // rounds up to infinity
  CHECK(float_to_half(6.103515625e-05f) == 0x0400);          // smallest normal
  CHECK(float_to_half(5.9604644775390625e-08f) == 0x0001);   // smallest subnormal
  CHECK(float_to_half(2.9802322387695312e-08f) == 0x0000);   // half of it: ties to even (0)
  CHECK(float_to_half(1.0f + 1.0f / 2048) == 0x3c00);        // tie between 1 and 1+2^-10: even
  CHECK(float_to_half(1.0f + 3.0f / 2048) == 0x3c02);        // tie between odd and even: even
  CHECK(float_to_half(std::numeric_limits<float>::infinity()) == 0x7c00);
  const uint16_t nan = float_to_half(std::numeric_limits<float>::quiet_NaN());
  CHECK((nan & 0x7c00) == 0x7c00);
  CHECK((nan & 0x03ff) != 0);
}

TEST_CASE("half_to_float inverts float_to_half on every half value", "[float16]") {
  int mismatches = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    mismatches += float_to_half(f) != h;
  }
  CHECK(mismatches == 0);
  CHECK(half_to_float(0x3c00) == 1.0f);
  CHECK(half_to_float(0x0001) == 5.9604644775390625e-08f);
}

TEST_CASE("float_to_half agrees with the compiler's _Float16 on a sweep", "[float16]") {
  int mismatches = 0;
  for (uint64_t i = 0; i < (1ull << 32); i += 65537) {
    const uint32_t bits = static_cast<uint32_t>(i);
    float f;
    std::memcpy(&f, &bits, sizeof f);
    if (std::isnan(f)) continue;
    const _Float16 r = static_cast<_Float16>(f);
    uint16_t want;
    std::memcpy(&want, &r, sizeof want);
    mismatches += float_to_half(f) != want;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("floats_to_half (vectorised) rounds exactly like float_to_half", "[float16]") {
  std::vector<float> in;
  for (uint64_t i = 0; i < (1ull << 32); i += 104729) {
    const uint32_t bits = static_cast<uint32_t>(i);
    float f;
    std::memcpy(&f, &bits, sizeof f);
    if (!std::isnan(f)) in.push_back(f);
  }
  std::vector<uint16_t> out(in.size());
  floats_to_half(in.data(), in.size(), out.data());
  int mismatches = 0;
  for (std::size_t i = 0; i < in.size(); ++i) mismatches += out[i] != float_to_half(in[i]);
  CHECK(mismatches == 0);
  CHECK(in.size() > 40000);
}
