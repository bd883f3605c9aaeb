// Tiny random Phi-3, Qwen3-MoE and Mixtral checkpoints written by transformers (tools/make_moe_checkpoints.py),
// each as a Hugging Face folder and as a GGUF laid out as llama.cpp's converter lays it out, against transformers:
// the last prompt position's logits and 24 greedy tokens (generate with its KV cache) on three prompts, the
// recorded prefill attention maps against eager attention, and the experts each router chose.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/engine/engine.h"
#include "core/model/model.h"
#include "core/trace/hdf5_reader.h"
#include "kernels/common/dequantize.h"
#include "core/trace/hdf5_writer.h"
#include "core/trace/live_trace.h"
#include "tests/support/golden_compare.h"
#include "tests/support/moe_golden_check.h"
#include "tests/support/recorder_run.h"

using namespace kvscope;

namespace {

const std::filesystem::path kDir = std::filesystem::path(KVSCOPE_FIXTURES_DIR) / "hf_moe";

using test::kLogitTolerance;
using test::prompt_logit_diff;
using test::RoutingLog;

const nlohmann::json& golden() {
  static const nlohmann::json json = test::read_json_fixture(kDir / "golden.json");
  return json;
}

void check_against_golden(const std::string& name, const std::string& file) {
  INFO("checkpoint " << name);
  test::check_against_golden(golden()["checkpoints"][name], kDir / file);
}

}  // namespace

TEST_CASE("Phi-3 (fused qkv and gate_up, longrope) matches transformers as a folder and as a GGUF", "[hf][moe][phi3]") {
  const model::Model folder = model::load_model(kDir / "phi3");
  CHECK(folder.config.architecture == "Phi3ForCausalLM");
  CHECK(folder.config.rope_scaling.type == "longrope");
  CHECK(folder.config.rope_long_after == 32);
  // transformers' default: sqrt(1 + ln(max_position_embeddings / original) / ln(original)).
  CHECK(folder.config.rope_attention_factor == Approx(std::sqrt(1.0 + std::log(256.0 / 32.0) / std::log(32.0))));
  const model::Model gguf = model::load_model(kDir / "phi3.gguf");
  CHECK(gguf.config.architecture == "phi3");
  CHECK(gguf.config.rope_freq_divisors == folder.config.rope_freq_divisors);
  CHECK(gguf.config.rope_freq_divisors_long == folder.config.rope_freq_divisors_long);
  CHECK(gguf.config.rope_attention_factor == Approx(folder.config.rope_attention_factor));
  check_against_golden("phi3", "phi3");
  check_against_golden("phi3", "phi3.gguf");
}

TEST_CASE("Phi-4-mini's layout (partial_rotary_factor 0.75) rotates 12 of 16 dimensions, as a folder and a GGUF",
          "[hf][moe][phi3]") {
  const model::Model folder = model::load_model(kDir / "phi4mini");
  CHECK(folder.config.head_dim == 16);
  CHECK(folder.config.rope_dim == 12);
  CHECK(folder.config.rope_freq_divisors.size() == 6);
  CHECK(model::load_model(kDir / "phi4mini.gguf").config.rope_dim == 12);
  check_against_golden("phi4mini", "phi4mini");
  check_against_golden("phi4mini", "phi4mini.gguf");
  model::Model whole = model::load_model(kDir / "phi4mini");
  whole.config.rope_dim = 16;  // every dimension rotated: the factors of pairs 6, 7 would be missing, so drop them
  whole.config.rope_freq_divisors.clear();
  whole.config.rope_freq_divisors_long.clear();
  CHECK(prompt_logit_diff(whole, golden()["checkpoints"]["phi4mini"]["prompts"][0]) > 100 * kLogitTolerance);
}

