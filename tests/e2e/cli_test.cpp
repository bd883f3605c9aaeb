// The kvscope binary as a user runs it: exit codes, error messages, --help, --json.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/chat_template_fixture.h"
#include "tests/support/command_output.h"

namespace {

using Outcome = kvscope::test::CommandOutcome;  // output: stdout and stderr together

Outcome run(const std::string& args) { return kvscope::test::run_command(std::string(KVSCOPE_BINARY) + " " + args + " 2>&1"); }

bool model_available() {
  const auto root = std::filesystem::path(KVSCOPE_FIXTURES_DIR).parent_path().parent_path();
  return std::filesystem::exists(root / ".deps/models/SmolLM2-135M-Instruct.Q4_1.gguf") || std::getenv("KVSCOPE_MODEL");
}

std::filesystem::path temp_file(const std::string& name) { return std::filesystem::temp_directory_path() / ("kvscope_cli_" + name); }

}  // namespace

TEST_CASE("--help works for the program and every subcommand") {
  REQUIRE(run("--help").exit_code == 0);
  for (const char* sub : {"info", "generate", "policies"}) {
    INFO(sub);
    const auto o = run(std::string(sub) + " --help");
    REQUIRE(o.exit_code == 0);
    REQUIRE_THAT(o.output, Catch::Contains("Usage"));
  }
}

TEST_CASE("kvscope policies lists compose with its own parameters and the prefix rule") {
  const auto text = run("policies");
  REQUIRE(text.exit_code == 0);
  CHECK_THAT(text.output, Catch::Contains("Composition (--policy compose:") &&
                              Catch::Contains("compose — two scored policies in sequence") &&
                              Catch::Contains("then_ratio  default 0.5      [0, 1)") &&
                              Catch::Contains("first.NAME=VALUE and then.NAME=VALUE set the inner policies"));
  const auto out = kvscope::test::run_command(std::string(KVSCOPE_BINARY) + " policies --json");
  REQUIRE(out.exit_code == 0);
  const auto compose = nlohmann::json::parse(out.output).at("compose");
  CHECK(compose.at("name") == "compose");
  std::vector<std::string> names;
  for (const auto& p : compose.at("params")) names.push_back(p.at("name"));
  CHECK(names == std::vector<std::string>{"first", "then", "then_ratio"});
  const auto& choices = compose.at("params")[0].at("choices");
  CHECK(std::find(choices.begin(), choices.end(), "snapkv") != choices.end());
  CHECK(std::find(choices.begin(), choices.end(), "full") == choices.end());  // not scored: compose refuses it
  CHECK_THAT(compose.at("inner_params").get<std::string>(), Catch::Contains("first.NAME=VALUE"));
}

TEST_CASE("bad usage exits 2 with a message naming what was wrong") {
  auto o = run("generate --prompt hi --policy nosuch --budget 10");
  CHECK(o.exit_code == 2);
  CHECK_THAT(o.output, Catch::Contains("unknown policy 'nosuch'") && Catch::Contains("snapkv"));
  o = run("generate --prompt hi --policy snapkv:window=0 --budget 10");
  CHECK(o.exit_code == 2);
  CHECK_THAT(o.output, Catch::Contains("window"));
  o = run("generate --prompt hi --policy h2o --budget 0");
  CHECK(o.exit_code == 2);
  CHECK_THAT(o.output, Catch::Contains("budget '0'"));
  o = run("generate --prompt hi --policy h2o");
  CHECK(o.exit_code == 2);
  CHECK_THAT(o.output, Catch::Contains("needs a budget"));
  o = run("generate --no-such-flag");
  CHECK(o.exit_code == 2);
  o = run("generate --prompt hi --prompt-file x");
  CHECK(o.exit_code == 2);
  o = run("generate --prompt hi --device tpu");
  CHECK(o.exit_code == 2);
  CHECK_THAT(o.output, Catch::Contains("unknown device 'tpu'") && Catch::Contains("cpu or cuda"));
  o = run("trace --prompt hi --cache-type f8 --out /tmp/kvscope_cli_never.h5");
  CHECK(o.exit_code == 2);
  CHECK_THAT(o.output, Catch::Contains("unknown cache type 'f8'") && Catch::Contains("expected one of f32, f16, q8_0, q4_0, q4_1, bf16"));
}

