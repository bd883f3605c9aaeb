// load_model, default model resolution, and the real model's weights against gguf-py's dequantization.
#include "core/model/model.h"

#include <cstdlib>
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "kernels/common/dequantize.h"
#include "tests/core/model/gguf_builder.h"
#include "tests/core/model/test_support.h"

using kvscope::test::error_message;
using kvscope::test::TempFile;
namespace model = kvscope::model;
namespace t = kvscope::test;

namespace {

// Sets an environment variable for one scope and restores the previous value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value->c_str(), 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

nlohmann::json golden() {
  std::ifstream in(std::string(KVSCOPE_FIXTURES_DIR) + "/dequant_smollm2.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("default_model_path honours KVSCOPE_MODEL and explains a bad one", "[model]") {
  const TempFile tmp("chosen.gguf", {'G', 'G', 'U', 'F'});
  {
    const ScopedEnv env("KVSCOPE_MODEL", tmp.path().string());
    CHECK(model::default_model_path() == tmp.path());
    CHECK(model::resolve_model_path("") == tmp.path());
    CHECK(model::resolve_model_path("/explicit/model.gguf") == "/explicit/model.gguf");
  }
  {
    const ScopedEnv env("KVSCOPE_MODEL", std::string("/nonexistent/kvscope.gguf"));
    CHECK_THAT(error_message([] { model::default_model_path(); }),
               Catch::Contains("/nonexistent/kvscope.gguf") && Catch::Contains("KVSCOPE_MODEL"));
  }
  const ScopedEnv env("KVSCOPE_MODEL", std::nullopt);
  if (t::have_real_model()) {
    CHECK(model::default_model_path() == t::real_model_path());
  } else {
    CHECK_THAT(error_message([] { model::default_model_path(); }),
               Catch::Contains("make") && Catch::Contains("--model"));
  }
}

TEST_CASE("load_model reports the file for a bad model", "[model]") {
  const TempFile tmp("not-a-model.gguf", {'P', 'K', 3, 4, 0, 0, 0, 0});
  CHECK_THAT(error_message([&] { model::load_model(tmp.path()); }),
             Catch::Contains(tmp.path().string()) && Catch::Contains("magic"));
}

TEST_CASE("load_model on the real default model", "[model][real]") {
  KVSCOPE_REQUIRE_REAL_MODEL();
  model::Model m = model::load_model(t::real_model_path());
  CHECK(m.config.n_layers == 30);
  CHECK(m.weights.layers.size() == 30);
  REQUIRE(m.tokenizer != nullptr);
  CHECK(m.tokenizer->vocab_size() == 49152);
  // Moving the model keeps the weights pointing into the same live mapping.
  model::Model moved = std::move(m);
  CHECK(moved.weights.token_embedding.data == moved.gguf()->tensor("token_embd.weight").data);
  CHECK(moved.sha256() == golden()["model_sha256"].get<std::string>());
  CHECK(moved.sha256() == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53");  // scripts/fetch_model.sh
}

TEST_CASE("real model rows dequantize as gguf-py dequantizes them", "[model][real][golden]") {
  KVSCOPE_REQUIRE_REAL_MODEL();
  const auto g = golden();
  const model::GgufFile file = model::GgufFile::open(t::real_model_path());
  const auto weights = model::bind_weights(file, model::read_config(file));
  const std::map<std::string, const model::QuantMatrix*> matrices = {
      {"token_embd.weight", &weights.token_embedding}, {"blk.0.attn_q.weight", &weights.layers[0].wq}};
  REQUIRE(g["tensors"].size() == matrices.size());
  for (const auto& [name, matrix] : matrices) {
    INFO("tensor " << name);
    const auto& entry = g["tensors"][name];
    CHECK(entry["type"].get<std::string>() == model::ggml_type_name(static_cast<uint32_t>(matrix->type)));
    REQUIRE(entry["cols"].get<int>() == matrix->cols);
    for (std::size_t r = 0; r < entry["rows"].size(); ++r) {
      const std::vector<float> expected = entry["rows"][r];
      std::vector<float> got(static_cast<std::size_t>(matrix->cols));
      kvscope::kernels::dequantize_row(matrix->type, matrix->row(static_cast<int>(r)), got.data(), matrix->cols);
      for (std::size_t i = 0; i < got.size(); ++i) {
        INFO("row " << r << " column " << i);
        REQUIRE(std::abs(got[i] - expected[i]) <= 1e-6f);
      }
    }
  }
}