TEST_CASE("Qwen3-MoE (routed experts, norm_topk_prob) matches transformers as a folder and as a GGUF",
          "[hf][moe][qwen3moe]") {
  const model::Model folder = model::load_model(kDir / "qwen3moe");
  CHECK(folder.config.n_experts == 8);
  CHECK(folder.config.n_experts_used == 2);
  CHECK(folder.config.ffn_dim == 16);  // moe_intermediate_size, not intermediate_size
  CHECK(folder.config.expert_weights_norm);
  check_against_golden("qwen3moe", "qwen3moe");
  check_against_golden("qwen3moe", "qwen3moe.gguf");
}

TEST_CASE("Mixtral (routed experts, llama GGUF with merged expert tensors) matches transformers",
          "[hf][moe][mixtral]") {
  const model::Model gguf = model::load_model(kDir / "mixtral.gguf");
  CHECK(gguf.config.architecture == "llama");
  CHECK(gguf.config.n_experts == 4);
  check_against_golden("mixtral", "mixtral");
  check_against_golden("mixtral", "mixtral.gguf");
}

TEST_CASE("MXFP4 experts (llama.cpp's MXFP4_MOE) dequantize as gguf-py does and run as transformers on those values",
          "[gguf][moe][mxfp4]") {
  const nlohmann::json& g = golden()["checkpoints"]["qwen3moe_mxfp4"];
  const model::Model m = model::load_model(kDir / g["gguf"].get<std::string>());
  CHECK(m.weights.layers[0].expert_gate[0].type == kernels::GgmlType::MXFP4);
  CHECK(m.weights.layers[0].expert_down[0].type == kernels::GgmlType::F32);  // 16-value rows are no whole block
  const auto& check = g["dequantized_row"];
  REQUIRE(check["tensor"] == "blk.0.ffn_gate_exps.weight");
  const kernels::QuantMatrix& expert = m.weights.layers[0].expert_gate[check["expert"].get<int>()];
  std::vector<float> row(static_cast<std::size_t>(expert.cols));
  kernels::dequantize_row(expert.type, expert.row(check["row"].get<int>()), row.data(), expert.cols);
  CHECK(test::max_abs_diff(row, check["values"].get<std::vector<double>>()) == 0.0);  // powers of two times e2m1
  check_against_golden("qwen3moe_mxfp4", g["gguf"].get<std::string>());
}

TEST_CASE("the Phi-3 and MoE fixtures are sensitive to each convention they prove", "[hf][moe]") {
  const auto& checkpoints = golden()["checkpoints"];
  const auto worst_over_prompts = [](const model::Model& m, const nlohmann::json& g) {
    double worst = 0;
    for (const auto& prompt : g["prompts"]) worst = std::max(worst, prompt_logit_diff(m, prompt));
    return worst;
  };
  {
    model::Model phi3 = model::load_model(kDir / "phi3");
    phi3.config.rope_attention_factor = 1.0f;  // longrope's attention factor ignored
    CHECK(worst_over_prompts(phi3, checkpoints["phi3"]) > 100 * kLogitTolerance);
  }
  {
    model::Model phi3 = model::load_model(kDir / "phi3");
    phi3.config.rope_freq_divisors_long.clear();  // short factors past the original context (prompt 1: 92 tokens)
    CHECK(prompt_logit_diff(phi3, checkpoints["phi3"]["prompts"][1]) > 100 * kLogitTolerance);
    CHECK(prompt_logit_diff(phi3, checkpoints["phi3"]["prompts"][0]) <= kLogitTolerance);  // 15 tokens: short anyway
  }
  {
    model::Model qwen3moe = model::load_model(kDir / "qwen3moe.gguf");
    qwen3moe.config.expert_weights_norm = false;  // norm_topk_prob ignored
    CHECK(worst_over_prompts(qwen3moe, checkpoints["qwen3moe"]) > 100 * kLogitTolerance);
  }
  {
    model::Model mixtral = model::load_model(kDir / "mixtral");
    mixtral.config.n_experts_used = 1;  // top-1 instead of top-2
    CHECK(worst_over_prompts(mixtral, checkpoints["mixtral"]) > 100 * kLogitTolerance);
  }
}

