// A tiny random gpt-oss checkpoint written by transformers (tools/make_gptoss_checkpoint.py), as a Hugging Face
// folder, as a GGUF laid out as llama.cpp's converter lays it out, as a GGUF with MXFP4 experts and as a folder with
// MXFP4 experts (as openai/gpt-oss-* ship), against transformers: the last prompt position's logits and 24 greedy
// tokens on three prompts, the recorded prefill attention maps against eager attention (sinks and sliding windows
// included), the experts each router chose; each gpt-oss convention switched off moves the logits far beyond
// tolerance, and so does each MXFP4 convention; malformed MXFP4 folders are errors naming the tensor.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/engine/engine.h"
#include "core/model/model.h"
#include "core/policy/registry.h"
#include "core/trace/exact_attention.h"
#include "core/model/safetensors.h"
#include "core/trace/hdf5_reader.h"
#include "kernels/common/dequantize.h"
#include "tests/core/model/safetensors_builder.h"
#include "tests/core/model/test_support.h"
#include "tests/support/golden_compare.h"
#include "tests/support/moe_golden_check.h"

using namespace kvscope;

namespace {

const std::filesystem::path kDir = std::filesystem::path(KVSCOPE_FIXTURES_DIR) / "hf_gptoss";

const nlohmann::json& golden() {
  static const nlohmann::json json = test::read_json_fixture(kDir / "golden.json");
  return json;
}

double worst_over_prompts(const model::Model& m, const nlohmann::json& g) {
  double worst = 0;
  for (const auto& prompt : g["prompts"]) worst = std::max(worst, test::prompt_logit_diff(m, prompt));
  return worst;
}

// The MXFP4 folder copied with its tensors (name, dtype, shape, bytes, in the file's order) changed by `edit` and
// its config.json by `edit_config`.
class EditedMxfp4Folder {
 public:
  explicit EditedMxfp4Folder(const std::function<void(std::vector<test::SafetensorsEntry>&)>& edit,
                             const std::function<void(nlohmann::json&)>& edit_config = {}) {
    const std::filesystem::path source = kDir / golden()["checkpoints"]["gptoss_mxfp4_folder"]["folder"].get<std::string>();
    for (const auto& file : std::filesystem::directory_iterator(source))
      if (file.path().filename() != "model.safetensors") std::filesystem::copy_file(file.path(), path() / file.path().filename());
    const auto file = model::SafetensorsFile::open(source / "model.safetensors");
    std::vector<test::SafetensorsEntry> entries;
    for (const auto& t : file.tensors()) entries.push_back({t.name, t.dtype, t.shape, {t.data, t.data + t.n_bytes}});
    edit(entries);
    test::write_bytes(path() / "model.safetensors", test::safetensors_image(entries));
    if (edit_config) {
      nlohmann::json config = test::read_json_fixture(path() / "config.json");
      edit_config(config);
      test::write_json(path() / "config.json", config);
    }
  }
  const std::filesystem::path& path() const { return dir_.path(); }

