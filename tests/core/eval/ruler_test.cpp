// RULER generation: fixed seeds give fixed samples, the answers sit in the haystack where each task puts them,
// prompts fit the length, and scoring is RULER's string_match_all.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <regex>
#include <sstream>

#include "core/common/sha256.h"
#include "core/eval/ruler.h"

using namespace kvscope::eval;

namespace {

// A stand-in for a tokenizer: one token per 4 bytes, rounded up (the generator only needs a monotone count).
int count_bytes(const std::string& text) { return static_cast<int>((text.size() + 3) / 4); }

std::string essay() {
  std::string text;
  const char* sentences[] = {"The lighthouse keeper wrote the weather in his log every night.",
                             "Ships passed the harbour wall before the tide turned!",
                             "Why does bread rise when the dough is warm?",
                             "Salt in pasta water is there for flavour, not for physics.",
                             "The ferry crossed the river twice before the storm arrived.",
                             "Copper kettles, wooden spoons and iron pans hung above the stove.",
                             "Gardeners planted tulips, onions, carrots and beans along the northern fence.",
                             "Engineers measured bridges, towers, tunnels and canals across seven valleys."};
  for (int i = 0; i < 60; ++i) text += std::string(sentences[i % 8]) + " Paragraph " + std::to_string(i) + " ends here. ";
  return text;
}

RulerSettings settings(int length, int samples) {
  RulerSettings s;
  s.length = length;
  s.samples = samples;
  s.seed = 11;
  s.essay = essay();
  return s;
}

std::string digest(const std::vector<RulerSample>& samples) {
  std::ostringstream all;
  for (const auto& s : samples) {
    all << s.task << '\x1f' << s.index << '\x1f' << s.input << '\x1f' << s.answer_prefix;
    for (const auto& o : s.outputs) all << '\x1f' << o;
    all << '\n';
  }
  return kvscope::sha256_hex(all.str());
}

int occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

}  // namespace

TEST_CASE("RULER samples are fixed by their seed", "[ruler]") {
  const auto a = generate_ruler(settings(2048, 2), count_bytes);
  const auto b = generate_ruler(settings(2048, 2), count_bytes);
  REQUIRE(a.size() == ruler_task_names().size() * 2);
  CHECK(digest(a) == digest(b));
  // A task's samples do not depend on which other tasks are generated with it.
  RulerSettings only = settings(2048, 2);
  only.tasks = {"vt"};
  const auto vt = generate_ruler(only, count_bytes);
  std::vector<RulerSample> vt_in_all;
  std::copy_if(a.begin(), a.end(), std::back_inserter(vt_in_all), [](const RulerSample& s) { return s.task == "vt"; });
  CHECK(digest(vt) == digest(vt_in_all));
  RulerSettings other = settings(2048, 2);
  other.seed = 12;
  CHECK(digest(generate_ruler(other, count_bytes)) != digest(a));
  // The checksum of this file at the commit that introduced the generator: a change to any draw, template or
  // fitting rule changes every benchmark number made with it, so it must be deliberate (update the value then).
  CHECK(digest(a) == "c016762a27f17bb8005746dd132f283b61e9929e86571bd92e17ec0546c9daa7");
}

TEST_CASE("RULER prompts fit the length and fill most of it", "[ruler]") {
  for (int length : {1024, 4096}) {
    INFO("length " << length);
    for (const auto& s : generate_ruler(settings(length, 2), count_bytes)) {
      INFO("task " << s.task);
      const int tokens = count_bytes(s.input + s.answer_prefix);
      CHECK(s.tokens == tokens);
      CHECK(tokens + s.max_new_tokens <= length);
      CHECK(tokens + s.max_new_tokens >= length * 8 / 10);
      CHECK_FALSE(s.outputs.empty());
      // The question ends the input (what query-agnostic appends after compression).
      REQUIRE(s.input.size() >= s.question.size());
      CHECK(s.input.compare(s.input.size() - s.question.size(), s.question.size(), s.question) == 0);
    }
  }
}

