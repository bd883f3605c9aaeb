// Gemma 2 and Gemma 3 (text) against transformers (tools/make_gemma_checkpoints.py, tests/fixtures/hf_gemma):
// logits and 24 greedy tokens on three prompts, from the Hugging Face folders and the GGUF files laid out as
// llama.cpp's converter writes them; attention rows against transformers' eager attention (soft-cap and
// sliding window included); and the sliding-window cache: a local layer never holds more than its window,
// under every swa= mode, and the bytes each mode keeps are the closed form the modes promise.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/engine/engine.h"
#include "core/model/model.h"
#include "core/policy/registry.h"
#include "core/trace/exact_attention.h"
#include "core/trace/hdf5_reader.h"
#include "kernels/common/dequantize.h"
#include "tests/support/golden_compare.h"

using namespace kvscope;

namespace {

const std::filesystem::path kDir = std::filesystem::path(KVSCOPE_FIXTURES_DIR) / "hf_gemma";
constexpr double kLogitTolerance = 2e-3;      // logits within +-10; float32 in another summation order
constexpr double kAttentionTolerance = 1e-4;  // the bound for attention maps

// golden.json's checkpoints and the multimodal Gemma 3 of golden_multimodal.json (tools/
// make_gemma3_multimodal_checkpoint.py), whose text part is checked as the text checkpoints are.
const nlohmann::json& golden() {
  static const nlohmann::json json = [] {
    nlohmann::json all = test::read_json_fixture(kDir / "golden.json");
    const nlohmann::json multimodal = test::read_json_fixture(kDir / "golden_multimodal.json");
    for (const auto& [name, checkpoint] : multimodal["checkpoints"].items()) all["checkpoints"][name] = checkpoint;
    return all;
  }();
  return json;
}

double max_diff_to_prompt(const model::Model& m, const nlohmann::json& prompt) {
  engine::Engine engine(m);
  return test::max_abs_diff(engine.prompt_logits(prompt["ids"].get<std::vector<int>>()),
                            prompt["final_logits"].get<std::vector<double>>());
}

// The checkpoint's folder and, where written, its GGUF file.
std::vector<std::filesystem::path> formats_of(const std::string& name, const nlohmann::json& g) {
  std::vector<std::filesystem::path> paths = {kDir / name};
  if (g.contains("gguf")) paths.push_back(kDir / g["gguf"].get<std::string>());
  return paths;
}

// Probability rows as the engine streams them to the recorder, keyed by (layer, head, query position) and
// spread over key positions: a prefill row's columns are positions 0.., a decode row's the cache's entries,
// which hold the last n_cols positions (a local layer's window, or everything).
class RowCollector final : public engine::RunObserver {
 public:
  explicit RowCollector(int prompt_length) : prompt_length_(prompt_length) {}
  engine::ObservationRequest request(int, engine::Phase) const override {
    engine::ObservationRequest r;
    r.rows = true;
    return r;
  }
  void on_rows(int layer, int head, int first_row, int n_rows, int n_cols, const float* probs) override {
    const bool decode = decode_;
    for (int r = 0; r < n_rows; ++r) {
      const int position = decode ? prompt_length_ : first_row + r;
      std::vector<float>& row = rows[{layer, head, position}];
      row.assign(static_cast<std::size_t>(position) + 1, 0.0f);
      const int first_key = decode ? position + 1 - n_cols : 0;
      for (int j = 0; j < n_cols && first_key + j <= position; ++j)
        row[first_key + j] = probs[static_cast<std::size_t>(r) * n_cols + j];
    }
  }
  void on_step_end(const engine::StepInfo&, const cache::KVCache&, int, float) override { decode_ = true; }
  std::map<std::tuple<int, int, int>, std::vector<float>> rows;

