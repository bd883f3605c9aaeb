// Evidence stretches carried to token positions (issue 35): each tokenizer kind's bytes per token, the mapping
// through middle truncation and the chat template, and prepare_prompt end to end on the default model.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>

#include "core/eval/eval_protocol.h"
#include "core/eval/evidence_tokens.h"
#include "core/eval/longbench_evidence.h"
#include "core/model/gguf.h"
#include "core/model/model.h"
#include "core/model/tokenizer_bpe.h"
#include "core/model/tokenizer_spm.h"

using namespace kvscope;
using namespace kvscope::eval;

namespace {

std::filesystem::path model_path() {
  return std::filesystem::path(KVSCOPE_SOURCE_DIR) / ".deps/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

const model::Model* smollm2() {
  static const std::unique_ptr<model::Model> m = []() -> std::unique_ptr<model::Model> {
    if (!std::filesystem::exists(model_path())) return nullptr;
    return std::make_unique<model::Model>(model::load_model(model_path()));
  }();
  return m.get();
}

#define REQUIRE_MODEL()                                                                       \
  const model::Model* m = smollm2();                                                          \
  if (!m) {                                                                                   \
    WARN("skipped: " << model_path().string() << " is missing (run scripts/fetch_model.sh)"); \
    return;                                                                                   \
  }

// The text tokens [first, last] spell, from the BPE tokenizer's own raw bytes (not its offsets).
std::string spelled(const model::Tokenizer& tok, const std::vector<int>& ids, int first, int last) {
  const auto& bpe = dynamic_cast<const model::BpeTokenizer&>(tok);
  std::string out;
  for (int i = first; i <= last; ++i) out += bpe.token_bytes(ids[i]);
  return out;
}

EvidenceText stretch_of(const std::string& text, const std::string& what, const std::string& kind) {
  const auto at = text.find(what);
  REQUIRE(at != std::string::npos);
  return {at, at + what.size(), kind};
}

// A SentencePiece-style vocabulary: the byte tokens, a few pieces, '▁' words (scores choose the merges).
model::SpmVocab spm_vocab(bool byte_fallback) {
  const std::string sp = "\xE2\x96\x81";
  model::SpmVocab v;
  auto add = [&](const std::string& piece, float score, int32_t type = 1) {
    v.tokens.push_back(piece);
    v.scores.push_back(score);
    v.token_types.push_back(type);
  };
  add("<unk>", 0, 2);
  add("<s>", 0, 3);
  add("</s>", 0, 3);
  if (byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      add(name, 0, 6);
    }
  }
  for (const char* c : {"h", "e", "l", "o", "t", "a", "r"}) add(c, -10);
  add(sp, -5);
  add(sp + "t", -1);
  add("he", -2);
  add(sp + "the", -3);
  add("ll", -4);
  add("llo", -6);
  add(sp + "he", -7);
  add("hello", -8);
  add(sp + "hello", -9);
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  v.byte_fallback = byte_fallback;
  return v;
}

}  // namespace

TEST_CASE("carry_evidence keeps what survives of each stretch", "[evidence]") {
  // A 100-byte text cut to [0, 30) and [70, 100), joined: the tail lands at 30.
  const std::vector<TextSegment> cut = {{0, 30, 0}, {70, 30, 30}};
  const auto out = carry_evidence({{5, 10, "head"},
                                   {40, 50, "middle"},
                                   {25, 35, "head edge"},
                                   {65, 75, "tail edge"},
                                   {20, 80, "across"},
                                   {90, 100, "tail"}},
                                  cut);
  REQUIRE(out.size() == 5);  // the middle one is cut out
  CHECK((out[0].begin == 5 && out[0].end == 10 && out[0].kind == "head"));
  CHECK((out[1].begin == 25 && out[1].end == 30 && out[1].kind == "head edge"));
  CHECK((out[2].begin == 30 && out[2].end == 35 && out[2].kind == "tail edge"));
  CHECK((out[3].begin == 20 && out[3].end == 40 && out[3].kind == "across"));  // both surviving parts, joined
  CHECK((out[4].begin == 50 && out[4].end == 60 && out[4].kind == "tail"));
  CHECK(carry_evidence({{1, 2, "x"}}, {}).empty());
}