TEST_CASE("bad model files exit 1 naming the file") {
  auto o = run("info --model /nonexistent/model.gguf");
  CHECK(o.exit_code == 1);
  CHECK_THAT(o.output, Catch::Contains("/nonexistent/model.gguf"));
  const auto truncated = temp_file("truncated.gguf");
  {
    std::ofstream out(truncated, std::ios::binary);
    out << "GGUF\x03";
  }
  o = run("generate --prompt hi --model " + truncated.string());
  CHECK(o.exit_code == 1);
  CHECK_THAT(o.output, Catch::Contains(truncated.filename().string()));
  std::filesystem::remove(truncated);
}

TEST_CASE("budgets and prompts beyond the context are rejected before any work") {
  if (!model_available()) {
    WARN("default model missing; run make");
    return;
  }
  auto o = run("generate --prompt hi --policy h2o --budget 9000");
  CHECK(o.exit_code == 2);
  CHECK_THAT(o.output, Catch::Contains("larger than the model's context of 8192"));
  const auto long_prompt = temp_file("long_prompt.txt");
  {
    std::ofstream out(long_prompt);
    for (int i = 0; i < 9000; ++i) out << " 7";
  }
  o = run("generate --max-new-tokens 1 --prompt-file " + long_prompt.string());
  CHECK(o.exit_code == 2);
  CHECK_THAT(o.output, Catch::Contains("exceeds the model's context of 8192"));
  std::filesystem::remove(long_prompt);
}

TEST_CASE("generate --json gives a complete machine-readable record") {
  if (!model_available()) {
    WARN("default model missing; run make");
    return;
  }
  const auto o = run("generate --prompt 'The capital of France is' --max-new-tokens 4 --policy streaming_llm:sinks=2 --budget 4 --json");
  REQUIRE(o.exit_code == 0);
  const auto j = nlohmann::json::parse(o.output);
  CHECK(j["prompt_tokens"].size() == 5);
  CHECK(j["generated_tokens"].size() == 4);
  CHECK(j["timings"]["prefill_ms"].get<double>() > 0);
  CHECK(j["timings"]["decode_ms_per_token"].get<double>() > 0);
  CHECK(j["cache"]["kept"].size() == 30);
  for (const auto& layer : j["cache"]["kept"])
    for (const auto& kept : layer) CHECK(kept.get<int>() == 4);
  CHECK(j["cache"]["peak_bytes"].get<long>() >= j["cache"]["bytes"].get<long>());
  CHECK(j["policy"]["name"] == "streaming_llm");
}

TEST_CASE("generate runs with a half cache, and --device cuda without CUDA is a clean error") {
  if (!model_available()) {
    WARN("default model missing; run make");
    return;
  }
  const auto o = run("generate --prompt 'The capital of France is' --max-new-tokens 3 --cache-type f16 --json");
  REQUIRE(o.exit_code == 0);
  const auto j = nlohmann::json::parse(o.output);
  CHECK(j["generated_tokens"].size() == 3);
  CHECK(j["device"] == "cpu");
  CHECK(j["cache"]["type"] == "f16");
  // Two bytes per value: 7 entries (5 prompt tokens, 2 decode steps) x 30 layers x 3 KV heads x 64 x (K, V).
  CHECK(j["cache"]["entry_bytes"].get<long>() == 7L * 30 * 3 * 64 * 2 * 2);
  // Without CUDA in the build, or without a GPU or driver, the answer is an error naming the device (exit 1);
  // never a crash.
  const auto cuda = run("generate --prompt hi --max-new-tokens 1 --device cuda");
  INFO(cuda.output);
  CHECK((cuda.exit_code == 0 || (cuda.exit_code == 1 && cuda.output.find("cuda") != std::string::npos)));
}

TEST_CASE("compose holds its composed count through a first policy's decode evictions") {
  if (!model_available()) {
    WARN("default model missing; run make");
    return;
  }
  for (const int steps : {2, 6}) {
    const auto o = run("generate --prompt 'The heat pump moves heat from the cold outside air into the warm house by "
                       "compressing a refrigerant.' --policy compose:first=h2o,then=h2o,then_ratio=0.5 "
                       "--compression-ratio 0.5 --ignore-eos --threads 1 --json --max-new-tokens " +
                       std::to_string(steps));
    REQUIRE(o.exit_code == 0);
    const auto j = nlohmann::json::parse(o.output);
    // kvpress ComposedPress: int(int(n (1 - R1)) (1 - R2)) once; h2o's later evictions hold it (one f32 entry is
    // 30 layers x 3 KV heads x 64 x (K, V) x 4 bytes).
    const long n = static_cast<long>(j["prompt_tokens"].size());
    const long composed = static_cast<long>(static_cast<long>(n * 0.5) * 0.5);
    INFO("steps " << steps << ", prompt " << n);
    CHECK(j["cache"]["entry_bytes"].get<long>() == composed * 30 * 3 * 64 * 2 * 4);
  }
}