 private:
  test::TempDir dir_;
};

bool ends_with(const std::string& text, const std::string& end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

}  // namespace

TEST_CASE("gpt-oss's config is read from a folder and from a GGUF alike", "[hf][gguf][gptoss]") {
  const model::Model folder = model::load_model(kDir / "gptoss");
  const model::Model gguf = model::load_model(kDir / "gptoss.gguf");
  for (const model::Model* m : {&folder, &gguf}) {
    const auto& c = m->config;
    INFO(m->path());
    CHECK(c.n_experts == 4);
    CHECK(c.n_experts_used == 2);
    CHECK(c.ffn_dim == 32);
    CHECK(c.attention_sinks);
    CHECK(c.router_softmax_after_topk);
    CHECK(c.expert_biases);
    CHECK(c.qkv_bias);
    CHECK(c.o_bias);
    CHECK(c.swiglu_limit == 2.0f);
    CHECK(c.swiglu_alpha == Approx(1.702f));
    CHECK(c.sliding_window == 8);
    CHECK(c.layer_is_local == std::vector<bool>{true, false, true, false});
    CHECK(c.rope_scaling.type == "yarn");
    CHECK(c.rope_attention_factor == Approx(0.1 * std::log(32.0) + 1.0));
    CHECK(m->weights.layers[1].sinks.size() == 4);
  }
  CHECK(folder.config.architecture == "GptOssForCausalLM");
  CHECK(gguf.config.architecture == "gpt-oss");
  // YaRN with truncate false: the ramp runs between dimensions 2.02 and 4.35 of 16 (base 150000, original 4096):
  // pairs 0-2 keep their frequency, pairs 5-7 are slowed by the factor 32, pairs 3 and 4 blend.
  const auto& d = folder.config.rope_freq_divisors;
  REQUIRE(d.size() == 8);
  CHECK(d[0] == 1.0f);
  CHECK(d[2] == 1.0f);
  CHECK(d[3] > 1.0f);
  CHECK(d[4] < 32.0f);
  CHECK(d[5] == Approx(32.0f));
  CHECK(d[7] == Approx(32.0f));
  for (std::size_t i = 0; i < d.size(); ++i) CHECK(gguf.config.rope_freq_divisors[i] == Approx(d[i]));
  CHECK(folder.config.context_length == 131072);  // local layers do not cap the context, unlike Mistral's window
}

TEST_CASE("gpt-oss matches transformers as a folder and as a GGUF", "[hf][gguf][gptoss]") {
  const auto folder = test::check_against_golden(golden()["checkpoints"]["gptoss"], kDir / "gptoss");
  const auto gguf = test::check_against_golden(golden()["checkpoints"]["gptoss"], kDir / "gptoss.gguf");
  WARN("gpt-oss folder: max |logit diff| " << folder.logits << ", max |attention diff| " << folder.attention
                                           << "; GGUF: " << gguf.logits << ", " << gguf.attention);
}

TEST_CASE("gpt-oss's MXFP4 experts (as its released GGUFs store them) run as transformers on those values",
          "[gguf][gptoss][mxfp4]") {
  const nlohmann::json& g = golden()["checkpoints"]["gptoss_mxfp4"];
  const model::Model m = model::load_model(kDir / g["gguf"].get<std::string>());
  CHECK(m.weights.layers[0].expert_gate[0].type == kernels::GgmlType::MXFP4);
  CHECK(m.weights.layers[0].expert_down[0].type == kernels::GgmlType::MXFP4);
  const auto& check = g["dequantized_row"];
  const kernels::QuantMatrix& expert = m.weights.layers[0].expert_gate[check["expert"].get<int>()];
  std::vector<float> row(static_cast<std::size_t>(expert.cols));
  kernels::dequantize_row(expert.type, expert.row(check["row"].get<int>()), row.data(), expert.cols);
  CHECK(test::max_abs_diff(row, check["values"].get<std::vector<double>>()) == 0.0);
  const auto agreement = test::check_against_golden(g, kDir / g["gguf"].get<std::string>());
  WARN("gpt-oss MXFP4 GGUF: max |logit diff| " << agreement.logits << ", max |attention diff| " << agreement.attention);
}

TEST_CASE("the gpt-oss fixture is sensitive to each convention it proves", "[hf][gptoss]") {
  const nlohmann::json& g = golden()["checkpoints"]["gptoss"];
  const auto changed = [&](auto&& change) {
    model::Model m = model::load_model(kDir / "gptoss");
    change(m);
    return worst_over_prompts(m, g);
  };
  constexpr double kFar = 100 * test::kLogitTolerance;
  CHECK(changed([](model::Model& m) {  // no sink logits
    for (auto& layer : m.weights.layers) layer.sinks.clear();
  }) > kFar);
  CHECK(changed([](model::Model& m) { m.config.swiglu_limit = 0.0f; }) > kFar);  // SiLU(gate) * up
  CHECK(changed([](model::Model& m) { m.config.swiglu_limit = 7.0f; }) > kFar);  // the released limit, not this one's
  CHECK(changed([](model::Model& m) {  // softmax over every expert, not renormalised (Qwen3-MoE's order)
    m.config.router_softmax_after_topk = false;
    m.config.expert_weights_norm = false;
  }) > kFar);
  CHECK(changed([](model::Model& m) {
    for (auto& layer : m.weights.layers) std::fill(layer.router_bias.begin(), layer.router_bias.end(), 0.0f);
  }) > kFar);
  CHECK(changed([](model::Model& m) {
    for (auto& layer : m.weights.layers)
      for (auto& bias : layer.expert_down_bias) std::fill(bias.begin(), bias.end(), 0.0f);
  }) > kFar);
  CHECK(changed([](model::Model& m) { m.config.rope_freq_divisors.clear(); }) > kFar);  // YaRN's frequencies
  CHECK(changed([](model::Model& m) { m.config.rope_attention_factor = 1.0f; }) > kFar);  // YaRN's attention factor
  CHECK(changed([](model::Model& m) { m.config.sliding_window = 0; }) > kFar);  // every layer global
}

TEST_CASE("a gpt-oss trace records each row's sink share beside its map, and its entropy and exact zoom with the sink",
          "[gptoss][trace][exact]") {
  // Prefill rows and the first decode rows (tools/make_gptoss_checkpoint.py's DECODE_STEPS), against eager attention.
  constexpr int kDecodeSteps = 3;
  // Maps and q/k are stored in float16 in the file: about 1e-3 of a probability or a score.
  constexpr double kHalfTolerance = 2e-3;
  const auto& prompt = golden()["checkpoints"]["gptoss"]["prompts"][0];
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kvscope_gptoss_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "prompt.txt", std::ios::binary) << prompt["text"].get<std::string>();
  const std::string command = std::string(KVSCOPE_BINARY) + " trace --quiet --force --model " +
                              (kDir / "gptoss").string() + " --prompt-file " + (dir / "prompt.txt").string() +
                              " --max-new-tokens " + std::to_string(kDecodeSteps + 1) +
                              " --record qk=on --out " + (dir / "t.h5").string() + " 2>&1";
  REQUIRE(std::system(command.c_str()) == 0);
  const trace::TraceView view = trace::read_trace(dir / "t.h5");
  fs::remove_all(dir);
  REQUIRE(view.runs.size() == 1);
  const trace::RunTrace& run = *view.runs.front();
  const auto& attention = prompt["attention"];
  const int n = static_cast<int>(prompt["ids"].size());
  REQUIRE(run.prompt_length == n);
  CHECK(run.layer_windows == std::vector<int>{8, 0, 8, 0});
  double worst_sink = 0, worst_row_total = 0, largest_share = 0, worst_entropy = 0, worst_exact = 0;
  for (int l = 0; l < run.n_layers; ++l)
    for (int h = 0; h < run.n_heads; ++h) {
      const trace::Map2D* sink = run.attention_sink_map(l, h);
      const trace::Map2D* map = run.attention_map(l, h);
      REQUIRE(sink);
      REQUIRE(map);
      REQUIRE(map->full_resolution());
      REQUIRE(sink->rows == n);
      REQUIRE(sink->cols == 1);
      const trace::ExactAttention exact(run, l, h);
      double entropy = 0;
      for (int q = 0; q < n; ++q) {
        // transformers returns each row without the sink's column: the sink took what the row leaves of 1.
        const auto row = attention[l][h][q].get<std::vector<double>>();
        double keys = 0, row_entropy = 0, recorded = 0;
        for (std::size_t k = 0; k < row.size(); ++k) {
          keys += row[k];
          if (row[k] > 0) row_entropy -= row[k] * std::log(row[k]);
          recorded += map->at(q, static_cast<int>(k));
          worst_exact = std::max(worst_exact, std::abs(exact.probability(q, static_cast<int>(k)) - row[k]));
        }
        const double share = 1.0 - keys;
        row_entropy -= share * std::log(share);
        entropy += row_entropy / n;
        largest_share = std::max(largest_share, share);
        worst_sink = std::max(worst_sink, std::abs(sink->at(q, 0) - share));
        worst_row_total = std::max(worst_row_total, std::abs(recorded + sink->at(q, 0) - 1.0));
      }
      worst_entropy = std::max(worst_entropy, std::abs(run.stats.at("mean_row_entropy").values[l][h] - entropy));
    }
  INFO("max |sink share - transformers'| " << worst_sink << ", max |row + sink - 1| " << worst_row_total
                                           << ", max |mean row entropy - transformers'| " << worst_entropy
                                           << ", max |exact zoom - transformers| " << worst_exact);
  CHECK(largest_share > 0.2);  // a map that left the sink out (rows summing to 1) would be far off
  CHECK(worst_sink <= kHalfTolerance);
  CHECK(worst_row_total <= 2 * kHalfTolerance);
  CHECK(worst_entropy <= 1e-4);  // from the float32 rows, not the stored halves
  // The exact zoom rebuilds scores from float16 q and k, whose rounding here (YaRN's attention factor and the biases
  // make q and k longer than Gemma's) moves a probability by up to 3e-3; leaving the sink out would move a row's
  // probabilities by its share, up to largest_share.
  CHECK(worst_exact <= 5e-3);

