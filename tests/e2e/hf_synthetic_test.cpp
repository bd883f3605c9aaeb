// Tiny random checkpoints of each supported family, written by transformers (tools/make_synthetic_checkpoints.py),
// against transformers' logits and tokenization: RoPE pairing and scaling, biases, q/k norms, GQA groups,
// tied/untied heads, F32/F16/BF16 storage, the Llama 3 / Qwen2 byte-level and the Llama 2 / Mistral
// SentencePiece-style tokenizer.json files, and each family's chat template.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/engine/engine.h"
#include "core/eval/eval_run.h"
#include "core/model/model.h"
#include "core/run/run_spec.h"
#include "tests/support/chat_template_fixture.h"
#include "tests/support/golden_compare.h"

using namespace kvscope;

namespace {

const std::filesystem::path kDir = std::filesystem::path(KVSCOPE_FIXTURES_DIR) / "hf_synthetic";

// Logits of these models lie within +-6; float32 in a different summation order stays far below this.
constexpr double kLogitTolerance = 2e-3;

const nlohmann::json& golden() {
  static const nlohmann::json json = test::read_json_fixture(kDir / "golden.json");
  return json;
}

// Every conversation of the golden rendered and tokenized as transformers' apply_chat_template does.
// `chat_template` (the model's own unless given) renders every golden conversation as transformers did.
void check_chats(const model::Model& m, const nlohmann::json& chats, const model::ChatTemplateSource& given = {}) {
  for (const auto& chat : chats) {
    INFO("conversation " << chat["messages"].dump());
    const auto messages = test::chat_messages_of(chat["messages"]);
    const auto own = given.jinja ? model::choose_chat_template(given, *m.tokenizer) : model::ChatTemplateChoice{};
    const std::string text = model::render_chat(given.jinja ? own.get() : m.chat_template.get(), messages);
    CHECK(text == chat["text"].get<std::string>());
    CHECK(m.tokenizer->encode(text, true) == chat["ids"].get<std::vector<int>>());
    if (messages.size() == 1) {  // what --chat sends: the prompt as the one user message
      run::ChatSpec as_chat;
      as_chat.enabled = true;
      as_chat.template_source = given;
      CHECK(run::encode_prompt(m, messages[0].content, as_chat) == chat["ids"].get<std::vector<int>>());
      CHECK(eval::Evaluator(m).encode(text, true) == chat["ids"].get<std::vector<int>>());  // eval and sweep
    }
  }
}

double max_diff_to_golden(const model::Model& m, const nlohmann::json& g) {
  engine::Engine engine(m);
  const auto logits = engine.prompt_logits(g["prompt_ids"].get<std::vector<int>>());
  const auto expected = g["final_logits"].get<std::vector<double>>();
  return test::max_abs_diff(logits, expected);
}

}  // namespace

TEST_CASE("every synthetic family matches transformers' final logits and greedy tokens", "[hf][synthetic]") {
  for (const auto& [name, g] : golden()["checkpoints"].items()) {
    INFO("checkpoint " << name << " (" << g["architecture"].get<std::string>() << ", "
                       << g["storage_dtype"].get<std::string>() << ")");
    const model::Model m = model::load_model(kDir / name);
    CHECK(m.config.architecture == g["architecture"].get<std::string>());
    if (name == "mistral") CHECK(m.config.context_length == 200);  // capped at sliding_window (max_position 256)
    const double diff = max_diff_to_golden(m, g);
    INFO("max |logit difference| " << diff);
    CHECK(diff <= kLogitTolerance);

    engine::Engine engine(m);
    engine::GenerateOptions options;
    options.stop_at_end_of_generation = false;
    const auto expected = g["greedy"]["ids"].get<std::vector<int>>();
    const auto margins = g["greedy"]["margin_top1_top2"].get<std::vector<double>>();
    options.max_new_tokens = static_cast<int>(expected.size());
    const auto result = engine.generate(g["prompt_ids"].get<std::vector<int>>(), options);
    test::check_greedy_matches(result.generated_tokens, expected, margins, kLogitTolerance);
  }
}

