// SentencePiece-style BPE on a hand-built vocabulary: hand-worked cases and a direct reference loop.
#include <catch2/catch.hpp>
#include <cstdio>
#include <map>
#include <random>

#include "core/common/error.h"
#include "core/model/tokenizer_spm.h"

using namespace kvscope::model;

namespace {

const std::string kSp = "\xE2\x96\x81";  // '▁'

struct HandVocab {
  SpmVocab vocab;
  std::map<std::string, int> ids;

  HandVocab() {
    add("<unk>", 0, 2);
    add("<s>", 0, 3);
    add("</s>", 0, 3);
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      add(name, 0, 6);
    }
    for (const char* c : {"h", "e", "l", "o", "t", "a"}) add(c, -10);
    add(kSp, -5);
    add(kSp + "t", -1);
    add("he", -2);
    add(kSp + "the", -3);
    add("ll", -4);
    add("llo", -6);
    add(kSp + "he", -7);
    add("hello", -8);
    add("hi", -9);
    add("aa", -1.5f);
    add(kSp + "a", -20);
    vocab.unk_id = 0;
    vocab.bos_id = 1;
    vocab.eos_id = 2;
  }
  void add(const std::string& piece, float score, int32_t type = 1) {
    ids[piece] = static_cast<int>(vocab.tokens.size());
    vocab.tokens.push_back(piece);
    vocab.scores.push_back(score);
    vocab.token_types.push_back(type);
  }
  int id(const std::string& piece) const { return ids.at(piece); }
  int byte(int b) const { return 3 + b; }
};

std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = unicode::decode_utf8(s, i);
    out.push_back(s.substr(i, c.length));
    i += c.length;
  }
  return out;
}

// sentencepiece's BPE, directly: merge the best-scoring adjacent pair that is a normal piece (leftmost on
// ties) until none is left, then spell pieces missing from the vocabulary as byte tokens.
std::vector<int> reference_encode(const HandVocab& v, const std::string& text) {
  std::string escaped = kSp;
  for (char c : text) escaped += c == ' ' ? kSp : std::string(1, c);
  auto sym = utf8_chars(escaped);
  auto normal = [&](const std::string& p) {
    const auto it = v.ids.find(p);
    return it != v.ids.end() && v.vocab.token_types[it->second] == 1;
  };
  while (true) {
    float best = -1e30f;
    int pos = -1;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      const std::string cat = sym[i] + sym[i + 1];
      if (normal(cat) && v.vocab.scores[v.id(cat)] > best) {
        best = v.vocab.scores[v.id(cat)];
        pos = static_cast<int>(i);
      }
    }
    if (pos < 0) break;
    sym[pos] += sym[pos + 1];
    sym.erase(sym.begin() + pos + 1);
  }
  std::vector<int> ids;
  for (const auto& s : sym) {
    if (normal(s)) {
      ids.push_back(v.id(s));
    } else {
      for (unsigned char b : s) ids.push_back(v.byte(b));
    }
  }
  return ids;
}

}  // namespace

TEST_CASE("SPM merges by score, worked by hand", "[tokenizer][spm]") {
  HandVocab v;
  SpmTokenizer tok(v.vocab);
  // ▁ t h e: ▁t (-1) first, then he (-2), then ▁t+he = ▁the (-3).
  CHECK(tok.encode("the") == std::vector<int>{v.id(kSp + "the")});
  // ▁ h e l l o: he, ll, llo, then ▁he (-7) beats hello (-8), and ▁hello is no piece.
  CHECK(tok.encode("hello") == std::vector<int>{v.id(kSp + "he"), v.id("llo")});
  // Equal scores: the leftmost pair merges first.
  CHECK(tok.encode("aaa") == std::vector<int>{v.id(kSp), v.id("aa"), v.id("a")});
  // é is not a piece: its two bytes, after a lone ▁.
  CHECK(tok.encode("\xC3\xA9") == std::vector<int>{v.id(kSp), v.byte(0xC3), v.byte(0xA9)});
  // Special tokens, and the space prefix again after each one.
  CHECK(tok.encode("<s>hi</s>") == std::vector<int>{1, v.id(kSp), v.id("hi"), 2});
  CHECK(tok.encode("<s>hi", false) == std::vector<int>{v.id(kSp), v.byte('<'), v.byte('s'), v.byte('>'), v.id("hi")});
  CHECK(tok.encode("").empty());

  SpmVocab no_prefix = v.vocab;
  no_prefix.space_prefix = SpacePrefix::None;
  no_prefix.strip_leading_space = false;
  SpmTokenizer bare(no_prefix);
  CHECK(bare.encode("hello") == std::vector<int>{v.id("hello")});
  CHECK(bare.decode(bare.encode(" hello")) == " hello");
}