  // Decode rows: the queries of the greedy tokens fed back, over the prompt and the tokens before them.
  const auto greedy = golden()["checkpoints"]["gptoss"]["prompts"][0]["greedy"]["ids"].get<std::vector<int>>();
  REQUIRE(run.generated_ids.size() >= static_cast<std::size_t>(kDecodeSteps));
  REQUIRE(std::vector<int>(run.generated_ids.begin(), run.generated_ids.begin() + kDecodeSteps) ==
          std::vector<int>(greedy.begin(), greedy.begin() + kDecodeSteps));
  const auto& decode = prompt["decode_attention"];
  double worst_decode_sink = 0, worst_decode_row = 0, worst_decode_total = 0, largest_decode_share = 0;
  for (int l = 0; l < run.n_layers; ++l)
    for (int h = 0; h < run.n_heads; ++h) {
      const trace::Map2D* sink = run.decode_attention_sink_map(l, h);
      const trace::Map2D* map = run.decode_attention_map(l, h);
      REQUIRE(sink);
      REQUIRE(map);
      REQUIRE(map->col_block == 1);
      REQUIRE(sink->rows == kDecodeSteps);
      REQUIRE(sink->cols == 1);
      for (int d = 0; d < kDecodeSteps; ++d) {
        const auto row = decode[l][h][d].get<std::vector<double>>();
        REQUIRE(row.size() == static_cast<std::size_t>(n + d + 1));
        double keys = 0, recorded = 0;
        for (std::size_t k = 0; k < row.size(); ++k) {
          keys += row[k];
          recorded += map->at(d, static_cast<int>(k));
          worst_decode_row = std::max(worst_decode_row, std::abs(map->at(d, static_cast<int>(k)) - row[k]));
        }
        const double share = 1.0 - keys;  // transformers leaves the sink's column out of the row
        largest_decode_share = std::max(largest_decode_share, share);
        worst_decode_sink = std::max(worst_decode_sink, std::abs(sink->at(d, 0) - share));
        worst_decode_total = std::max(worst_decode_total, std::abs(recorded + sink->at(d, 0) - 1.0));
      }
    }
  INFO("decode rows: max |sink share - transformers'| " << worst_decode_sink << ", max |probability - transformers'| "
                                                         << worst_decode_row << ", max |row + sink - 1| "
                                                         << worst_decode_total << ", largest share " << largest_decode_share);
  CHECK(largest_decode_share > 0.2);  // a recorder that gave the sink nothing would be this far off
  CHECK(worst_decode_sink <= kHalfTolerance);
  CHECK(worst_decode_row <= kHalfTolerance);
  CHECK(worst_decode_total <= 2 * kHalfTolerance);
}