TEST_CASE("mixture-of-experts configs kvscope does not compute are refused, naming the field", "[hf][moe]") {
  namespace fs = std::filesystem;
  const fs::path folder = fs::temp_directory_path() / "kvscope_tests" / ("moe_config_" + std::to_string(::getpid()));
  const auto with_field = [&](const std::string& field, const nlohmann::json& value) {
    fs::remove_all(folder);
    fs::create_directories(folder.parent_path());
    fs::copy(kDir / "qwen3moe", folder);
    nlohmann::json config = test::read_json_fixture(kDir / "qwen3moe" / "config.json");
    config[field] = value;
    std::ofstream(folder / "config.json") << config.dump();
  };
  with_field("mlp_only_layers", {1});
  CHECK_THROWS_WITH(model::load_model(folder), Catch::Contains("config.json: field 'mlp_only_layers'"));
  with_field("decoder_sparse_step", 2);
  CHECK_THROWS_WITH(model::load_model(folder), Catch::Contains("field 'decoder_sparse_step'"));
  with_field("num_experts_per_tok", 9);
  CHECK_THROWS_WITH(model::load_model(folder), Catch::Contains("field 'num_experts_per_tok'"));
  fs::remove_all(folder);
}

TEST_CASE("a mixture-of-experts run records its router's choices per token and layer, in the file too",
          "[hf][moe][trace]") {
  namespace fs = std::filesystem;
  const nlohmann::json& g = golden()["checkpoints"]["qwen3moe"];
  const model::Model m = model::load_model(kDir / "qwen3moe.gguf");
  const auto ids = g["prompts"][0]["ids"].get<std::vector<int>>();
  constexpr int kNew = 4;
  const fs::path path = fs::temp_directory_path() / ("kvscope_moe_router_" + std::to_string(::getpid()) + ".h5");
  std::shared_ptr<const trace::RunTrace> live;
  {
    trace::Hdf5Writer writer(path);
    trace::LiveTrace live_trace(std::chrono::milliseconds(0));
    trace::RecordOptions record;
    RoutingLog log;
    // Under a policy that evicts, the rows still follow the fed positions.
    test::run_with_recorder(m, ids, "h2o", "8", kNew, &record, {&writer, &live_trace}, {&log});
    live = live_trace.snapshot();
    writer.close();
    REQUIRE(live->router_k == 2);
    // Every fed token: the prompt and all generated tokens but the last.
    REQUIRE(live->routing.size() == ids.size() + kNew - 1);
    for (std::size_t p = 0; p < live->routing.size(); ++p)
      for (int l = 0; l < m.config.n_layers; ++l) {
        const auto& row = live->routing[p];
        const std::vector<int> recorded = {row.experts[l * 2], row.experts[l * 2 + 1]};
        CHECK(recorded == log.experts[{l, static_cast<int>(p)}]);
        CHECK(row.weights[l * 2] + row.weights[l * 2 + 1] == Approx(1.0).margin(1e-5));
        CHECK(row.weights[l * 2] >= row.weights[l * 2 + 1]);
      }
  }
  // The prompt's rows are transformers' choices.
  for (std::size_t p = 0; p < ids.size(); ++p)
    for (int l = 0; l < m.config.n_layers; ++l) {
      const auto want = g["prompts"][0]["routing"][l][p].get<std::vector<int>>();
      CHECK(want == std::vector<int>{live->routing[p].experts[l * 2], live->routing[p].experts[l * 2 + 1]});
    }
  const trace::TraceView view = trace::read_trace(path);
  REQUIRE(view.runs.size() == 1);
  CHECK(view.runs[0]->router_k == 2);
  CHECK(view.runs[0]->routing == live->routing);
  fs::remove(path);

  // A dense model's trace has no routing.
  const model::Model dense = model::load_model(kDir / "phi3");
  trace::LiveTrace dense_trace(std::chrono::milliseconds(0));
  trace::RecordOptions record;
  test::run_with_recorder(dense, ids, "full", "", 2, &record, {&dense_trace});
  CHECK(dense_trace.snapshot()->router_k == 0);
  CHECK(dense_trace.snapshot()->routing.empty());
}