TEST_CASE("generate --chat on the Llama 2 and Mistral folders sends transformers' chat-template ids") {
  std::ifstream in(std::filesystem::path(KVSCOPE_FIXTURES_DIR) / "hf_synthetic" / "golden.json");
  const auto golden = nlohmann::json::parse(in);
  for (const std::string name : {"llama2", "mistral"}) {
    const auto folder = std::filesystem::path(KVSCOPE_FIXTURES_DIR) / "hf_synthetic" / name;
    // The golden's system + user and user-only conversations, as --system and --chat send them.
    for (const int conversation : {0, 1}) {
      INFO("checkpoint " << name << ", conversation " << conversation);
      const auto& chat = golden["checkpoints"][name]["chats"][conversation];
      const auto& messages = chat["messages"];
      const bool has_system = messages.size() == 2;
      REQUIRE(messages.back()["role"] == "user");
      const auto prompt_file = temp_file(name + "_chat_prompt.txt");
      std::ofstream(prompt_file) << messages.back()["content"].get<std::string>();
      const std::string system =
          has_system ? " --system '" + messages[0]["content"].get<std::string>() + "'" : std::string();
      const auto o = run("generate --json --chat --ignore-eos --max-new-tokens 3 --model " + folder.string() +
                         " --prompt-file " + prompt_file.string() + system);
      std::filesystem::remove(prompt_file);
      REQUIRE(o.exit_code == 0);
      const auto j = nlohmann::json::parse(o.output);
      CHECK(j["prompt"] == chat["text"]);
      CHECK(j["prompt_tokens"] == chat["ids"]);
      CHECK(j["generated_tokens"].size() == 3);
    }
    const auto info = nlohmann::json::parse(run("info --json --model " + folder.string()).output);
    CHECK_THAT(info["chat_template"].get<std::string>(), Catch::StartsWith("Jinja2 template in chat_template.jinja; it reads"));
    // Llama 2 and Mistral layouts: a byte-fallback BPE with a SentencePiece-style decoder sequence.
    CHECK_THAT(info["tokenizer"].get<std::string>(),
               Catch::StartsWith("transformers 5.2.0 ") && Catch::Contains("(BPE,") && Catch::Contains("decoder Sequence"));
  }
}

namespace {

// The golden case of `template_name` whose conversation has `turns` messages and that satisfies `match`.
const nlohmann::json& chat_case(const std::string& template_name, std::size_t turns,
                                const std::function<bool(const nlohmann::json&)>& match) {
  for (const auto& c : kvscope::test::chat_template_golden()["templates"][template_name]["cases"])
    if (c["messages"].size() == turns && c["add_generation_prompt"].get<bool>() && match(c)) return c;
  FAIL("no such golden case in " << template_name);
  throw std::logic_error("unreachable");
}

std::filesystem::path messages_file(const std::string& name, const nlohmann::json& messages) {
  const auto path = temp_file(name + "_messages.json");
  std::ofstream(path) << messages.dump();
  return path;
}

}  // namespace