TEST_CASE("SPM decodes as the reference Llama decoder", "[tokenizer][spm]") {
  HandVocab v;
  SpmTokenizer tok(v.vocab);
  const std::string R = "\xEF\xBF\xBD";
  CHECK(tok.decode({v.id(kSp + "he"), v.id("llo"), v.id(kSp + "the")}) == "hello the");
  CHECK(tok.decode({v.id(kSp), v.byte(0xC3), v.byte(0xA9)}) == "\xC3\xA9");
  // A byte run that is not valid UTF-8 gives one U+FFFD per byte token.
  CHECK(tok.decode({v.byte(0xE4), v.byte(0xBD), v.id("h")}) == R + R + "h");
  CHECK(tok.decode({v.byte(0xE4), v.id("h"), v.byte(0xBD)}) == R + "h" + R);
  CHECK(tok.decode({1, v.id(kSp + "he")}) == "<s> he");
  CHECK(tok.token_text(v.id(kSp + "the")) == " the");
  CHECK(tok.token_text(v.byte('A')) == "A");
  CHECK(tok.token_text(v.byte(0xE4)) == R);
  CHECK(tok.is_end_of_generation(2));
  CHECK_FALSE(tok.is_end_of_generation(1));
  CHECK(tok.add_bos());
  CHECK(tok.bos_id() == 1);
}

TEST_CASE("SPM agrees with the direct reference loop and round-trips", "[tokenizer][spm]") {
  HandVocab v;
  SpmTokenizer tok(v.vocab);
  const std::vector<std::string> alphabet = {
      "h", "e", "l", "o", "t", "a", "i", " ", " ", "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x8E\x89", "x", "\n"};
  std::mt19937 rng(99);
  for (int trial = 0; trial < 500; ++trial) {
    std::string text;
    const int n = static_cast<int>(rng() % 20);
    for (int k = 0; k < n; ++k) text += alphabet[rng() % alphabet.size()];
    INFO("text: '" << text << "'");
    if (!text.empty()) CHECK(tok.encode(text) == reference_encode(v, text));
    CHECK(tok.decode(tok.encode(text)) == text);
  }
}

TEST_CASE("SPM without byte tokens falls back to unk", "[tokenizer][spm]") {
  SpmVocab vocab;
  vocab.tokens = {"<unk>", kSp, "a"};
  vocab.scores = {0, -1, -1};
  vocab.token_types = {2, 1, 1};
  vocab.unk_id = 0;
  SpmTokenizer tok(vocab);
  CHECK(tok.encode("ab") == std::vector<int>{1, 2, 0});
}

TEST_CASE("SPM rejects inconsistent vocabularies", "[tokenizer][spm]") {
  SpmVocab vocab;
  CHECK_THROWS_AS(SpmTokenizer(vocab), kvscope::Error);
  vocab.tokens = {"a", "b"};
  vocab.scores = {0};
  CHECK_THROWS_WITH(SpmTokenizer(vocab), Catch::Contains("scores"));
  vocab.scores = {0, 0};
  vocab.bos_id = 7;
  CHECK_THROWS_WITH(SpmTokenizer(vocab), Catch::Contains("bos_token_id"));
}