TEST_CASE("truncation_segments trust only what decoding gave back unchanged", "[evidence]") {
  const std::string original = "alpha beta gamma delta";
  SECTION("exact pieces") {
    const auto s = truncation_segments(original, 6, 11, "alpha ", "gamma delta");
    REQUIRE(s.size() == 2);
    CHECK((s[0].from == 0 && s[0].length == 6 && s[0].to == 0));
    CHECK((s[1].from == 11 && s[1].length == 11 && s[1].to == 6));
  }
  SECTION("a decoder that strips the tail's leading space (SentencePiece)") {
    const auto s = truncation_segments(original, 5, 10, "alpha", "gamma delta");
    REQUIRE(s.size() == 2);
    CHECK((s[1].from == 11 && s[1].length == 11 && s[1].to == 5));
    // " gamma" in the original: its space is gone, "gamma" survives.
    const auto e = carry_evidence({{10, 16, "x"}}, s);
    REQUIRE(e.size() == 1);
    CHECK((e[0].begin == 5 && e[0].end == 10));
  }
  SECTION("a UTF-8 character split by the cut comes back as U+FFFD") {
    const std::string text =
        "ab\xC3\xA9"
        "cd";  // "abécd"
    const auto s = truncation_segments(text, 3, 4, "ab\xEF\xBF\xBD",
                                       "\xEF\xBF\xBD"
                                       "cd");
    REQUIRE(s.size() == 2);
    CHECK((s[0].from == 0 && s[0].length == 2));
    CHECK((s[1].from == 4 && s[1].length == 2 && s[1].to == 5 + 5 - 2));
    CHECK(carry_evidence({{2, 4, "the character"}}, s).empty());
  }
}

TEST_CASE("user_text_segments find the text inside its chat turn", "[evidence]") {
  const std::string before = "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\n";
  const std::string after = "<|im_end|>\n<|im_start|>assistant\n";
  SECTION("framed") {
    const std::string text = "Where is the needle?";
    const auto s = user_text_segments(text, before + text + after, before, after);
    REQUIRE(s.size() == 1);
    CHECK((s[0].from == 0 && s[0].length == text.size() && s[0].to == before.size()));
  }
  SECTION("a template that trims the text") {
    const std::string text = "  needle here \n";
    const auto s = user_text_segments(text, before + "needle here" + after, before, after);
    REQUIRE(s.size() == 1);
    CHECK((s[0].from == 2 && s[0].length == 11 && s[0].to == before.size()));
  }
  SECTION("a marker rendered differently: the text's first occurrence") {
    const std::string text = "needle";
    const auto s = user_text_segments(text, "[INST] needle [/INST]", "other", "frame");
    REQUIRE(s.size() == 1);
    CHECK(s[0].to == 7);
  }
  CHECK(user_text_segments("absent", "<s>something else</s>", "<s>", "</s>").empty());
}

TEST_CASE("evidence_token_spans take every token holding a byte of a stretch", "[evidence]") {
  // tokens: [0,3) [3,3) (holds nothing) [3,7) [7,8) [8,12)
  const std::vector<model::TokenBytes> bytes = {{0, 3}, {3, 3}, {3, 7}, {7, 8}, {8, 12}};
  const auto spans = evidence_token_spans(
      {{2, 4, "across"}, {3, 7, "exact"}, {7, 8, "one byte"}, {12, 20, "past the end"}, {5, 9, "three"}}, bytes);
  REQUIRE(spans.size() == 4);
  CHECK((spans[0].first == 0 && spans[0].last == 2 && spans[0].kind == "across"));
  CHECK((spans[1].first == 2 && spans[1].last == 2));
  CHECK((spans[2].first == 3 && spans[2].last == 3));
  CHECK((spans[3].first == 2 && spans[3].last == 4 && spans[3].kind == "three"));
}