 private:
  int prompt_length_;
  bool decode_ = false;
};

// Fails the test the moment a sliding-window layer holds more than its window: after every step, and in every
// decode step's attention (the entries the query attended to).
class WindowWatch final : public engine::RunObserver {
 public:
  explicit WindowWatch(const model::ModelConfig& c) : c_(c) {}
  engine::ObservationRequest request(int, engine::Phase) const override {
    engine::ObservationRequest r;
    r.last_row = true;
    return r;
  }
  void on_observation(const engine::AttentionObservation& obs) override {
    if (obs.phase != engine::Phase::Decode || !c_.is_local(obs.layer)) return;
    for (int n : obs.n_keys) max_decode_keys = std::max(max_decode_keys, n);
  }
  void on_step_end(const engine::StepInfo&, const cache::KVCache& cache, int, float) override {
    for (int l = 0; l < c_.n_layers; ++l)
      for (int h = 0; h < c_.n_kv_heads; ++h)
        if (c_.is_local(l)) max_local_entries = std::max(max_local_entries, cache.size(l, h));
    ++steps;
  }
  int max_local_entries = 0, max_decode_keys = 0, steps = 0;

 private:
  const model::ModelConfig& c_;
};

}  // namespace

TEST_CASE("Gemma 2 and Gemma 3 folders and GGUF files match transformers on three prompts x 24 tokens",
          "[gemma][synthetic]") {
  int gguf_files = 0;
  for (const auto& [name, g] : golden()["checkpoints"].items()) {
    for (const auto& path : formats_of(name, g)) {
      INFO("checkpoint " << path.filename().string() << " (" << g["architecture"].get<std::string>() << ")");
      const model::Model m = model::load_model(path);
      gguf_files += m.format() == model::ModelFormat::Gguf ? 1 : 0;
      CHECK(m.config.sliding_window == g["sliding_window"].get<int>());
      for (int l = 0; l < m.config.n_layers; ++l)
        CHECK(m.config.is_local(l) == (g["layer_types"][l] == "sliding_attention"));
      engine::Engine engine(m);
      for (const auto& prompt : g["prompts"]) {
        INFO("prompt " << prompt["text"].get<std::string>().substr(0, 40));
        const auto ids = prompt["ids"].get<std::vector<int>>();
        CHECK(m.tokenizer->encode(prompt["text"].get<std::string>(), true) ==
              std::vector<int>(ids.begin() + 1, ids.end()));  // ids[0] is <bos>
        const double diff = max_diff_to_prompt(m, prompt);
        INFO("max |logit difference| " << diff);
        CHECK(diff <= kLogitTolerance);
        engine::GenerateOptions options;
        options.stop_at_end_of_generation = false;
        const auto expected = prompt["greedy"]["ids"].get<std::vector<int>>();
        options.max_new_tokens = static_cast<int>(expected.size());
        const auto result = engine.generate(ids, options);
        test::check_greedy_matches(result.generated_tokens, expected,
                                   prompt["greedy"]["margin_top1_top2"].get<std::vector<double>>(), kLogitTolerance);
      }
    }
  }
  CHECK(gguf_files == 2);
}

TEST_CASE("Gemma configs: layer types, local RoPE, soft-caps and the query scale as the checkpoints give them",
          "[gemma][synthetic]") {
  const model::Model gemma3 = model::load_model(kDir / "gemma3");
  CHECK(gemma3.config.local_layer_count() == 5);
  CHECK_FALSE(gemma3.config.is_local(5));
  CHECK(gemma3.config.rope_local_base == 10000.0f);
  CHECK(gemma3.config.rope_base == 1e6f);
  CHECK(gemma3.config.rope_scaling.type == "linear");
  CHECK(gemma3.config.qk_norm);
  CHECK(gemma3.config.query_scale == 1.0f);
  CHECK(gemma3.config.attn_logit_softcap == 0.0f);
  const model::Model gemma3_gguf = model::load_model(kDir / "gemma3.gguf");
  CHECK(gemma3_gguf.config.rope_scaling.type == "linear");
  CHECK(gemma3_gguf.config.rope_freq_divisors == gemma3.config.rope_freq_divisors);
  const model::Model gemma2 = model::load_model(kDir / "gemma2.gguf");
  CHECK(gemma2.config.attn_logit_softcap == 2.0f);
  CHECK(gemma2.config.final_logit_softcap == 5.0f);
  CHECK(gemma2.config.local_layer_count() == 2);
  const model::Model qpas = model::load_model(kDir / "gemma3_qpas");
  CHECK(qpas.config.query_scale == Approx(std::sqrt(16.0 / 40.0)));
  // A multimodal Gemma 3's text part: its config under text_config, its tensors under language_model.model.
  const model::Model multimodal = model::load_model(kDir / "gemma3_multimodal");
  CHECK(multimodal.config.architecture == "Gemma3ForConditionalGeneration");
  CHECK(multimodal.config.hf_tensor_prefix == "language_model.model.");
  CHECK(multimodal.config.local_layer_count() == 5);
  CHECK(multimodal.config.rope_freq_divisors == gemma3.config.rope_freq_divisors);
  CHECK(multimodal.config.tied_embeddings);
}

