// The SmolLM2 tokenizer loaded from the real GGUF, against tests/fixtures/tokenizer_smollm2.json (made by
// Hugging Face tokenizers with tools/make_tokenizer_golden.py). Skipped with a warning when the model file
// has not been fetched (scripts/fetch_model.sh).
#include <catch2/catch.hpp>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "core/model/chat_template.h"
#include "core/model/gguf.h"
#include "core/model/tokenizer.h"
#include "core/model/tokenizer_bpe.h"

using namespace kvscope::model;

namespace {
// One conversation in SmolLM2's own chat template (from its GGUF), as --chat sends it.
std::string smollm2_chat(const std::vector<ChatMessage>& messages);
}  // namespace

namespace {

const nlohmann::json& fixture() {
  static const nlohmann::json j = [] {
    std::ifstream in(KVSCOPE_FIXTURES_DIR "/tokenizer_smollm2.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

std::filesystem::path model_path() {
  return std::filesystem::path(KVSCOPE_SOURCE_DIR) / ".deps/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

const Tokenizer* smollm2() {
  static const std::unique_ptr<Tokenizer> tok = []() -> std::unique_ptr<Tokenizer> {
    if (!std::filesystem::exists(model_path())) return nullptr;
    return load_tokenizer(GgufFile::open(model_path()));
  }();
  return tok.get();
}

#define REQUIRE_MODEL()                                                                       \
  const Tokenizer* tok = smollm2();                                                           \
  if (!tok) {                                                                                 \
    WARN("skipped: " << model_path().string() << " is missing (run scripts/fetch_model.sh)"); \
    return;                                                                                   \
  }

// Random text over many scripts and shapes: ASCII words and code, whitespace runs, digits, accents and
// combining marks, CJK, Hangul, Arabic, emoji with ZWJ and variation selectors, and any codepoint at all.
std::string random_text(std::mt19937& rng, size_t n_chars, const std::function<bool(char32_t)>& allowed) {
  static const std::vector<std::pair<char32_t, char32_t>> pools = {
      {'a', 'z'},         {'A', 'Z'},       {'0', '9'},       {' ', ' '},       {' ', '~'},       {'\t', '\n'},
      {'\r', '\r'},       {0xA0, 0xFF},     {0x300, 0x36F},   {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0x600, 0x6FF},
      {0x1F300, 0x1F6FF}, {0x200D, 0x200D}, {0xFE0F, 0xFE0F}, {0x3000, 0x3000}, {0x0, 0xD7FF},    {0xE000, 0x10FFFF}};
  std::string out;
  size_t made = 0;
  while (made < n_chars) {
    const auto& [lo, hi] = pools[rng() % pools.size()];
    const char32_t cp = lo + static_cast<char32_t>(rng() % (hi - lo + 1));
    if (!allowed(cp)) continue;
    unicode::append_utf8(out, cp);
    ++made;
  }
  return out;
}

}  // namespace

TEST_CASE("SmolLM2 metadata", "[tokenizer][smollm2]") {
  REQUIRE_MODEL();
  CHECK(tok->vocab_size() == fixture().at("vocab_size").get<int>());
  CHECK(tok->bos_id() == 1);
  CHECK(tok->eos_id() == 2);
  CHECK_FALSE(tok->add_bos());
  CHECK(tok->is_end_of_generation(0));  // <|endoftext|>
  CHECK(tok->is_end_of_generation(2));  // <|im_end|>
  CHECK_FALSE(tok->is_end_of_generation(1));
  CHECK_FALSE(tok->is_end_of_generation(19556));
  CHECK(tok->token_text(1) == "<|im_start|>");
}

TEST_CASE("SmolLM2 encodes and decodes as the reference", "[tokenizer][smollm2]") {
  REQUIRE_MODEL();
  const auto& cases = fixture().at("encodings");
  REQUIRE(cases.size() >= 40);
  for (const auto& c : cases) {
    const std::string text = c.at("text");
    const auto ids = c.at("ids").get<std::vector<int>>();
    INFO("text: " << text);
    CHECK(tok->encode(text) == ids);
    CHECK(tok->decode(ids) == c.at("decoded").get<std::string>());
  }
  for (const auto& c : fixture().at("encodings_no_special")) {
    const std::string text = c.at("text");
    INFO("text (specials as plain text): " << text);
    CHECK(tok->encode(text, false) == c.at("ids").get<std::vector<int>>());
  }
}

TEST_CASE("SmolLM2 decodes broken UTF-8 as the reference", "[tokenizer][smollm2]") {
  REQUIRE_MODEL();
  for (const auto& c : fixture().at("invalid_decodes")) {
    INFO(c.at("name").get<std::string>());
    CHECK(tok->decode(c.at("ids").get<std::vector<int>>()) == c.at("text").get<std::string>());
  }
  for (const auto& c : fixture().at("token_texts")) {
    const int id = c.at("id");
    INFO("token " << id);
    CHECK(tok->token_text(id) == c.at("text").get<std::string>());
  }
}

TEST_CASE("SmolLM2 round-trips arbitrary valid UTF-8", "[tokenizer][smollm2]") {
  REQUIRE_MODEL();
  const auto* bpe = dynamic_cast<const BpeTokenizer*>(tok);
  REQUIRE(bpe);
  // The vocabulary has no token for some bytes (04 06 13 14 16 1D, and lead bytes F1 F2 of the unassigned
  // planes 4-11); the reference drops those, so only text it can spell is expected to come back whole.
  bool has_byte[256] = {};
  for (int id = 0; id < tok->vocab_size(); ++id)
    if (bpe->token_bytes(id).size() == 1) has_byte[static_cast<uint8_t>(bpe->token_bytes(id)[0])] = true;
  auto spellable = [&](char32_t cp) {
    std::string s;
    unicode::append_utf8(s, cp);
    for (unsigned char b : s)
      if (!has_byte[b]) return false;
    return true;
  };
  CHECK_FALSE(spellable(0x04));
  CHECK_FALSE(spellable(0x50000));
  CHECK(spellable(0x1F389));

  std::mt19937 rng(42);
  for (int trial = 0; trial < 300; ++trial) {
    const std::string text = random_text(rng, 1 + rng() % 60, spellable);
    INFO("trial " << trial);
    CHECK(tok->decode(tok->encode(text)) == text);
    CHECK(tok->decode(tok->encode(text, false)) == text);
  }
  const std::string chat = smollm2_chat({{"user", "Write code:\n\tint x = 12345;  // 👨‍👩‍👧 é\n"}});
  CHECK(tok->decode(tok->encode(chat)) == chat);
}

TEST_CASE("SmolLM2 encodes a 1000-token prompt quickly, also from several threads", "[tokenizer][smollm2][perf]") {
  REQUIRE_MODEL();
  // Prose, code and numbers, about 1000 tokens; every word new to a fresh tokenizer's cache except repeats.
  const std::vector<std::string> words = {"the",    "model",  "attention", "cache", "budget",
                                          "policy", "evicts", "tokens",    "while", "keeping",
                                          "recent", "heavy",  "hitters",   "and",   "of"};
  std::mt19937 rng(7);
  std::string prompt = smollm2_chat({{"user", "Summarise the following notes."}});
  for (int line = 0; prompt.size() < 4800; ++line) {
    if (line % 4 == 3) {
      prompt += "    for (int i = 0; i < n_" + std::to_string(line) + "; ++i) { sum += x[i] * " +
                std::to_string(rng() % 100000) + "; }\n";
      continue;
    }
    for (int w = 0; w < 12; ++w) {
      std::string word = words[rng() % words.size()];
      if (rng() % 3 == 0) word += std::string(1, static_cast<char>('a' + rng() % 26));  // rarer, uncached words
      prompt += (w == 0 ? "" : " ") + word;
    }
    prompt += ". Step " + std::to_string(line) + " costs " + std::to_string(rng() % 1000) + " ms.\n";
  }
  // A fresh tokenizer so the word cache starts empty, as for the first prompt of a run. Process CPU time is
  // asserted, since wall time on a shared machine measures the neighbours too.
  const auto cold = load_tokenizer(GgufFile::open(model_path()));
  const auto t0 = std::chrono::steady_clock::now();
  const std::clock_t c0 = std::clock();
  const auto ids = cold->encode(prompt);
  const std::clock_t c1 = std::clock();
  const auto t1 = std::chrono::steady_clock::now();
  const auto again = cold->encode(prompt);
  const auto t2 = std::chrono::steady_clock::now();
  const double cold_cpu_ms = 1000.0 * static_cast<double>(c1 - c0) / CLOCKS_PER_SEC;
  const double cold_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  const double warm_ms = std::chrono::duration<double, std::milli>(t2 - t1).count();
  WARN("encode " << ids.size() << " tokens (" << prompt.size() << " bytes): " << cold_ms << " ms cold (" << cold_cpu_ms
                 << " ms CPU), " << warm_ms << " ms with the word cache");
  CHECK(ids.size() >= 1000);
  CHECK(again == ids);
  CHECK(cold_cpu_ms < 50.0);

  std::vector<std::vector<int>> results(4);
  std::vector<std::thread> threads;
  for (auto& r : results) threads.emplace_back([&] { r = cold->encode(prompt); });
  for (auto& t : threads) t.join();
  for (const auto& r : results) CHECK(r == ids);
}

TEST_CASE("SmolLM2's GGUF chat template writes its default system prompt", "[tokenizer][smollm2][chat]") {
  REQUIRE_MODEL();
  const ChatTemplateSource source = read_chat_template(GgufFile::open(model_path()));
  REQUIRE(source.jinja);
  CHECK(source.origin == "GGUF tokenizer.chat_template");
  CHECK(smollm2_chat({{"user", "hi"}}) ==
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

namespace {
std::string smollm2_chat(const std::vector<ChatMessage>& messages) {
  const auto gguf = GgufFile::open(model_path());
  const auto tokenizer = load_tokenizer(gguf);
  return render_chat(choose_chat_template(read_chat_template(gguf), *tokenizer).get(), messages);
}
}  // namespace
