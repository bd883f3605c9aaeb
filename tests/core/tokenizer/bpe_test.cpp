// Byte-level BPE on hand-made vocabularies, against a direct reference loop written here.
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "core/common/error.h"
#include "core/model/tokenizer_bpe.h"

using namespace kvscope::model;

namespace {

// GPT-2's bytes_to_unicode, written out again so the test does not borrow the code under test.
std::string byte_char(int b) {
  std::vector<int> bs;
  for (int c = '!'; c <= '~'; ++c) bs.push_back(c);
  for (int c = 0xA1; c <= 0xAC; ++c) bs.push_back(c);
  for (int c = 0xAE; c <= 0xFF; ++c) bs.push_back(c);
  int cp = -1, extra = 0;
  for (int x = 0; x < 256; ++x) {
    const bool printable = std::find(bs.begin(), bs.end(), x) != bs.end();
    const int mapped = printable ? x : 256 + extra++;
    if (x == b) cp = mapped;
  }
  std::string out;
  unicode::append_utf8(out, static_cast<char32_t>(cp));
  return out;
}

std::string to_stored(const std::string& raw) {
  std::string out;
  for (unsigned char c : raw) out += byte_char(c);
  return out;
}

// Vocabulary of the 256 byte tokens plus `words` (raw text), each added with the merge of its split point.
struct TinyVocab {
  BpeVocab vocab;
  std::map<std::string, int> ids;                           // raw text -> id
  std::vector<std::pair<std::string, std::string>> merges;  // raw (left, right), best first

  TinyVocab() {
    for (int b = 0; b < 256; ++b) add_token(std::string(1, static_cast<char>(b)));
  }
  int add_token(const std::string& raw, int32_t type = 1) {
    const int id = static_cast<int>(vocab.tokens.size());
    vocab.tokens.push_back(type == 1 ? to_stored(raw) : raw);
    vocab.token_types.push_back(type);
    ids[raw] = id;
    return id;
  }
  void add_merge(const std::string& left, const std::string& right) {
    if (!ids.count(left + right)) add_token(left + right);
    vocab.merges.push_back(to_stored(left) + " " + to_stored(right));
    merges.emplace_back(left, right);
  }
};

// The reference's BPE, directly: repeatedly merge the lowest-ranked adjacent pair, leftmost on ties.
std::vector<int> reference_bpe(const TinyVocab& v, const std::string& word) {
  std::vector<std::string> parts;
  for (char c : word) parts.emplace_back(1, c);
  while (true) {
    size_t best_rank = SIZE_MAX, best_pos = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      for (size_t r = 0; r < v.merges.size() && r < best_rank; ++r) {
        if (v.merges[r].first == parts[i] && v.merges[r].second == parts[i + 1]) {
          best_rank = r;
          best_pos = i;
        }
      }
    }
    if (best_rank == SIZE_MAX) break;
    parts[best_pos] += parts[best_pos + 1];
    parts.erase(parts.begin() + static_cast<long>(best_pos) + 1);
  }
  std::vector<int> ids;
  for (const auto& p : parts) ids.push_back(v.ids.at(p));
  return ids;
}

}  // namespace

TEST_CASE("BPE merges follow merge rank, leftmost first", "[tokenizer][bpe]") {
  TinyVocab v;
  v.add_merge("l", "l");
  v.add_merge("h", "e");
  v.add_merge("he", "ll");
  v.add_merge("hell", "o");
  v.add_merge(" ", "w");
  v.add_merge("o", "r");
  v.add_merge(" w", "or");
  v.add_merge("a", "a");
  BpeTokenizer tok(v.vocab, BpePreTokenizer::Gpt2);

  CHECK(tok.encode("hello") == std::vector<int>{v.ids.at("hello")});
  CHECK(tok.encode("hello world") ==
        std::vector<int>{v.ids.at("hello"), v.ids.at(" wor"), v.ids.at("l"), v.ids.at("d")});
  // Equal ranks: the leftmost pair goes first, so "aaa" is "aa" + "a", never "a" + "aa".
  CHECK(tok.encode("aaa") == std::vector<int>{v.ids.at("aa"), v.ids.at("a")});
  CHECK(tok.encode("aaaaa") == std::vector<int>{v.ids.at("aa"), v.ids.at("aa"), v.ids.at("a")});
  CHECK(tok.decode(tok.encode("hello world")) == "hello world");
  CHECK(tok.encode("").empty());
}

TEST_CASE("BPE agrees with the direct reference loop on random vocabularies", "[tokenizer][bpe]") {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 20; ++trial) {
    TinyVocab v;
    std::vector<std::string> pieces = {"a", "b", "c", "\xC3", "\xA9"};  // é is two bytes
    for (int m = 0; m < 40; ++m) {
      const std::string l = pieces[rng() % pieces.size()], r = pieces[rng() % pieces.size()];
      if (v.ids.count(l + r)) continue;
      v.add_merge(l, r);
      pieces.push_back(l + r);
    }
    BpeTokenizer tok(v.vocab, BpePreTokenizer::Gpt2);
    for (int w = 0; w < 50; ++w) {
      std::string word;
      const int len = 1 + static_cast<int>(rng() % 24);
      for (int k = 0; k < len; ++k)
        word += (rng() % 4 == 0) ? std::string("\xC3\xA9") : std::string(1, "abc"[rng() % 3]);
      INFO("trial " << trial << " word " << word);
      CHECK(tok.encode(word) == reference_bpe(v, word));
      CHECK(tok.decode(tok.encode(word)) == word);
    }
  }
}