TEST_CASE("a multimodal Gemma 3 folder's text config errors name their text_config field", "[gemma][synthetic]") {
  namespace fs = std::filesystem;
  const fs::path folder = fs::temp_directory_path() / ("kvscope_gemma3_multimodal_" + std::to_string(::getpid()));
  fs::remove_all(folder);
  fs::copy(kDir / "gemma3_multimodal", folder);
  nlohmann::json config = test::read_json_fixture(kDir / "gemma3_multimodal" / "config.json");
  config["text_config"]["num_hidden_layers"] = 0;
  std::ofstream(folder / "config.json") << config.dump();
  CHECK_THROWS_WITH(model::load_model(folder), Catch::Contains("field 'text_config.num_hidden_layers'"));
  config.erase("text_config");
  std::ofstream(folder / "config.json") << config.dump();
  CHECK_THROWS_WITH(model::load_model(folder), Catch::Contains("field 'text_config': missing"));
  fs::remove_all(folder);
}

TEST_CASE("the Gemma fixtures are sensitive to each convention they prove", "[gemma][synthetic]") {
  const auto& checkpoints = golden()["checkpoints"];
  const auto far = [&](const model::Model& m, const std::string& name) {
    return max_diff_to_prompt(m, checkpoints[name]["prompts"][0]) > 100 * kLogitTolerance;
  };
  model::Model m = model::load_model(kDir / "gemma3");
  m.config.rope_local_base = 0.0f;  // the global base on local layers
  CHECK(far(m, "gemma3"));
  m = model::load_model(kDir / "gemma3");
  m.config.sliding_window = 0;  // every layer global
  CHECK(far(m, "gemma3"));
  m = model::load_model(kDir / "gemma3");
  m.config.rope_freq_divisors.clear();  // no rope scaling on the global layer
  CHECK(far(m, "gemma3"));
  m = model::load_model(kDir / "gemma3");
  m.config.embedding_scale = 1.0f;
  CHECK(far(m, "gemma3"));
  m = model::load_model(kDir / "gemma3");
  m.config.post_norms = false;
  CHECK(far(m, "gemma3"));
  m = model::load_model(kDir / "gemma3");
  m.config.activation = kernels::ModelShape::Activation::SiLU;
  CHECK(far(m, "gemma3"));
  m = model::load_model(kDir / "gemma2");
  m.config.attn_logit_softcap = 0.0f;
  CHECK(far(m, "gemma2"));
  m = model::load_model(kDir / "gemma2");
  m.config.final_logit_softcap = 0.0f;
  CHECK(far(m, "gemma2"));
  m = model::load_model(kDir / "gemma3_qpas");
  m.config.query_scale = 1.0f;  // head_dim instead of query_pre_attn_scalar
  CHECK(far(m, "gemma3_qpas"));
}

