#pragma once
// Comparing the engine with golden files made by an independent implementation: raw float32 logits, JSON
// fixtures, and greedy continuations that may part only where the reference itself nearly tied.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvscope::test {

inline nlohmann::json read_json_fixture(const std::filesystem::path& path) {
  std::ifstream in(path);
  INFO("fixture " << path);
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

// n little-endian float32 values, no header.
inline std::vector<float> read_f32_file(const std::filesystem::path& path, std::size_t n) {
  std::ifstream in(path, std::ios::binary);
  INFO("fixture " << path);
  REQUIRE(in);
  std::vector<float> v(n);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float)));
  REQUIRE(in.gcount() == static_cast<std::streamsize>(n * sizeof(float)));
  return v;
}

template <class A, class B>
double max_abs_diff(const A& a, const B& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - double(b[i])));
  return worst;
}

// Two implementations within `tolerance` of each other may only pick differently where the reference's own
// top-2 margin is below twice that; after such a step the sequences legitimately diverge.
inline void check_greedy_matches(const std::vector<int>& got, const std::vector<int>& expected,
                                 const std::vector<double>& margins, double tolerance) {
  REQUIRE(got.size() == expected.size());
  for (std::size_t k = 0; k < expected.size(); ++k) {
    if (got[k] == expected[k]) continue;
    INFO("step " << k << ": got " << got[k] << ", reference " << expected[k] << ", reference margin " << margins[k]);
    REQUIRE(margins[k] < 2 * tolerance);
    WARN("greedy continuation diverges at step " << k << " where the reference margin is " << margins[k]);
    return;
  }
}

}  // namespace kvscope::test