TEST_CASE("the fixtures are sensitive to each convention they prove", "[hf][synthetic]") {
  // Getting a convention wrong must move the logits far beyond the tolerance, or the test above proves nothing.
  const auto& checkpoints = golden()["checkpoints"];
  model::Model llama3 = model::load_model(kDir / "llama3");
  REQUIRE_FALSE(llama3.config.rope_freq_divisors.empty());
  llama3.config.rope_freq_divisors.clear();  // Llama 3 rope scaling ignored
  CHECK(max_diff_to_golden(llama3, checkpoints["llama3"]) > 100 * kLogitTolerance);

  model::Model mistral = model::load_model(kDir / "mistral");
  mistral.config.rope_style = model::RopeStyle::AdjacentPairs;  // GGUF's pairing on Hugging Face weights
  CHECK(max_diff_to_golden(mistral, checkpoints["mistral"]) > 100 * kLogitTolerance);

  model::Model qwen2 = model::load_model(kDir / "qwen2");
  qwen2.config.qkv_bias = false;
  CHECK(max_diff_to_golden(qwen2, checkpoints["qwen2"]) > 100 * kLogitTolerance);

  model::Model qwen3 = model::load_model(kDir / "qwen3");
  qwen3.config.qk_norm = false;
  CHECK(max_diff_to_golden(qwen3, checkpoints["qwen3"]) > 100 * kLogitTolerance);

  model::Model llama2 = model::load_model(kDir / "llama2");
  llama2.config.o_bias = false;
  CHECK(max_diff_to_golden(llama2, checkpoints["llama2"]) > 100 * kLogitTolerance);
}

TEST_CASE("every family's tokenizer.json tokenizes as transformers does", "[hf][synthetic][tokenizer]") {
  for (const auto& [name, g] : golden()["checkpoints"].items()) {
    INFO("checkpoint " << name);
    const model::Model m = model::load_model(kDir / name);
    std::vector<int> prompt;
    if (m.tokenizer->add_bos()) prompt.push_back(m.tokenizer->bos_id());
    const auto body = m.tokenizer->encode(golden()["prompt"].get<std::string>(), true);
    prompt.insert(prompt.end(), body.begin(), body.end());
    CHECK(prompt == g["prompt_ids"].get<std::vector<int>>());
    for (const auto& entry : g["tokenizer"]) {
      INFO(entry["text"].get<std::string>());
      std::vector<int> ids;
      if (m.tokenizer->add_bos()) ids.push_back(m.tokenizer->bos_id());
      const auto encoded = m.tokenizer->encode(entry["text"].get<std::string>(), true);
      ids.insert(ids.end(), encoded.begin(), encoded.end());
      CHECK(ids == entry["ids"].get<std::vector<int>>());
      CHECK(m.tokenizer->decode(ids) == entry["decoded"].get<std::string>());
    }
  }
}

TEST_CASE("each family's chat template renders and tokenizes as transformers' apply_chat_template",
          "[hf][synthetic][chat]") {
  for (const auto& [name, g] : golden()["checkpoints"].items()) {
    INFO("checkpoint " << name);
    const model::Model m = model::load_model(kDir / name);
    CHECK(m.chat_template.description == "Jinja2 template in chat_template.jinja");
    check_chats(m, g["chats"]);
  }
}

TEST_CASE("a model without a chat template refuses --chat unless given one, as transformers does",
          "[hf][synthetic][chat]") {
  // The GGUF files carry no tokenizer.chat_template; the folder's template given as a file renders as it does
  // for the folder.
  for (const std::string name : {"llama3", "qwen3"}) {
    INFO("checkpoint " << name);
    const model::Model m = model::load_model(kDir / (name + ".gguf"));
    CHECK_THROWS_WITH(m.chat_template.get(), Catch::Contains("the model has no chat template"));
    run::ChatSpec chat;
    chat.enabled = true;
    CHECK_THROWS_WITH(run::encode_prompt(m, "hi", chat), Catch::Contains("--chat-template FILE"));
    check_chats(m, golden()["checkpoints"][name]["chats"], model::read_chat_template_file(kDir / name / "chat_template.jinja"));
  }
}