TEST_CASE("Gemma attention rows equal transformers' eager attention weights, soft-cap and window included",
          "[gemma][synthetic][attention]") {
  for (const auto& [name, g] : golden()["checkpoints"].items()) {
    const auto& prompt = g["prompts"][0];
    const auto& attention = prompt["attention"];
    for (const auto& path : formats_of(name, g)) {
      INFO("checkpoint " << path.filename().string());
      const model::Model m = model::load_model(path);
      const auto ids = prompt["ids"].get<std::vector<int>>();
      RowCollector rows(static_cast<int>(ids.size()));
      engine::RunHooks hooks;
      hooks.observers = {&rows};
      engine::GenerateOptions options;
      options.max_new_tokens = 2;  // the prefill, then one decode step at position len(ids)
      options.stop_at_end_of_generation = false;
      options.forced_tokens = {prompt["greedy"]["ids"][0].get<int>(), prompt["greedy"]["ids"][1].get<int>()};
      engine::Engine(m).generate(ids, options, hooks);
      double worst = 0.0;
      const auto positions = attention["positions"].get<std::vector<int>>();
      for (int l = 0; l < m.config.n_layers; ++l)
        for (int h = 0; h < m.config.n_heads; ++h)
          for (std::size_t r = 0; r < positions.size(); ++r) {
            const auto expected = attention["rows"][l][h][r].get<std::vector<double>>();
            const auto found = rows.rows.find({l, h, positions[r]});
            REQUIRE(found != rows.rows.end());
            std::vector<float> got = found->second;
            got.resize(expected.size(), 0.0f);
            worst = std::max(worst, test::max_abs_diff(got, expected));
          }
      INFO("max |attention difference| " << worst);
      CHECK(worst <= kAttentionTolerance);
    }
  }
}

TEST_CASE("a sliding-window layer never holds more than its window, under every swa= mode", "[gemma][swa]") {
  const model::Model m = model::load_model(kDir / "gemma3");
  const auto ids = golden()["checkpoints"]["gemma3"]["prompts"][0]["ids"].get<std::vector<int>>();
  for (const std::string spec : {"", "h2o:swa=skip", "snapkv:swa=compress", "streaming_llm:swa=window"}) {
    INFO("policy " << (spec.empty() ? "none" : spec));
    WindowWatch watch(m.config);
    engine::RunHooks hooks;
    hooks.observers = {&watch};
    policy::PolicyInstance instance;
    if (!spec.empty()) {
      instance = policy::make_policy(spec);
      hooks.policy = instance.policy.get();
    }
    engine::GenerateOptions options;
    options.max_new_tokens = 12;
    options.stop_at_end_of_generation = false;
    options.budget = policy::BudgetSpec::parse("32");
    engine::Engine(m).generate(ids, options, hooks);
    CHECK(watch.steps == 12);
    CHECK(watch.max_local_entries == m.config.sliding_window);
    CHECK(watch.max_decode_keys == m.config.sliding_window);
  }
}

TEST_CASE("the cache each swa= mode keeps on a 5:1 model is the closed form it promises", "[gemma][swa]") {
  // gemma3: 6 layers (5 local, window W = 8), 1 KV head of 16 dimensions, float32: an entry is K + V =
  // 2 * 16 * 4 bytes. A 25 % budget of a P = 97 token prompt is B = 24 entries per layer.
  const model::Model m = model::load_model(kDir / "gemma3");
  const auto ids = golden()["checkpoints"]["gemma3"]["prompts"][0]["ids"].get<std::vector<int>>();
  REQUIRE(ids.size() == 97);
  const std::size_t entry = 2 * 16 * sizeof(float);
  const int W = 8, B = 24, L = 6, local = 5, global = 1, P = 97;
  struct Case {
    std::string swa;
    int local_hold, global_hold;
  };
  // skip: local layers keep their window, the global layer the budget; compress: the same here, as the
  // budget exceeds the window and snapkv keeps the last tokens (min(B, W)); window: the global layer gets what
  // the budget leaves, L*B - 5*W = 104 entries, of which a 97-token prompt fills 97.
  const std::vector<Case> cases = {{"skip", W, B}, {"compress", W, B}, {"window", W, std::min(P, L * B - local * W)}};
  for (const auto& c : cases) {
    INFO("swa=" << c.swa);
    auto instance = policy::make_policy("snapkv:swa=" + c.swa);
    CHECK(instance.params.get_choice("swa") == c.swa);
    engine::RunHooks hooks;
    hooks.policy = instance.policy.get();
    engine::GenerateOptions options;
    options.max_new_tokens = 1;  // the prefill's cache, before any decode step appends
    options.budget = policy::BudgetSpec::parse("25%");
    const auto result = engine::Engine(m).generate(ids, options, hooks);
    CHECK(result.cache_entry_bytes == entry * (local * c.local_hold + global * c.global_hold));
    for (int l = 0; l < L; ++l) {
      INFO("layer " << l);
      CHECK(result.kept[l][0] == (m.config.is_local(l) ? c.local_hold : c.global_hold));
      CHECK(result.layer_budgets[l] == (m.config.is_local(l) ? c.local_hold : c.global_hold));
    }
  }
  // Below the window, compress is what tells it from skip: no layer keeps more than the budget (a local
  // layer keeps the policy's choices that lie inside its window).
  auto instance = policy::make_policy("snapkv:swa=compress");
  engine::RunHooks hooks;
  hooks.policy = instance.policy.get();
  engine::GenerateOptions options;
  options.max_new_tokens = 1;
  options.budget = policy::BudgetSpec::parse("4");
  const auto result = engine::Engine(m).generate(ids, options, hooks);
  CHECK(result.kept[5][0] == 4);
  for (int l = 0; l < local; ++l) CHECK(result.kept[l][0] <= 4);
  CHECK(result.cache_entry_bytes < entry * (local * W + 4));
}