TEST_CASE("gpt-oss's local layers follow the swa= modes and hold at most their window", "[gptoss][swa]") {
  // 4 layers (local, global, local, global; window W = 8), 2 KV heads of 16 dimensions, float32: an entry is
  // K + V = 2 * 16 * 4 bytes per KV head. A 25 % budget of the P = 92 token prompt is B = 23 entries per layer.
  const model::Model m = model::load_model(kDir / "gptoss");
  const auto ids = golden()["checkpoints"]["gptoss"]["prompts"][1]["ids"].get<std::vector<int>>();
  REQUIRE(ids.size() == 92);
  const std::size_t entry = 2 * 16 * sizeof(float);
  const int W = 8, B = 23, L = 4, local = 2, global = 2, kv_heads = 2;
  struct Case {
    std::string swa;
    int local_hold, global_hold;
  };
  // window: the global layers share what the budget leaves after the windows, (L*B - local*W) / global.
  const std::vector<Case> cases = {{"skip", W, B}, {"compress", W, B}, {"window", W, (L * B - local * W) / global}};
  for (const auto& c : cases) {
    INFO("swa=" << c.swa);
    auto instance = policy::make_policy("snapkv:swa=" + c.swa);
    engine::RunHooks hooks;
    hooks.policy = instance.policy.get();
    engine::GenerateOptions options;
    options.max_new_tokens = 1;
    options.budget = policy::BudgetSpec::parse("25%");
    const auto result = engine::Engine(m).generate(ids, options, hooks);
    CHECK(result.cache_entry_bytes == entry * kv_heads * (local * c.local_hold + global * c.global_hold));
    for (int l = 0; l < L; ++l)
      for (int g = 0; g < kv_heads; ++g) {
        INFO("layer " << l << " kv head " << g);
        CHECK(result.kept[l][g] == (m.config.is_local(l) ? c.local_hold : c.global_hold));
      }
  }
  // Without a policy, a local layer still never holds more than its window.
  engine::GenerateOptions options;
  options.max_new_tokens = 4;
  options.stop_at_end_of_generation = false;
  const auto result = engine::Engine(m).generate(ids, options);
  for (int l = 0; l < L; ++l) {
    if (m.config.is_local(l))
      CHECK(result.kept[l][0] <= W);
    else
      CHECK(result.kept[l][0] == 92 + 3);  // the prompt and the fed tokens (the last generated one is not fed)
  }
}