TEST_CASE("a BOS added by a post-processor inside a Sequence is added, as tokenizers adds it", "[hf][synthetic]") {
  // Llama 3.1/3.2 write Sequence[ByteLevel, TemplateProcessing] and no add_bos_token
  // (tools/make_post_processor_golden.py: the llama3 checkpoint's tokenizer so wrapped, ids from `tokenizers`).
  namespace fs = std::filesystem;
  const fs::path fixture = fs::path(KVSCOPE_FIXTURES_DIR) / "hf_post_processor";
  const fs::path folder = fs::temp_directory_path() / "kvscope_tests" / ("post_processor_" + std::to_string(::getpid()));
  fs::remove_all(folder);
  fs::create_directories(folder.parent_path());
  fs::copy(kDir / "llama3", folder);
  fs::copy_file(fixture / "tokenizer.json", folder / "tokenizer.json", fs::copy_options::overwrite_existing);
  const model::Model m = model::load_model(folder);
  CHECK(m.tokenizer->add_bos());
  std::ifstream in(fixture / "golden.json");
  const auto golden = nlohmann::json::parse(in);
  REQUIRE(golden["cases"].size() >= 5);
  for (const auto& c : golden["cases"]) {
    INFO("text " << c["text"].dump());
    CHECK(run::encode_prompt(m, c["text"].get<std::string>(), {}) == c["ids"].get<std::vector<int>>());
  }
  fs::remove_all(folder);
}

TEST_CASE("GGUF llama (permuted q/k, rope_freqs), qwen2 and qwen3 files match the same golden", "[gguf][synthetic]") {
  int files = 0;
  for (const auto& [name, g] : golden()["checkpoints"].items()) {
    if (!g.contains("gguf")) continue;
    ++files;
    INFO("checkpoint " << name << " as " << g["gguf"].get<std::string>());
    const model::Model m = model::load_model(kDir / g["gguf"].get<std::string>());
    CHECK(m.format() == model::ModelFormat::Gguf);
    const double diff = max_diff_to_golden(m, g);
    INFO("max |logit difference| " << diff);
    CHECK(diff <= kLogitTolerance);
    std::vector<int> prompt;
    if (m.tokenizer->add_bos()) prompt.push_back(m.tokenizer->bos_id());
    const auto body = m.tokenizer->encode(golden()["prompt"].get<std::string>(), true);
    prompt.insert(prompt.end(), body.begin(), body.end());
    CHECK(prompt == g["prompt_ids"].get<std::vector<int>>());
  }
  CHECK(files == 3);
}

TEST_CASE("a YaRN GGUF (qwen2) matches transformers past the original context, and not without its scaling keys",
          "[gguf][synthetic][yarn]") {
  // tools/make_yarn_checkpoint.py: factor 4 over an original context of 64, betas 4 / 2, attention factor 1.25,
  // written as llama.cpp's converter writes them (qwen2.rope.scaling.*); the folder is the same checkpoint.
  const std::filesystem::path dir = std::filesystem::path(KVSCOPE_FIXTURES_DIR) / "hf_yarn";
  const nlohmann::json yarn_golden = test::read_json_fixture(dir / "golden.json");
  const auto& g = yarn_golden["checkpoints"]["qwen2_yarn"];
  REQUIRE(g["prompt_ids"].size() > yarn_golden["yarn"]["original_max_position_embeddings"].get<std::size_t>());
  const model::Model gguf = model::load_model(dir / g["gguf"].get<std::string>());
  const model::Model folder = model::load_model(dir / "qwen2_yarn");
  CHECK(gguf.format() == model::ModelFormat::Gguf);
  CHECK(gguf.config.rope_scaling.type == "yarn");
  CHECK(gguf.config.rope_scaling.original_context == 64);
  CHECK(gguf.config.rope_attention_factor == Approx(1.25));
  // The file's keys and config.json's rope_parameters give the same rope.
  CHECK(gguf.config.rope_freq_divisors == folder.config.rope_freq_divisors);
  CHECK(gguf.config.rope_attention_factor == folder.config.rope_attention_factor);
  for (const model::Model* m : {&gguf, &folder}) {
    INFO((m == &gguf ? "GGUF" : "folder"));
    const double diff = max_diff_to_golden(*m, g);
    INFO("max |logit difference| " << diff);
    CHECK(diff <= kLogitTolerance);
    engine::Engine engine(*m);
    engine::GenerateOptions options;
    options.stop_at_end_of_generation = false;
    const auto expected = g["greedy"]["ids"].get<std::vector<int>>();
    options.max_new_tokens = static_cast<int>(expected.size());
    const auto result = engine.generate(g["prompt_ids"].get<std::vector<int>>(), options);
    test::check_greedy_matches(result.generated_tokens, expected,
                               g["greedy"]["margin_top1_top2"].get<std::vector<double>>(), kLogitTolerance);
  }

  // What the loader gives the same file without its scaling keys, and each key left at its default: the logits
  // move far beyond the tolerance, so the test above fails when a key is not read.
  model::Model unscaled = model::load_model(dir / g["gguf"].get<std::string>());
  unscaled.config.rope_scaling = {};
  unscaled.config.rope_freq_divisors.clear();
  unscaled.config.rope_attention_factor = 1.0f;
  const double unscaled_diff = max_diff_to_golden(unscaled, g);
  INFO("without the scaling keys: max |logit difference| " << unscaled_diff);
  CHECK(unscaled_diff > 100 * kLogitTolerance);

  model::Model default_betas = model::load_model(dir / g["gguf"].get<std::string>());
  default_betas.config.rope_scaling.beta_fast = 32.0;
  default_betas.config.rope_scaling.beta_slow = 1.0;
  default_betas.config.rope_freq_divisors = model::rope_freq_divisors(
      default_betas.config.rope_scaling, default_betas.config.rope_dim, default_betas.config.rope_base);
  const double betas_diff = max_diff_to_golden(default_betas, g);
  INFO("with YaRN's default betas: max |logit difference| " << betas_diff);
  CHECK(betas_diff > 10 * kLogitTolerance);

  model::Model default_attention = model::load_model(dir / g["gguf"].get<std::string>());
  default_attention.config.rope_attention_factor =
      static_cast<float>(model::yarn_default_attention_factor(default_attention.config.rope_scaling.factor));
  const double attention_diff = max_diff_to_golden(default_attention, g);
  INFO("with YaRN's default attention factor: max |logit difference| " << attention_diff);
  CHECK(attention_diff > 10 * kLogitTolerance);
}