TEST_CASE("BPE special tokens: leftmost-longest, control only when parsing specials", "[tokenizer][bpe]") {
  TinyVocab v;
  const int end = v.add_token("<|end|>", 3);
  const int end_long = v.add_token("<|end|>x", 3);
  const int think = v.add_token("<think>", 4);
  v.vocab.eos_id = end;
  BpeTokenizer tok(v.vocab, BpePreTokenizer::Gpt2);
  const auto b = [&](char c) { return v.ids.at(std::string(1, c)); };

  CHECK(tok.encode("a<|end|>") == std::vector<int>{b('a'), end});
  CHECK(tok.encode("<|end|>x<|end|>") == std::vector<int>{end_long, end});
  CHECK(tok.encode("<think>") == std::vector<int>{think});
  // parse_special = false: control strings are plain text, user-defined ones still match.
  const auto plain = tok.encode("<|end|><think>", false);
  REQUIRE(plain.size() == 8);
  CHECK(plain.back() == think);
  CHECK(tok.decode(plain) == "<|end|><think>");
  CHECK(tok.decode({b('h'), end, b('i')}) == "h<|end|>i");
  CHECK(tok.is_end_of_generation(end));
  CHECK_FALSE(tok.is_end_of_generation(think));
  CHECK_FALSE(tok.is_end_of_generation(-5));
  CHECK(tok.token_text(think) == "<think>");
}

TEST_CASE("BPE drops bytes that have no token", "[tokenizer][bpe]") {
  TinyVocab v;
  v.vocab.tokens[0x04] = "unused-slot";  // byte 04 now has no token of its own
  v.vocab.token_types[0x04] = 5;
  BpeTokenizer tok(v.vocab, BpePreTokenizer::Gpt2);
  CHECK(tok.decode(tok.encode("a\x04"
                              "b")) == "ab");
}

TEST_CASE("BPE rejects inconsistent vocabularies", "[tokenizer][bpe]") {
  BpeVocab empty;
  CHECK_THROWS_AS(BpeTokenizer(empty, BpePreTokenizer::Gpt2), kvscope::Error);
  TinyVocab v;
  v.vocab.eos_id = 100000;
  CHECK_THROWS_WITH(BpeTokenizer(v.vocab, BpePreTokenizer::Gpt2), Catch::Contains("eos_token_id"));
  TinyVocab w;
  w.vocab.token_types.pop_back();
  CHECK_THROWS_WITH(BpeTokenizer(w.vocab, BpePreTokenizer::Gpt2), Catch::Contains("token_type"));
}

TEST_CASE("BPE with ignore_merges takes whole words from the vocabulary", "[tokenizer][bpe]") {
  TinyVocab v;
  v.add_merge("a", "b");
  v.add_merge("b", "c");
  const int abc = v.add_token("abc");  // reachable only as a whole word: no merge builds it
  BpeTokenizer plain(v.vocab, BpePreTokenizer::Gpt2);
  CHECK(plain.encode("abc") == std::vector<int>{v.ids.at("ab"), v.ids.at("c")});
  v.vocab.ignore_merges = true;
  BpeTokenizer whole(v.vocab, BpePreTokenizer::Llama3);
  CHECK(whole.encode("abc") == std::vector<int>{abc});
}

TEST_CASE("pre-tokenizers split as the reference regexes do", "[tokenizer][bpe][pretokenizer]") {
  std::ifstream in(KVSCOPE_FIXTURES_DIR "/tokenizer_smollm2.json");
  REQUIRE(in.good());
  const auto fixture = nlohmann::json::parse(in);
  TinyVocab v;
  const std::pair<const char*, BpePreTokenizer> kinds[] = {
      {"smollm", BpePreTokenizer::SmolLM}, {"llama3", BpePreTokenizer::Llama3}, {"qwen2", BpePreTokenizer::Qwen2}};
  for (const auto& [name, kind] : kinds) {
    BpeTokenizer tok(v.vocab, kind);
    const auto& cases = fixture.at("pre_tokenizer_splits").at(name);
    REQUIRE(cases.size() > 40);
    for (const auto& c : cases) {
      const std::string text = c.at("text");
      INFO(name << ": " << text);
      CHECK(tok.pre_tokenize(text) == c.at("pieces").get<std::vector<std::string>>());
    }
  }
  BpeTokenizer gpt2(v.vocab, BpePreTokenizer::Gpt2);
  CHECK(gpt2.pre_tokenize("it's  12 ab\n") == std::vector<std::string>{"it", "'s", " ", " 12", " ab", "\n"});
  CHECK(bpe_pre_tokenizer_from_name("smollm") == BpePreTokenizer::SmolLM);
  CHECK(bpe_pre_tokenizer_from_name("llama-bpe") == BpePreTokenizer::Llama3);
  CHECK_FALSE(bpe_pre_tokenizer_from_name("no-such-pre").has_value());
}

TEST_CASE("pre-tokenizer keeps invalid UTF-8 bytes", "[tokenizer][bpe][pretokenizer]") {
  TinyVocab v;
  BpeTokenizer tok(v.vocab, BpePreTokenizer::SmolLM);
  const std::string text = "ab\xFF\xE4 cd\xC3";
  std::string joined;
  for (const auto& w : tok.pre_tokenize(text)) joined += w;
  CHECK(joined == text);
  CHECK(tok.decode(tok.encode("x\xE4\xBD")) == "x\xEF\xBF\xBD");
}