TEST_CASE("a gpt-oss folder with MXFP4 experts (as openai/gpt-oss-* ship) runs as transformers dequantizing it",
          "[hf][gptoss][mxfp4]") {
  const nlohmann::json& g = golden()["checkpoints"]["gptoss_mxfp4_folder"];
  const std::filesystem::path path = kDir / g["folder"].get<std::string>();
  const model::Model m = model::load_model(path);
  // Kept in MXFP4 (17 bytes per 32 values), as a GGUF's MXFP4 experts are.
  for (const auto& layer : m.weights.layers)
    for (int e = 0; e < m.config.n_experts; ++e) {
      CHECK(layer.expert_gate[e].type == kernels::GgmlType::MXFP4);
      CHECK(layer.expert_up[e].type == kernels::GgmlType::MXFP4);
      CHECK(layer.expert_down[e].type == kernels::GgmlType::MXFP4);
    }
  CHECK(m.weights.layers[0].expert_gate[0].row_bytes == 2 * 17);
  // Gate, up and down rows as transformers holds them after dequantizing (gate_up_proj's columns 2i and 2i + 1,
  // down_proj's column), value for value.
  const nlohmann::json& rows = g["dequantized_rows"];
  const model::LayerWeights& layer = m.weights.layers[rows["layer"].get<int>()];
  const int e = rows["expert"].get<int>(), r = rows["row"].get<int>();
  const std::pair<const char*, const model::QuantMatrix*> parts[] = {
      {"gate", &layer.expert_gate[e]}, {"up", &layer.expert_up[e]}, {"down", &layer.expert_down[e]}};
  for (const auto& [part, matrix] : parts) {
    INFO(part);
    std::vector<float> row(static_cast<std::size_t>(matrix->cols));
    kernels::dequantize_row(matrix->type, matrix->row(r), row.data(), matrix->cols);
    CHECK(test::max_abs_diff(row, rows[part].get<std::vector<double>>()) == 0.0);
  }
  const auto agreement = test::check_against_golden(g, path);
  WARN("gpt-oss MXFP4 folder: max |logit diff| " << agreement.logits << ", max |attention diff| "
                                                 << agreement.attention);
}