TEST_CASE("a policy that spreads its budget over layers spreads it over the global ones under swa=skip|window",
          "[gemma][swa]") {
  // gemma2: 4 layers alternating local (W = 8) and global, 2 KV heads; P = 97, a 25 % budget is B = 24 per layer.
  // Left to their windows, the local layers take no share: the global layers hold L_glob * B between them (skip),
  // or what the budget leaves over the windows, L * B - L_loc * W (window). Before, the allocations threw on the
  // first global layer (d2o, dynamickv) or gave the global layers their places in a 4-layer shape (pyramid:
  // 42 + 5 of the 48 the budget promises).
  const model::Model m = model::load_model(kDir / "gemma2");
  const auto ids = golden()["checkpoints"]["gemma2"]["prompts"][0]["ids"].get<std::vector<int>>();
  REQUIRE(ids.size() == 97);
  const int W = 8, B = 24, L = 4, local = 2, global = 2, heads = 2;
  REQUIRE(m.config.sliding_window == W);
  REQUIRE(m.config.local_layer_count() == local);
  const std::map<std::string, int> global_total = {{"skip", global * B}, {"window", L * B - local * W}};
  for (const std::string spec :
       {"snapkv:window=4,allocation=pyramid", "snapkv:window=4,allocation=d2o", "snapkv:window=4,allocation=dynamickv",
        "snapkv:window=4,allocation=cake", "d2o", "d2o:allocation_level=head", "dynamickv:window=4", "cake:window=4"})
    for (const auto& [swa, total] : global_total) {
      const std::string full = spec + (spec.find(':') == std::string::npos ? ":" : ",") + "swa=" + swa;
      INFO(full);
      auto instance = policy::make_policy(full);
      engine::RunHooks hooks;
      hooks.policy = instance.policy.get();
      engine::GenerateOptions options;
      options.max_new_tokens = 1;  // the prefill's cache, before any decode step appends
      options.budget = policy::BudgetSpec::parse("25%");
      engine::RunResult result;
      REQUIRE_NOTHROW(result = engine::Engine(m).generate(ids, options, hooks));
      int global_held = 0;
      for (int l = 0; l < L; ++l)
        for (int h = 0; h < heads; ++h) {
          INFO("layer " << l << " kv head " << h);
          if (m.config.is_local(l))
            CHECK(result.kept[l][h] == W);
          else
            global_held += result.kept[l][h];
        }
      // Per KV head on average: d2o's per-head allocation may give the two heads different shares.
      CHECK(global_held == heads * total);
      for (int l = 0; l < L; ++l)
        if (m.config.is_local(l)) CHECK(result.layer_budgets[l] == W);
    }
  // The shape is the allocation's over the layers it decides: pyramid falls from the first global layer to
  // the last.
  auto pyramid = policy::make_policy("snapkv:window=4,allocation=pyramid");
  engine::RunHooks hooks;
  hooks.policy = pyramid.policy.get();
  engine::GenerateOptions options;
  options.max_new_tokens = 1;
  options.budget = policy::BudgetSpec::parse("25%");
  const auto result = engine::Engine(m).generate(ids, options, hooks);
  CHECK(result.kept[1][0] > B);
  CHECK(result.kept[3][0] < B);
  CHECK(result.kept[1][0] + result.kept[3][0] == global * B);
}

