// Block geometry of the ggml types against gguf-py's table (in the golden file) and the row-size rules.
#include "core/model/ggml_type.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/core/model/test_support.h"

using kvscope::model::GgmlType;

TEST_CASE("ggml type traits match gguf-py's block sizes", "[ggml_type]") {
  std::ifstream in(std::string(KVSCOPE_FIXTURES_DIR) + "/dequant_smollm2.json");
  REQUIRE(in.good());
  const auto sizes = nlohmann::json::parse(in)["block_sizes"];
  int compared = 0;
  for (uint32_t id = 0; id < 64; ++id) {
    const auto* traits = kvscope::model::ggml_type_traits(id);
    if (!traits) continue;
    INFO("type " << traits->name);
    // gguf-py still lists Q8_1 with float scales (40 bytes); ggml writes half scales (36 bytes).
    if (std::string(traits->name) == "Q8_1") {
      CHECK(traits->block_bytes == 36);
      continue;
    }
    REQUIRE(sizes.contains(traits->name));
    CHECK(sizes[traits->name][0].get<int>() == traits->block_elements);
    CHECK(sizes[traits->name][1].get<int>() == traits->block_bytes);
    ++compared;
  }
  CHECK(compared >= 30);
}

TEST_CASE("ggml type ids, names and support", "[ggml_type]") {
  using kvscope::model::ggml_type_name;
  using kvscope::model::ggml_type_traits;
  CHECK(ggml_type_name(0) == "F32");
  CHECK(ggml_type_name(30) == "BF16");
  CHECK(ggml_type_name(14) == "Q6_K");
  CHECK(ggml_type_name(4) == "unknown type 4");  // the removed Q4_2
  CHECK(ggml_type_traits(4) == nullptr);
  CHECK(ggml_type_traits(1000) == nullptr);
  for (const char* name : {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q6_K"}) {
    bool found = false;
    for (uint32_t id = 0; id < 64; ++id)
      if (const auto* t = ggml_type_traits(id); t && std::string(t->name) == name) found = t->supported;
    CHECK(found);
  }
  CHECK_FALSE(ggml_type_traits(static_cast<uint32_t>(GgmlType::Q5_K))->supported);
  CHECK_FALSE(ggml_type_traits(static_cast<uint32_t>(GgmlType::I32))->supported);
}

TEST_CASE("ggml_row_bytes counts whole blocks", "[ggml_type]") {
  using kvscope::model::ggml_row_bytes;
  CHECK(ggml_row_bytes(GgmlType::F32, 576) == 2304);
  CHECK(ggml_row_bytes(GgmlType::F16, 3) == 6);
  CHECK(ggml_row_bytes(GgmlType::Q4_1, 576) == 18 * 20);
  CHECK(ggml_row_bytes(GgmlType::Q8_0, 576) == 18 * 34);
  CHECK(ggml_row_bytes(GgmlType::Q6_K, 512) == 2 * 210);
  CHECK(ggml_row_bytes(GgmlType::Q4_0, 0) == 0);
  CHECK_THAT(kvscope::test::error_message([] { ggml_row_bytes(GgmlType::Q4_K, 576); }),
             Catch::Contains("Q4_K") && Catch::Contains("multiple of 256"));
  CHECK_THAT(kvscope::test::error_message([] { ggml_row_bytes(static_cast<GgmlType>(77), 32); }),
             Catch::Contains("77"));
  CHECK_THROWS_AS(ggml_row_bytes(GgmlType::Q8_0, ~0ull / 32 * 32), kvscope::Error);
}