TEST_CASE("every RULER answer is in the haystack where its task puts it", "[ruler]") {
  const std::regex needle("One of the special magic (numbers|uuids|words) for ([^ ]+) is: ([^ ]+)\\.");
  for (const auto& s : generate_ruler(settings(2048, 3), count_bytes)) {
    INFO("task " << s.task << " sample " << s.index);
    if (s.task.rfind("niah", 0) == 0) {
      // Each expected value is the value of a needle whose key the question asks for.
      std::map<std::string, std::vector<std::string>> by_key;
      for (std::sregex_iterator it(s.input.begin(), s.input.end(), needle), end; it != end; ++it)
        by_key[(*it)[2]].push_back((*it)[3]);
      for (const auto& value : s.outputs) {
        bool found = false;
        for (const auto& [key, values] : by_key)
          if (std::count(values.begin(), values.end(), value) && s.question.find(key) != std::string::npos) found = true;
        CHECK(found);
      }
      const std::size_t expected = s.task == "niah_multivalue" || s.task == "niah_multiquery" ? 4 : 1;
      CHECK(s.outputs.size() == expected);
    } else if (s.task == "vt") {
      // VAR v0 = value, then VAR v(i+1) = VAR v(i), in order.
      REQUIRE(s.outputs.size() == 5);
      const auto first = s.input.find("VAR " + s.outputs[0] + " = ");
      REQUIRE(first != std::string::npos);
      std::size_t at = first;
      for (std::size_t i = 1; i < s.outputs.size(); ++i) {
        const auto next = s.input.find("VAR " + s.outputs[i] + " = VAR " + s.outputs[i - 1], at);
        CHECK(next != std::string::npos);
        at = next;
      }
      CHECK(s.question.find(s.input.substr(first + 12, 5)) != std::string::npos);  // the value is asked for
      // RULER's one worked example comes first: a chain of 3-letter names, solved after the answer prefix.
      const std::regex solved(" they are:  [A-Z]{3} [A-Z]{3} [A-Z]{3} [A-Z]{3} [A-Z]{3}\n\nMemorize and track");
      CHECK(std::regex_search(s.input, solved));
    } else if (s.task == "cwe") {
      // The 10 answers are the 10 words repeated most in the list the question is about (after the example).
      // The worked example before it answers after RULER's answer prefix.
      CHECK(s.input.find("most common words in the above list? Answer: The top 10 words that appear most often in "
                         "the list are: 1. ") != std::string::npos);
      const std::string list = s.input.substr(s.input.rfind("Below is a numbered list"));
      std::map<std::string, int> counts;
      std::istringstream words(list.substr(0, list.find("\nQuestion:")));
      for (std::string w; words >> w;)
        if (!w.empty() && !std::isdigit(static_cast<unsigned char>(w[0]))) ++counts[w];
      REQUIRE(s.outputs.size() == 10);
      int least_common = 1 << 30, most_other = 0;
      for (const auto& [w, n] : counts) {
        const bool answer = std::count(s.outputs.begin(), s.outputs.end(), w) > 0;
        if (answer) least_common = std::min(least_common, n);
        else if (w != "Below" && w != "is" && w != "a" && w != "numbered" && w != "list" && w != "of" &&
                 w != "words." && w != "In" && w != "these" && w != "words," && w != "some" && w != "appear" &&
                 w != "more" && w != "often" && w != "than" && w != "others." && w != "Memorize" && w != "the" &&
                 w != "ones" && w != "that" && w != "most")
          most_other = std::max(most_other, n);
      }
      CHECK(least_common > most_other);
    } else if (s.task == "fwe") {
      REQUIRE(s.outputs.size() == 3);
      const int a = occurrences(s.input, " " + s.outputs[0] + " "), b = occurrences(s.input, " " + s.outputs[1] + " "),
                c = occurrences(s.input, " " + s.outputs[2] + " ");
      CHECK(a >= b);
      CHECK(b >= c);
      CHECK(c > 0);
    }
  }
}

TEST_CASE("RULER scoring is string_match_all", "[ruler]") {
  CHECK(ruler_score(" The number is 4581886.", {"4581886"}) == 1.0);
  CHECK(ruler_score("ABC-def and 12", {"abc-DEF", "13"}) == 0.5);
  CHECK(ruler_score("nothing", {"x", "y", "z"}) == 0.0);
  CHECK(ruler_score("a\tb", {"a\nb"}) == 1.0);  // control characters become line breaks
  CHECK(ruler_score("anything", {}) == 0.0);
}

TEST_CASE("bad RULER settings are clear errors", "[ruler]") {
  RulerSettings s = settings(2048, 1);
  s.tasks = {"qa_1"};
  CHECK_THROWS_WITH(generate_ruler(s, count_bytes), Catch::Contains("unknown RULER task 'qa_1'"));
  // Samples are held in memory: their number and their tokens in all are bounded before any is generated.
  s = settings(2048, kMaxRulerSamples + 1);
  CHECK_THROWS_WITH(generate_ruler(s, count_bytes), Catch::Contains("--samples 1001 is more than the bound of 1000"));
  s = settings(1 << 20, kMaxRulerSamples);
  CHECK_THROWS_WITH(generate_ruler(s, count_bytes), Catch::Contains("prompt tokens, more than the bound of 268435456"));
  s = settings(150, 1);  // 22 tokens for the prompt: not even the template fits
  s.tasks = {"niah_single_1"};
  CHECK_THROWS_WITH(generate_ruler(s, count_bytes), Catch::Contains("leaves no room"));
  s = settings(2048, 1);
  s.essay = "too short";
  CHECK_THROWS_WITH(generate_ruler(s, count_bytes), Catch::Contains("fewer than 50"));
}