TEST_CASE("swa= takes skip, compress or window and nothing else", "[gemma][swa]") {
  CHECK_THROWS_WITH(policy::make_policy("h2o:swa=drop"), Catch::Contains("expected skip, compress or window"));
  CHECK_FALSE(policy::make_policy("h2o").params.has("swa"));  // recorded only when given
}

TEST_CASE("a trace's exact zoom rebuilds Gemma 2's soft-capped, windowed attention as transformers computes it",
          "[gemma][trace][exact]") {
  // q and k are recorded in float16: rebuilt probabilities carry their rounding (about 1e-3 of a score).
  constexpr double kHalfTolerance = 2e-3;
  const auto& g = golden()["checkpoints"]["gemma2"];
  const auto& prompt = g["prompts"][0];
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kvscope_gemma_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "prompt.txt", std::ios::binary) << prompt["text"].get<std::string>();
  const std::string command = std::string(KVSCOPE_BINARY) + " trace --quiet --force --model " +
                              (kDir / "gemma2").string() + " --prompt-file " + (dir / "prompt.txt").string() +
                              " --max-new-tokens 2 --record qk=on --out " + (dir / "t.h5").string() + " 2>&1";
  REQUIRE(std::system(command.c_str()) == 0);
  const trace::TraceView view = trace::read_trace(dir / "t.h5");
  fs::remove_all(dir);
  REQUIRE(view.runs.size() == 1);
  trace::RunTrace run = *view.runs.front();
  REQUIRE(trace::ExactAttention::available(run));
  CHECK(run.qk_softcap == 2.0);
  CHECK(run.layer_windows == std::vector<int>{8, 0, 8, 0});
  const auto positions = prompt["attention"]["positions"].get<std::vector<int>>();
  const auto worst_difference = [&](const trace::RunTrace& t) {
    double worst = 0.0;
    for (int l = 0; l < t.n_layers; ++l)
      for (int h = 0; h < t.n_heads; ++h) {
        const trace::ExactAttention exact(t, l, h);
        for (std::size_t r = 0; r < positions.size(); ++r) {
          const auto expected = prompt["attention"]["rows"][l][h][r].get<std::vector<double>>();
          for (std::size_t j = 0; j < expected.size(); ++j) {
            const double rebuilt = exact.probability(positions[r], static_cast<int>(j));
            if (g["layer_types"][l] == "sliding_attention" && static_cast<int>(j) <= positions[r] - 8)
              CHECK(rebuilt == 0.0);  // behind the window: exactly zero, as in the model
            worst = std::max(worst, std::abs(rebuilt - expected[j]));
          }
        }
      }
    return worst;
  };
  const double worst = worst_difference(run);
  INFO("max |exact zoom - transformers| " << worst);
  CHECK(worst <= kHalfTolerance);
  run.qk_softcap = 0.0;  // the same rebuild without the cap is far off: the cap is what makes it agree
  CHECK(worst_difference(run) > 10 * kHalfTolerance);
}

TEST_CASE("Q5_0 (most matrices of the real Gemma 3 270M GGUF) dequantizes as gguf-py does", "[gemma][dequantize]") {
  const auto& q = golden()["q5_0"];
  const std::string hex = q["bytes_hex"].get<std::string>();
  std::vector<uint8_t> bytes;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    bytes.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  const auto expected = q["values"].get<std::vector<double>>();
  REQUIRE(bytes.size() == expected.size() / 32 * 22);
  std::vector<float> got(expected.size());
  kernels::dequantize_row(kernels::GgmlType::Q5_0, bytes.data(), got.data(), static_cast<int64_t>(got.size()));
  // ggml's d * (q - 16) in float32; gguf-py rounds its product in another order (a few 1e-8 apart).
  CHECK(test::max_abs_diff(got, expected) <= 1e-6);
}