TEST_CASE("YaRN's partial ramp (yarn_ext_factor 0.5 and 0) matches llama.cpp past the original context",
          "[gguf][synthetic][yarn]") {
  // tools/make_yarn_ext_golden.py: the YaRN checkpoint above with yarn_ext_factor 0.5 and 0 and attn_factor 1.1,
  // and llama.cpp's own logits for the same prompt (transformers has no partial ramp).
  const std::filesystem::path dir = std::filesystem::path(KVSCOPE_FIXTURES_DIR) / "hf_yarn";
  const nlohmann::json golden = test::read_json_fixture(dir / "golden_llamacpp.json");
  const nlohmann::json prompt_golden = test::read_json_fixture(dir / "golden.json");
  REQUIRE(golden["prompt_ids"].size() > prompt_golden["yarn"]["original_max_position_embeddings"].get<std::size_t>());
  REQUIRE(golden["files"].size() == 2);
  for (const auto& [file, g] : golden["files"].items()) {
    INFO(file);
    const model::Model m = model::load_model(dir / file);
    const double ext = g["yarn_ext_factor"].get<double>();
    CHECK(m.config.rope_scaling.ext_factor == ext);
    const nlohmann::json expected = {{"prompt_ids", golden["prompt_ids"]}, {"final_logits", g["final_logits"]}};
    const double diff = max_diff_to_golden(m, expected);
    INFO("max |logit difference| to llama.cpp " << diff);
    CHECK(diff <= kLogitTolerance);

    // The test can fail: the whole ramp (ext_factor 1) or, at 0, YaRN's attention factor on top move the logits
    // far beyond the tolerance.
    model::Model other = model::load_model(dir / file);
    if (ext > 0.0) {
      other.config.rope_scaling.ext_factor = 1.0;
      other.config.rope_freq_divisors =
          model::rope_freq_divisors(other.config.rope_scaling, other.config.rope_dim, other.config.rope_base);
    } else {
      other.config.rope_attention_factor *= static_cast<float>(model::yarn_default_attention_factor(4.0));
    }
    const double other_diff = max_diff_to_golden(other, expected);
    INFO((ext > 0.0 ? "with the whole ramp" : "with YaRN's attention factor")
         << ": max |logit difference| " << other_diff);
    CHECK(other_diff > 100 * kLogitTolerance);
  }
}