TEST_CASE("--messages sends a three-turn conversation as transformers' apply_chat_template does") {
  // Llama 3.1's dated system block with --chat-date, and Qwen3 with thinking off (--no-think).
  const auto llama31 = kvscope::test::folder_with_chat_template("llama3.1");
  const auto& dated =
      chat_case("llama3.1", 3, [](const auto& c) { return c.value("date_string", "") == "05 Mar 2025"; });
  const auto dated_file = messages_file("llama31", dated["messages"]);
  auto o = run("generate --json --ignore-eos --max-new-tokens 2 --model " + llama31.string() + " --messages " +
               dated_file.string() + " --chat-date '05 Mar 2025'");
  REQUIRE(o.exit_code == 0);
  auto j = nlohmann::json::parse(o.output);
  CHECK(j["prompt"] == dated["text"]);
  CHECK(j["prompt_tokens"] == dated["ids"]);
  CHECK(j["generated_tokens"].size() == 2);

  const auto qwen3 = kvscope::test::folder_with_chat_template("qwen3");
  const auto& no_think = chat_case("qwen3", 3, [](const auto& c) { return !c.value("enable_thinking", true); });
  const auto qwen_file = messages_file("qwen3", no_think["messages"]);
  o = run("generate --json --max-new-tokens 1 --model " + qwen3.string() + " --messages " + qwen_file.string() +
          " --no-think");
  REQUIRE(o.exit_code == 0);
  CHECK(nlohmann::json::parse(o.output)["prompt_tokens"] == no_think["ids"]);

  // eval and trace take the same conversation.
  o = run("eval fidelity --json --max-new-tokens 2 --model " + llama31.string() + " --messages " + dated_file.string() +
          " --chat-date '05 Mar 2025'");
  REQUIRE(o.exit_code == 0);
  // stderr (merged here) carries eval's progress lines before the record.
  CHECK(nlohmann::json::parse(o.output.substr(o.output.find("{\n"))).at("prompt_tokens") == dated["ids"].size());
  const auto trace = temp_file("messages_trace.h5");
  std::filesystem::remove(trace);
  o = run("trace --quiet --max-new-tokens 1 --model " + qwen3.string() + " --messages " + qwen_file.string() +
          " --no-think --out " + trace.string());
  REQUIRE(o.exit_code == 0);
  CHECK_THAT(run("inspect " + trace.string()).output,
             Catch::Contains("prompt " + std::to_string(no_think["ids"].size()) + " tokens"));

  const auto info = nlohmann::json::parse(run("info --json --model " + llama31.string()).output);
  CHECK(info["chat_template"] == "Jinja2 template in chat_template.jinja; it reads builtin_tools, custom_tools, date_string, "
                                 "tools_in_user_message");
  for (const auto& path : {dated_file, qwen_file, trace}) std::filesystem::remove(path);
}

namespace {

// Runs kvscope with `args` and checks its exit code and that its output holds every one of `phrases`.
void check_refused(const std::string& args, int exit_code, const std::vector<std::string>& phrases) {
  const auto o = run(args);
  INFO("kvscope " << args << "\n" << o.output);
  CHECK(o.exit_code == exit_code);
  for (const auto& phrase : phrases) CHECK_THAT(o.output, Catch::Contains(phrase));
}

}  // namespace

TEST_CASE("--messages, --chat-date and --no-think refuse what they cannot do") {
  const auto llama31 = kvscope::test::folder_with_chat_template("llama3.1").string();
  const auto conversation = messages_file("usage", nlohmann::json::parse(R"([{"role": "user", "content": "hi"}])"));
  check_refused("generate --messages " + conversation.string() + " --prompt hi", 2, {"--messages", "--prompt"});
  check_refused("generate --prompt hi --chat-date '05 Mar 2025'", 2, {"--chat-date needs --chat or --messages"});
  check_refused("generate --prompt hi --no-think", 2, {"--no-think needs --chat or --messages"});
  check_refused("generate --chat --prompt hi --chat-date 'March 5' --model " + llama31, 2,
                {"--chat-date 'March 5'", "DD Mon YYYY"});
  check_refused("generate --chat --prompt hi --no-think --max-new-tokens 1 --model " + llama31, 2,
                {"--no-think", "does not read 'enable_thinking'"});
  check_refused("generate --chat --prompt hi --template-arg mood=1 --max-new-tokens 1 --model " + llama31, 2,
                {"--template-arg mood", "date_string"});
  check_refused("generate --prompt hi --template-arg mood=1", 2, {"--template-arg needs --chat or --messages"});
  check_refused("generate --chat --prompt hi --chat-template /nonexistent/t.jinja", 2,
                {"--chat-template '/nonexistent/t.jinja' cannot be read"});
  const auto tool = messages_file("tool", nlohmann::json::parse(R"([{"role": "user", "content": "hi"},
                                                                   {"role": "ipython", "content": "42"}])"));
  check_refused("generate --max-new-tokens 1 --messages " + tool.string() + " --model " + llama31, 2,
                {"message 1 has role 'ipython': tool calling is not supported"});
  // Llama 2 refuses turns that do not alternate, as its template does.
  const auto twice = messages_file("twice", nlohmann::json::parse(R"([{"role": "user", "content": "a"},
                                                                    {"role": "user", "content": "b"}])"));
  check_refused("generate --max-new-tokens 1 --messages " + twice.string() + " --model " +
                    (std::filesystem::path(KVSCOPE_FIXTURES_DIR) / "hf_synthetic" / "llama2").string(),
                1, {"refused the conversation", "Conversation roles must alternate"});
  for (const auto& path : {conversation, tool, twice}) std::filesystem::remove(path);
}