TEST_CASE("SentencePiece-style tokens map back to the input's bytes", "[evidence][tokenizer]") {
  const model::SpmTokenizer tok(spm_vocab(true));
  const std::string text = "hello the\xC3\xA9 hat</s>hello";
  const model::Encoding e = tok.encode_with_bytes(text);
  REQUIRE(e.ids == tok.encode(text));
  REQUIRE(e.bytes.size() == e.ids.size());
  // Each token's bytes read as its piece with '▁' for a space, less the space prefix the tokenizer adds.
  std::string rebuilt;
  for (std::size_t i = 0; i < e.ids.size(); ++i) {
    CHECK(e.bytes[i].begin <= e.bytes[i].end);
    if (i > 0) CHECK(e.bytes[i].begin >= e.bytes[i - 1].begin);
    rebuilt += text.substr(e.bytes[i].begin, e.bytes[i].end - e.bytes[i].begin);
  }
  CHECK(rebuilt == text);  // every byte held once, in order (the two bytes of é by their two byte tokens)
  // "▁hello" at the start: the prefix stands for nothing, so the token holds "hello".
  CHECK((e.bytes[0].begin == 0 && e.bytes[0].end == 5));
  // "</s>" is a special token holding its own text.
  const auto special = text.find("</s>");
  bool found = false;
  for (std::size_t i = 0; i < e.ids.size(); ++i)
    if (e.ids[i] == 2) found = e.bytes[i].begin == special && e.bytes[i].end == special + 4;
  CHECK(found);

  // Without byte tokens a character outside the vocabulary is one unknown token holding the character.
  const model::SpmTokenizer no_bytes(spm_vocab(false));
  const std::string odd = "he\xC3\xA9r";
  const model::Encoding u = no_bytes.encode_with_bytes(odd);
  REQUIRE(u.ids == no_bytes.encode(odd));
  std::size_t unk = 0;
  for (std::size_t i = 0; i < u.ids.size(); ++i)
    if (u.ids[i] == 0) unk = i;
  CHECK((u.bytes[unk].begin == 2 && u.bytes[unk].end == 4));
}

TEST_CASE("byte-level BPE tokens hold exactly their raw bytes", "[evidence][tokenizer]") {
  REQUIRE_MODEL();
  const model::Tokenizer& tok = *m->tokenizer;
  // Special tokens, digits, multibyte characters split over tokens, and bytes SmolLM2 has no token for (\x04).
  const std::string text =
      "<|im_start|>user\nThe keeper, Zorbulax Quint, was 1871 years \xE2\x9C\x93 old\x04 "
      "\xF0\x9F\x98\x80!<|im_end|>";
  const model::Encoding e = tok.encode_with_bytes(text);
  REQUIRE(e.ids == tok.encode(text));
  std::string rebuilt;
  for (std::size_t i = 0; i < e.ids.size(); ++i) {
    const std::string held = text.substr(e.bytes[i].begin, e.bytes[i].end - e.bytes[i].begin);
    CHECK(held == dynamic_cast<const model::BpeTokenizer&>(tok).token_bytes(e.ids[i]));
    rebuilt += held;
  }
  std::string without_dropped = text;
  std::erase(without_dropped, '\x04');
  CHECK(rebuilt == without_dropped);
  const model::Encoding p = tok.encode_prompt_with_bytes(text);
  CHECK(p.ids == tok.encode_prompt(text));
}

TEST_CASE("prepare_prompt places evidence through the chat template and the protocols", "[evidence]") {
  REQUIRE_MODEL();
  const std::string context = "Notes. The keeper was Zorbulax Quint, who kept the lamp. More notes follow here.";
  const std::string question = "\nWho was the keeper?";
  PromptParts parts{context + question, question, "", {}};
  parts.evidence = {stretch_of(parts.text, "Zorbulax Quint", "answer"), stretch_of(parts.text, "keeper?", "asked")};
  for (const bool chat : {true, false}) {
    for (const Protocol protocol : {Protocol::QueryAware, Protocol::QueryAgnostic}) {
      const PreparedPrompt p = prepare_prompt(*m, parts, chat, protocol, 16, 0);
      CAPTURE(chat, protocol_name(protocol));
      REQUIRE(p.evidence.size() == 2);
      std::vector<int> all = p.prompt;
      all.insert(all.end(), p.appended.begin(), p.appended.end());
      const auto& answer = p.evidence[0];
      CHECK(answer.kind == "answer");
      // The span spells the stretch (with the space its first token carries), and no token less does.
      CHECK(spelled(*m->tokenizer, all, answer.first, answer.last) == " Zorbulax Quint");
      const auto& asked = p.evidence[1];
      CHECK(spelled(*m->tokenizer, all, asked.first, asked.last).find("keeper?") != std::string::npos);
      CHECK(spelled(*m->tokenizer, all, asked.first + 1, asked.last).find("keeper") == std::string::npos);
      if (protocol == Protocol::QueryAgnostic) CHECK(asked.first >= static_cast<int>(p.prompt.size()));
    }
  }
}