TEST_CASE("the MXFP4 folder is sensitive to the nibble order and the scale bias", "[hf][gptoss][mxfp4]") {
  // Rewriting the file so that kvscope's reading of it is what a reader with another convention makes of the
  // original: each such reader would be far from transformers.
  const nlohmann::json& g = golden()["checkpoints"]["gptoss_mxfp4_folder"];
  const auto misread = [&](const std::function<void(uint8_t*)>& block, const std::function<uint8_t(uint8_t)>& scale) {
    const EditedMxfp4Folder folder([&](std::vector<test::SafetensorsEntry>& entries) {
      for (auto& t : entries) {
        if (ends_with(t.name, "_blocks"))
          for (std::size_t at = 0; at < t.data.size(); at += 16) block(t.data.data() + at);
        if (ends_with(t.name, "_scales"))
          for (auto& byte : t.data) byte = scale(byte);
      }
    });
    return worst_over_prompts(model::load_model(folder.path()), g);
  };
  const auto same_block = [](uint8_t*) {};
  const auto same_scale = [](uint8_t s) { return s; };
  constexpr double kFar = 100 * test::kLogitTolerance;
  CHECK(misread(same_block, same_scale) <= test::kLogitTolerance);  // the copy itself is read as the original
  // Value 2j in the high nibble, 2j + 1 in the low one.
  CHECK(misread([](uint8_t* b) { for (int j = 0; j < 16; ++j) b[j] = static_cast<uint8_t>(b[j] << 4 | b[j] >> 4); },
                same_scale) > kFar);
  // ggml's order (value j in the low nibble of byte j, value j + 16 in its high nibble), as a GGUF block has it.
  CHECK(misread(
            [](uint8_t* b) {
              uint8_t values[32], out[16];
              for (int j = 0; j < 16; ++j) {
                values[j] = b[j] & 0x0F;
                values[j + 16] = b[j] >> 4;
              }
              for (int j = 0; j < 16; ++j) out[j] = static_cast<uint8_t>(values[2 * j] | values[2 * j + 1] << 4);
              std::copy(out, out + 16, b);
            },
            same_scale) > kFar);
  // Scales biased by 128 (ggml's halved scale without its doubled E2M1 values) or by 126.
  CHECK(misread(same_block, [](uint8_t s) { return static_cast<uint8_t>(s - 1); }) > kFar);
  CHECK(misread(same_block, [](uint8_t s) { return static_cast<uint8_t>(s + 1); }) > kFar);
}

TEST_CASE("a malformed MXFP4 gpt-oss folder is an error naming the tensor", "[hf][gptoss][mxfp4]") {
  using Catch::Contains;
  const auto error = [](const EditedMxfp4Folder& folder) {
    return test::error_message([&] { model::load_model(folder.path()); });
  };
  const auto without = [](const std::string& name) {
    return [name](std::vector<test::SafetensorsEntry>& entries) {
      std::erase_if(entries, [&](const auto& t) { return t.name == name; });
    };
  };
  const std::string p = "model.layers.2.mlp.experts.";
  CHECK_THAT(error(EditedMxfp4Folder(without(p + "down_proj_scales"))),
             Contains("tensor '" + p + "down_proj_scales' is in none of the safetensors files") &&
                 Contains("'" + p + "down_proj_blocks' is there"));
  CHECK_THAT(error(EditedMxfp4Folder(without(p + "gate_up_proj_blocks"))),
             Contains("tensor '" + p + "gate_up_proj_blocks' is in none of the safetensors files"));
  CHECK_THAT(error(EditedMxfp4Folder([&](std::vector<test::SafetensorsEntry>& entries) {
               without(p + "down_proj_blocks")(entries);
               without(p + "down_proj_scales")(entries);
             })),
             Contains("tensor '" + p + "down_proj_blocks' is in none of the safetensors files") &&
                 Contains("all MXFP4 or all float"));
  // The same bytes in another shape: scales [E][cols/32][rows] for [E][rows][cols/32].
  CHECK_THAT(error(EditedMxfp4Folder([&](std::vector<test::SafetensorsEntry>& entries) {
               for (auto& t : entries)
                 if (t.name == p + "gate_up_proj_scales") t.shape = {4, 2, 64};
             })),
             Contains("model.safetensors: tensor '" + p + "gate_up_proj_scales' shape: [4, 2, 64] (expected [4, 64, 2]") &&
                 Contains("one scale per block of '" + p + "gate_up_proj_blocks' [4, 64, 2, 16]"));
  CHECK_THAT(error(EditedMxfp4Folder([&](std::vector<test::SafetensorsEntry>& entries) {
               for (auto& t : entries)
                 if (t.name == p + "down_proj_blocks") t.shape = {4, 64, 16};
             })),
             Contains("tensor '" + p + "down_proj_blocks' shape: [4, 64, 16] (expected [4, 64, 1, 16]"));
  CHECK_THAT(error(EditedMxfp4Folder([](auto&) {},
                                     [](nlohmann::json& config) { config["quantization_config"]["quant_method"] = "fp8"; })),
             Contains("config.json: field 'quantization_config': quant_method \"fp8\" is not supported"));
}