TEST_CASE("tokenize prints the ids generate would run, with and without a chat template") {
  std::ifstream in(std::filesystem::path(KVSCOPE_FIXTURES_DIR) / "hf_synthetic" / "golden.json");
  const auto golden = nlohmann::json::parse(in);
  for (const std::string name : {"qwen3", "llama2"}) {
    INFO("checkpoint " << name);
    const auto folder = std::filesystem::path(KVSCOPE_FIXTURES_DIR) / "hf_synthetic" / name;
    const auto& g = golden["checkpoints"][name];
    // The plain prompt (BOS where the model wants one) and a one-message chat, as transformers made them.
    const auto plain_file = temp_file(name + "_tokenize.txt");
    std::ofstream(plain_file) << golden["prompt"].get<std::string>();
    auto o = run("tokenize --json --model " + folder.string() + " --prompt-file " + plain_file.string());
    REQUIRE(o.exit_code == 0);
    CHECK(nlohmann::json::parse(o.output)["ids"] == g["prompt_ids"]);
    for (const auto& chat : g["chats"]) {
      if (chat["messages"].size() != 1) continue;
      std::ofstream(plain_file) << chat["messages"][0]["content"].get<std::string>();
      o = run("tokenize --json --chat --model " + folder.string() + " --prompt-file " + plain_file.string());
      REQUIRE(o.exit_code == 0);
      const auto j = nlohmann::json::parse(o.output);
      CHECK(j["ids"] == chat["ids"]);
      CHECK(j["text"] == chat["text"]);
      CHECK(j["pieces"].size() == chat["ids"].size());
    }
    std::filesystem::remove(plain_file);
  }
  const auto o = run("tokenize 'Hello world!'");
  CHECK(o.exit_code == 0);
  CHECK_THAT(o.output, Catch::Contains("3 tokens") && Catch::Contains("19556  Hello"));
}

TEST_CASE("a system message (--system) needs --chat") {
  const auto o = run("generate --prompt hi --system 'Be brief.' --max-new-tokens 1");
  CHECK(o.exit_code != 0);
  CHECK_THAT(o.output, Catch::Contains("--system") && Catch::Contains("--chat"));
}

TEST_CASE("info describes a Hugging Face folder: format, architecture, storage types, tokenizer") {
  const auto folder = std::filesystem::path(KVSCOPE_FIXTURES_DIR) / "hf_synthetic" / "qwen3";
  auto o = run("info --json --model " + folder.string());
  REQUIRE(o.exit_code == 0);
  const auto j = nlohmann::json::parse(o.output);
  CHECK(j["format"] == "Hugging Face safetensors (1 file)");
  CHECK(j["architecture"] == "Qwen3ForCausalLM");
  CHECK(j["head_dim"] == 24);
  CHECK(j["n_kv_heads"] == 1);
  CHECK(j["rope_style"] == "rotate-half");
  CHECK_THAT(j["tokenizer"].get<std::string>(), Catch::StartsWith("transformers 5.2.0 ") &&
                                                    Catch::Contains("normalizer NFC") && Catch::Contains("decoder ByteLevel"));
  CHECK(j["tensor_types"]["F32"]["tensors"].get<int>() > 0);
  o = run("info --model " + (std::filesystem::path(KVSCOPE_FIXTURES_DIR) / "hf_synthetic" / "qwen2").string());
  CHECK(o.exit_code == 0);
  CHECK_THAT(o.output, Catch::Contains("Qwen2ForCausalLM") && Catch::Contains("BF16"));
  o = run("info --model " + std::filesystem::path(KVSCOPE_FIXTURES_DIR).string());  // a folder, but no model
  CHECK(o.exit_code == 1);
  CHECK_THAT(o.output, Catch::Contains("no config.json"));
}