TEST_CASE("prepare_prompt's middle truncation drops a cut-out stretch and keeps a cut one's surviving part",
          "[evidence]") {
  REQUIRE_MODEL();
  std::string filler;
  for (int i = 0; i < 60; ++i) filler += " Line " + std::to_string(i) + " says nothing.";
  const std::string text =
      "Start: Zorbulax Quint." + filler + " Middle: Brannoc Vell." + filler + " End: Ostrig Ferran.";
  PromptParts parts{text, "", "", {}};
  parts.evidence = {stretch_of(text, "Zorbulax Quint", "head"), stretch_of(text, "Brannoc Vell", "middle"),
                    stretch_of(text, "Ostrig Ferran", "tail")};
  const PreparedPrompt p = prepare_prompt(*m, parts, false, Protocol::QueryAware, 16, 100);
  REQUIRE(p.truncated);
  REQUIRE(p.evidence.size() == 2);
  CHECK(p.evidence[0].kind == "head");
  CHECK(spelled(*m->tokenizer, p.prompt, p.evidence[0].first, p.evidence[0].last) == " Zorbulax Quint");
  CHECK(p.evidence[1].kind == "tail");
  CHECK(spelled(*m->tokenizer, p.prompt, p.evidence[1].first, p.evidence[1].last) == " Ostrig Ferran");

  // A stretch across the cut: what survives of it, up to the head's end and from the tail's start.
  PromptParts across{text, "", "", {{stretch_of(text, "Zorbulax", "x").begin, text.size() - 5, "across"}}};
  const PreparedPrompt q = prepare_prompt(*m, across, false, Protocol::QueryAware, 16, 100);
  REQUIRE(q.evidence.size() == 1);
  CHECK(q.evidence[0].first <= p.evidence[0].first);
  CHECK(q.evidence[0].last >= p.evidence[1].last - 1);
  CHECK(q.evidence[0].last < static_cast<int>(q.prompt.size()));
}

TEST_CASE("LongBench answers are found in the context as whole words", "[evidence][longbench]") {
  LongBenchRecord record;
  record.context = "Mara Quill built it. Mara Quillon did not. 2012 and 12 differ. Quill";
  record.answers = {" Mara Quill ", "12", "Quill"};
  const std::string question = "\nWho built it? Mara Quill?";
  const std::string prompt = "Read: Mara Quill\n" + record.context + question;
  const auto out = longbench_answer_evidence(prompt, question, record);
  std::vector<std::string> found;
  for (const auto& e : out) found.push_back(prompt.substr(e.begin, e.end - e.begin) + "@" + std::to_string(e.begin));
  const std::size_t c = prompt.find(record.context);
  // Not in the instruction before the context nor in the question; not inside "Quillon" nor "2012".
  CHECK(found == std::vector<std::string>{"Mara Quill@" + std::to_string(c), "Quill@" + std::to_string(c + 5),
                                          "12@" + std::to_string(c + 52), "Quill@" + std::to_string(c + 63)});
}

TEST_CASE("LongBench answers are found whatever the case of their ASCII letters", "[evidence][longbench]") {
  LongBenchRecord record;
  record.context = "the city of paris. PARIS again. Parisian. Ümlaut and ümlaut.";
  record.answers = {"Paris", "Ümlaut"};
  const std::string question = "\nWhich city?";
  const std::string prompt = record.context + question;
  std::vector<std::string> found;
  for (const auto& e : longbench_answer_evidence(prompt, question, record))
    found.push_back(prompt.substr(e.begin, e.end - e.begin));
  // Not "Parisian" (a longer word); the non-ASCII letter is compared exactly.
  CHECK(found == std::vector<std::string>{"paris", "PARIS", "Ümlaut"});
}
