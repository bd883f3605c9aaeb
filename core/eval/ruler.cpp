#include "core/eval/ruler.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>
#include <numbers>
#include <random>
#include <set>
#include <string_view>

#include "core/common/error.h"
#include "core/common/file_text.h"

namespace kvscope::eval {
namespace {

// --- seeded choices, the same on every standard library ---------------------------------------------------
class Choices {
 public:
  explicit Choices(uint64_t seed) : engine_(seed) {}
  // Uniform in [0, n), by rejection (no modulo bias, no implementation-defined distribution).
  uint64_t below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = engine_();
    while (x >= limit);
    return x % n;
  }
  int between(int lo, int hi) { return lo + static_cast<int>(below(static_cast<uint64_t>(hi - lo + 1))); }
  template <class T>
  const T& pick(const std::vector<T>& v) { return v[below(v.size())]; }
  template <class T>
  void shuffle(std::vector<T>& v) {  // Fisher-Yates
    for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(i)]);
  }
  // k distinct indices of [0, n), in the order drawn; k <= n (callers size their haystacks for it).
  std::vector<int> sample(int n, int k) {
    if (k > n) throw Error("internal: drawing " + std::to_string(k) + " of " + std::to_string(n) + " items");
    std::vector<int> all(n);
    for (int i = 0; i < n; ++i) all[i] = i;
    for (int i = 0; i < k; ++i) std::swap(all[i], all[i + below(static_cast<uint64_t>(n - i))]);
    all.resize(k);
    return all;
  }
  uint64_t bits() { return engine_(); }

 private:
  std::mt19937_64 engine_;  // its output sequence is fixed by the C++ standard
};

uint64_t mix(uint64_t x) {  // splitmix64's finaliser: nearby seeds give unrelated streams
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

// Python's str.format for the named fields RULER's templates use.
std::string fill(std::string s, const std::map<std::string, std::string>& fields) {
  for (const auto& [name, value] : fields) s = replace_all(s, "{" + name + "}", value);
  return s;
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

// --- RULER's templates (scripts/data/synthetic/constants.py) -------------------------------------------------
const char* kNiahTemplate =
    "Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. I will "
    "quiz you about the {type_needle_v} afterwards.\n{context}\nWhat are all the special magic {type_needle_v} for "
    "{query} mentioned in the provided text?";
const char* kNiahAnswerPrefix = " The special magic {type_needle_v} for {query} mentioned in the provided text are";
const char* kNeedle = "One of the special magic {type_needle_v} for {key} is: {value}.";
const char* kVtTemplate =
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n{context}\nQuestion: "
    "Find all variables that are assigned the value {query} in the text above.";
const char* kVtAnswerPrefix =
    " Answer: According to the chain(s) of variable assignment in the text above, {num_v} variables are assigned "
    "the value {query}, they are: ";
const char* kCweTemplate =
    "Below is a numbered list of words. In these words, some appear more often than others. Memorize the ones that "
    "appear most often.\n{context}\nQuestion: What are the 10 most common words in the above list?";
const char* kCweAnswerPrefix = " Answer: The top 10 words that appear most often in the list are:";
const char* kFweTemplate =
    "Read the following coded text and track the frequency of each coded word. Find the three most frequently "
    "appeared coded words. {context}\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What "
    "are the three most frequently appeared words in the above coded text?";
const char* kFweAnswerPrefix = " Answer: According to the coded text above, the three most frequently appeared words are:";
const char* kNoise = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";

enum class Haystack { Noise, Essay, Needle };
enum class Kind { Words, Numbers, Uuids };

struct NiahConfig {
  Haystack haystack;
  Kind key, value;
  int num_k, num_v, num_q;
};

struct TaskEntry {
  std::string name;
  std::string family;  // niah, vt, cwe, fwe
  NiahConfig niah{};
  int max_new_tokens;
};

// scripts/synthetic.yaml, without the QA tasks.
const std::vector<TaskEntry>& tasks() {
  static const std::vector<TaskEntry> all = {
      {"niah_single_1", "niah", {Haystack::Noise, Kind::Words, Kind::Numbers, 1, 1, 1}, 128},
      {"niah_single_2", "niah", {Haystack::Essay, Kind::Words, Kind::Numbers, 1, 1, 1}, 128},
      {"niah_single_3", "niah", {Haystack::Essay, Kind::Words, Kind::Uuids, 1, 1, 1}, 128},
      {"niah_multikey_1", "niah", {Haystack::Essay, Kind::Words, Kind::Numbers, 4, 1, 1}, 128},
      {"niah_multikey_2", "niah", {Haystack::Needle, Kind::Words, Kind::Numbers, 1, 1, 1}, 128},
      {"niah_multikey_3", "niah", {Haystack::Needle, Kind::Uuids, Kind::Uuids, 1, 1, 1}, 128},
      {"niah_multivalue", "niah", {Haystack::Essay, Kind::Words, Kind::Numbers, 1, 4, 1}, 128},
      {"niah_multiquery", "niah", {Haystack::Essay, Kind::Words, Kind::Numbers, 1, 1, 4}, 128},
      {"vt", "vt", {}, 30},
      {"cwe", "cwe", {}, 120},
      {"fwe", "fwe", {}, 50},
  };
  return all;
}

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> out;
  std::string word;
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (!word.empty()) out.push_back(std::move(word)), word.clear();
    } else {
      word += c;
    }
  }
  if (!word.empty()) out.push_back(std::move(word));
  return out;
}

// Sentences of a text: cut after '.', '!' or '?' followed by a space (the sentence tokenizer RULER uses, nltk's
// punkt, also keeps abbreviations whole; the project's texts have none that matter).
std::vector<std::string> split_sentences(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i + 1 < text.size(); ++i)
    if ((text[i] == '.' || text[i] == '!' || text[i] == '?') && text[i + 1] == ' ') {
      out.push_back(text.substr(start, i + 1 - start));
      start = i + 2;
    }
  if (start < text.size()) out.push_back(text.substr(start));
  return out;
}

// Lower-case letter words of 3 to 12 letters from the text, deduplicated and sorted; then made-up words of
// alternating consonants and vowels until there are at least `at_least`.
std::vector<std::string> vocabulary(const std::string& text, std::size_t at_least) {
  std::set<std::string> words;
  std::string w;
  auto flush = [&] {
    if (w.size() >= 3 && w.size() <= 12) words.insert(w);
    w.clear();
  };
  for (char c : text) {
    if (std::isalpha(static_cast<unsigned char>(c))) w += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else flush();
  }
  flush();
  std::vector<std::string> out(words.begin(), words.end());
  const std::string consonants = "bcdfghklmnprstvz", vowels = "aeiou";
  for (std::size_t i = 0; out.size() < at_least; ++i) {
    std::string made;
    for (std::size_t x = i, n = 0; n < 3; ++n, x /= consonants.size() * vowels.size())
      made += consonants[x % consonants.size()], made += vowels[(x / consonants.size()) % vowels.size()];
    if (!words.count(made)) out.push_back(made);
  }
  return out;
}

struct Context {
  std::vector<std::string> essay_words;  // the essay haystack, word by word
  std::vector<std::string> vocab;        // the essay's own words: keys, and the lists of cwe
  std::string essay;
};

// RULER's needle depths: round(linspace(0, 100, 40)).
std::vector<int> depths() {
  std::vector<int> out;
  for (int i = 0; i < 40; ++i) out.push_back(static_cast<int>(std::lround(100.0 * i / 39.0)));
  return out;
}

std::string random_of(Kind kind, Choices& rng, const Context& c) {
  switch (kind) {
    case Kind::Numbers: return std::to_string(rng.between(1000000, 9999999));
    case Kind::Words: return rng.pick(c.vocab) + "-" + rng.pick(c.vocab);
    case Kind::Uuids: {
      const uint64_t hi = (rng.bits() & 0xFFFFFFFFFFFF0FFFULL) | 0x0000000000004000ULL;  // version 4
      const uint64_t lo = (rng.bits() & 0x3FFFFFFFFFFFFFFFULL) | 0x8000000000000000ULL;  // RFC 4122 variant
      char buf[40];
      std::snprintf(buf, sizeof buf, "%08llx-%04llx-%04llx-%04llx-%012llx", static_cast<unsigned long long>(hi >> 32),
                    static_cast<unsigned long long>((hi >> 16) & 0xFFFF), static_cast<unsigned long long>(hi & 0xFFFF),
                    static_cast<unsigned long long>(lo >> 48),
                    static_cast<unsigned long long>(lo & 0xFFFFFFFFFFFFULL));
      return buf;
    }
  }
  return "";
}

const char* kind_name(Kind k) { return k == Kind::Numbers ? "numbers" : k == Kind::Words ? "words" : "uuids"; }

// A filled-in sample of `units` haystack units (sentences, words, list entries).
struct Draft {
  std::string input, question, answer_prefix;
  std::vector<std::string> outputs;
  std::vector<EvidenceText> evidence;  // bytes of `input`, recorded where the text was put in
};

// Bytes of a template filled with `fields` before its {context}: where the context starts in the filled text.
std::size_t context_offset(const std::string& templ, const std::map<std::string, std::string>& fields) {
  auto without_context = fields;
  without_context.erase("context");
  return fill(templ.substr(0, templ.find("{context}")), without_context).size();
}

// Evidence of a context moved to where the context starts in the input.
void add_evidence_at(std::vector<EvidenceText>& into, const std::vector<EvidenceText>& evidence, std::size_t offset) {
  for (const EvidenceText& e : evidence) into.push_back({e.begin + offset, e.end + offset, e.kind});
}

// A needle sentence and where its key and value sit in it.
struct Needle {
  std::string text;
  int key_index = 0;  // which of the sample's keys it holds
  std::size_t key_at = 0, key_size = 0, value_at = 0, value_size = 0;
};

Needle make_needle(const std::string& type, const std::string& key, const std::string& value, int key_index) {
  const std::string templ = kNeedle;
  const std::size_t key_field = templ.find("{key}"), value_field = templ.find("{value}");
  Needle n;
  n.key_index = key_index;
  n.text = fill(templ, {{"type_needle_v", type}, {"key", key}, {"value", value}});
  n.key_at = fill(templ.substr(0, key_field), {{"type_needle_v", type}}).size();
  n.key_size = key.size();
  n.value_at = n.key_at + key.size() + (value_field - key_field - 5);  // the text between {key} and {value}
  n.value_size = value.size();
  return n;
}

Draft niah(const TaskEntry& t, int units, Choices& rng, const Context& c) {
  const NiahConfig& cfg = t.niah;
  const int num_k = std::max(cfg.num_k, cfg.num_q);
  std::vector<std::string> keys;
  std::vector<Needle> needles;
  std::vector<std::vector<std::string>> values;
  for (int k = 0; k < num_k; ++k) {
    keys.push_back(random_of(cfg.key, rng, c));
    values.emplace_back();
    for (int v = 0; v < cfg.num_v; ++v) {
      values.back().push_back(random_of(cfg.value, rng, c));
      needles.push_back(make_needle(kind_name(cfg.value), keys.back(), values.back().back(), k));
    }
  }
  rng.shuffle(needles);
  std::string context;
  std::vector<std::pair<std::size_t, const Needle*>> placed;  // where each needle starts in the context
  if (cfg.haystack == Haystack::Essay) {
    std::vector<std::string> words;
    for (int i = 0; i < units; ++i) words.push_back(c.essay_words[i % c.essay_words.size()]);
    const auto sentences = split_sentences(join(words, " "));
    const auto all_depths = depths();
    std::vector<int> at;
    for (int i : rng.sample(static_cast<int>(all_depths.size()), static_cast<int>(needles.size())))
      at.push_back(static_cast<int>(sentences.size() * (all_depths[i] / 100.0)));
    std::sort(at.begin(), at.end());
    at.insert(at.begin(), 0);
    at.push_back(static_cast<int>(sentences.size()));
    // The parts (runs of sentences, needles) joined by spaces.
    for (std::size_t i = 1; i < at.size(); ++i) {
      if (i > 1) context += " ";
      context += join({sentences.begin() + at[i - 1], sentences.begin() + at[i]}, " ");
      if (i - 1 < needles.size()) {
        context += " ";
        placed.emplace_back(context.size(), &needles[i - 1]);
        context += needles[i - 1].text;
      }
    }
  } else {
    std::vector<std::string> sentences;
    for (int i = 0; i < units; ++i)
      sentences.push_back(cfg.haystack == Haystack::Noise
                              ? std::string(kNoise)
                              : fill(kNeedle, {{"type_needle_v", kind_name(cfg.value)},
                                               {"key", random_of(cfg.key, rng, c)},
                                               {"value", random_of(cfg.value, rng, c)}}));
    std::vector<const Needle*> needle_of(sentences.size(), nullptr);  // the sample's needles among the sentences
    std::vector<int> at = rng.sample(units, static_cast<int>(needles.size()));
    std::sort(at.rbegin(), at.rend());  // inserted from the back, so earlier positions stay put
    for (std::size_t i = 0; i < at.size(); ++i) {
      sentences.insert(sentences.begin() + at[i], needles[i].text);
      needle_of.insert(needle_of.begin() + at[i], &needles[i]);
    }
    for (std::size_t i = 0; i < sentences.size(); ++i) {
      if (i > 0) context += "\n";
      if (needle_of[i]) placed.emplace_back(context.size(), needle_of[i]);
      context += sentences[i];
    }
  }
  std::vector<int> asked = rng.sample(num_k, cfg.num_q);
  std::vector<std::string> queries;
  Draft d;
  for (int i : asked) {
    queries.push_back(keys[i]);
    for (const auto& v : values[i]) d.outputs.push_back(v);
  }
  // The queried keys' needles: each one's key and value.
  std::vector<EvidenceText> evidence;
  for (const auto& [start, needle] : placed) {
    if (std::find(asked.begin(), asked.end(), needle->key_index) == asked.end()) continue;
    evidence.push_back({start + needle->key_at, start + needle->key_at + needle->key_size, "needle key"});
    evidence.push_back({start + needle->value_at, start + needle->value_at + needle->value_size, "needle value"});
  }
  const std::string query = queries.size() > 1
                                ? join({queries.begin(), queries.end() - 1}, ", ") + ", and " + queries.back()
                                : queries[0];
  std::string templ = kNiahTemplate, prefix = kNiahAnswerPrefix;
  std::string type_v = kind_name(cfg.value);
  if (cfg.num_q * cfg.num_v == 1) {  // niah.py's singular wording
    for (std::string* s : {&templ, &prefix}) {
      *s = replace_all(*s, "Some", "A");
      *s = replace_all(*s, "are all", "is");
      *s = replace_all(*s, "are", "is");
      *s = replace_all(*s, "answers", "answer");
    }
    type_v.pop_back();
  }
  const std::map<std::string, std::string> fields = {{"type_needle_v", type_v}, {"context", context}, {"query", query}};
  d.input = fill(templ, fields);
  d.question = fill(templ.substr(templ.find("{context}") + 9), fields);
  d.answer_prefix = fill(prefix, fields);
  add_evidence_at(d.evidence, evidence, context_offset(templ, fields));
  return d;
}

// One chain of `hops` assignments hidden among `units` noise sentences, the template and answer prefix filled.
Draft variable_chain(int units, int name_letters, Choices& rng) {
  const int hops = 4;
  std::set<std::string> seen;
  std::vector<std::string> vars;
  while (static_cast<int>(vars.size()) < hops + 1) {
    std::string name;
    for (int i = 0; i < name_letters; ++i) name += static_cast<char>('A' + rng.below(26));
    if (seen.insert(name).second) vars.push_back(name);
  }
  const std::string value = std::to_string(rng.between(10000, 99999));
  std::vector<std::string> chain = {"VAR " + vars[0] + " = " + value};
  for (int j = 0; j < hops; ++j) chain.push_back("VAR " + vars[j + 1] + " = VAR " + vars[j] + " ");
  std::vector<std::string> sentences(units, kNoise);
  std::vector<bool> in_chain(units, false);
  std::vector<int> at = rng.sample(units, static_cast<int>(chain.size()));
  std::sort(at.begin(), at.end());
  for (std::size_t j = 0; j < chain.size(); ++j) {
    sentences.insert(sentences.begin() + at[j] + j, chain[j]);
    in_chain.insert(in_chain.begin() + at[j] + j, true);
  }
  // The sentences joined by line breaks, a sentence ending ". " losing its space before one (RULER's
  // replace(". \n", ".\n")); each statement of the chain is evidence, without its trailing space.
  std::string context;
  std::vector<EvidenceText> evidence;
  for (std::size_t i = 0; i < sentences.size(); ++i) {
    std::string_view sentence = sentences[i];
    if (i + 1 < sentences.size() && sentence.ends_with(". ")) sentence.remove_suffix(1);
    if (i > 0) context += "\n";
    if (in_chain[i]) {
      const std::size_t length = sentence.find_last_not_of(' ') + 1;
      evidence.push_back({context.size(), context.size() + length, "chain"});
    }
    context += sentence;
  }
  const std::map<std::string, std::string> fields = {
      {"context", context}, {"query", value}, {"num_v", std::to_string(hops + 1)}};
  Draft d;
  const std::string templ = kVtTemplate;
  d.input = fill(templ, fields);
  d.question = fill(templ.substr(templ.find("{context}") + 9), fields);
  d.answer_prefix = fill(kVtAnswerPrefix, fields);
  d.outputs = vars;
  add_evidence_at(d.evidence, evidence, context_offset(templ, fields));
  return d;
}

// variable_tracking.py puts one solved example (3-letter names, its own noise, about 500 tokens) before the
// task: the example's text, answer prefix and answer, then a blank line.
Draft variable_tracking(int units, int example_units, Choices& rng) {
  if (example_units == 0) return variable_chain(units, 5, rng);  // a context too short for the example
  const Draft example = variable_chain(example_units, 3, rng);
  Draft d = variable_chain(units, 5, rng);
  const std::string shot = example.input + example.answer_prefix + " " + join(example.outputs, " ") + "\n\n";
  d.input = shot + d.input;
  for (EvidenceText& e : d.evidence) e.begin += shot.size(), e.end += shot.size();
  return d;
}

// A numbered list with the first 10 of `words` repeated `common` times and the rest `rare` times, shuffled;
// `common_at` (when given) gets each occurrence of the first 10 words as "word" evidence.
std::string numbered_list(const std::vector<std::string>& words, int common, int rare, Choices& rng,
                          std::vector<EvidenceText>* common_at = nullptr) {
  std::vector<std::size_t> list;  // indices into words (the shuffle's draws depend on the length only)
  for (std::size_t i = 0; i < words.size(); ++i)
    for (int r = 0; r < (i < 10 ? common : rare); ++r) list.push_back(i);
  rng.shuffle(list);
  std::string out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    out += (i ? " " : "") + std::to_string(i + 1) + ". ";
    if (common_at && list[i] < 10) common_at->push_back({out.size(), out.size() + words[list[i]].size(), "word"});
    out += words[list[i]];
  }
  return out;
}

Draft common_words(int units, bool short_context, Choices& rng, const Context& c) {
  // common_words_extraction.py: one worked example first; below 4096 tokens fewer repeats.
  const int example_words = short_context ? 20 : 40, example_common = short_context ? 3 : 10,
            example_rare = short_context ? 1 : 3, common = short_context ? 6 : 30, rare = short_context ? 1 : 3;
  const std::string templ = kCweTemplate;
  // RULER draws real words, and other words once a long list needs more than it has: here the essay's words,
  // then made-up ones.
  const std::vector<std::string> pool = units <= static_cast<int>(c.vocab.size()) ? c.vocab : vocabulary(c.essay, units);
  auto draw = [&](int n) {
    std::vector<std::string> words;
    for (int i : rng.sample(static_cast<int>(pool.size()), n)) words.push_back(pool[i]);
    return words;
  };
  const auto example = draw(example_words);
  std::vector<std::string> example_answer;
  for (int i = 0; i < 10; ++i) example_answer.push_back(std::to_string(i + 1) + ". " + example[i]);
  // The worked example carries the answer prefix before its answer, as RULER's template does.
  const std::string shot =
      fill(templ, {{"context", numbered_list(example, example_common, example_rare, rng)}, {"query", ""}}) +
      kCweAnswerPrefix + " " + join(example_answer, " ");
  const auto words = draw(std::max(units, 10));
  std::vector<EvidenceText> evidence;
  const std::string context = numbered_list(words, common, rare, rng, &evidence);
  Draft d;
  d.input = shot + "\n" + fill(templ, {{"context", context}, {"query", ""}});
  add_evidence_at(d.evidence, evidence, shot.size() + 1 + context_offset(templ, {{"query", ""}}));
  d.question = templ.substr(templ.find("{context}") + 9);
  d.answer_prefix = kCweAnswerPrefix;
  d.outputs.assign(words.begin(), words.begin() + 10);
  return d;
}

// freq_words_extraction.py: coded words drawn with Zipf frequencies (alpha 2); the most frequent one is "...".
Draft frequent_words(int units, int vocab_size, Choices& rng) {
  std::set<std::string> seen;
  std::vector<std::string> vocab;
  while (static_cast<int>(vocab.size()) < vocab_size) {
    std::string w;
    for (int i = 0; i < 6; ++i) w += static_cast<char>('a' + rng.below(26));
    if (seen.insert(w).second) vocab.push_back(w);
  }
  std::sort(vocab.begin(), vocab.end());
  rng.shuffle(vocab);
  vocab[0] = "...";
  const double zeta2 = std::numbers::pi * std::numbers::pi / 6.0;
  std::vector<int> text;  // vocabulary indices (the shuffle's draws depend on the length only)
  for (int k = 1; k <= vocab_size; ++k) {
    const int n = static_cast<int>(units * std::pow(k, -2.0) / zeta2);
    for (int i = 0; i < n; ++i) text.push_back(k - 1);
  }
  rng.shuffle(text);
  // The words joined by spaces; each occurrence of an expected word (vocab[1..3]) is evidence.
  std::string context;
  std::vector<EvidenceText> evidence;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (i > 0) context += " ";
    const std::string& word = vocab[text[i]];
    if (text[i] >= 1 && text[i] <= 3) evidence.push_back({context.size(), context.size() + word.size(), "word"});
    context += word;
  }
  const std::string templ = kFweTemplate;
  Draft d;
  d.input = fill(templ, {{"context", context}, {"query", ""}});
  add_evidence_at(d.evidence, evidence, context_offset(templ, {{"query", ""}}));
  d.question = templ.substr(templ.find("{context}") + 9);
  d.answer_prefix = kFweAnswerPrefix;
  d.outputs = {vocab[1], vocab[2], vocab[3]};
  return d;
}

}  // namespace

const std::vector<std::string>& ruler_task_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& t : tasks()) out.push_back(t.name);
    return out;
  }();
  return names;
}

std::vector<RulerSample> generate_ruler(const RulerSettings& settings, const TokenCounter& count_tokens,
                                        const std::function<void(std::size_t, std::size_t)>& progress) {
  std::vector<const TaskEntry*> chosen;
  for (const auto& name : settings.tasks.empty() ? ruler_task_names() : settings.tasks) {
    auto it = std::find_if(tasks().begin(), tasks().end(), [&](const TaskEntry& t) { return t.name == name; });
    if (it == tasks().end())
      throw UsageError("unknown RULER task '" + name + "' (expected one of: " + join(ruler_task_names(), ", ") + ")");
    chosen.push_back(&*it);
  }
  if (settings.samples < 1) throw UsageError("RULER needs at least 1 sample per task");
  if (settings.samples > kMaxRulerSamples)
    throw UsageError("RULER --samples " + std::to_string(settings.samples) + " is more than the bound of " +
                     std::to_string(kMaxRulerSamples) + " samples per task (they are generated and held in memory "
                     "before the first runs; RULER's own runs use 500)");
  const long long prompt_tokens = static_cast<long long>(settings.samples) * static_cast<long long>(chosen.size()) *
                                  static_cast<long long>(settings.length);
  if (prompt_tokens > kMaxRulerPromptTokens)
    throw UsageError("RULER --samples " + std::to_string(settings.samples) + " x " + std::to_string(chosen.size()) +
                     " tasks x --length " + std::to_string(settings.length) + " = " + std::to_string(prompt_tokens) +
                     " prompt tokens, more than the bound of " + std::to_string(kMaxRulerPromptTokens) +
                     " (they are generated and held in memory up front): give fewer --samples or --tasks");
  const std::size_t total = static_cast<std::size_t>(settings.samples) * chosen.size();
  Context c{split_words(settings.essay), vocabulary(settings.essay, 0), settings.essay};
  if (c.essay_words.size() < 50 || c.vocab.size() < 50)
    throw UsageError("the essay haystack has fewer than 50 distinct words");
  std::vector<RulerSample> out;
  for (const TaskEntry* entry : chosen) {
    const TaskEntry& t = *entry;
    const auto table_index = static_cast<uint64_t>(entry - tasks().data());  // a task's draws never depend on the others chosen
    const int budget = settings.length - t.max_new_tokens;
    const int fwe_vocab = std::max(10, budget / 50);
    // Every draw needs at least this many haystack units (a sentence per needle or assignment).
    const int min_units = t.family == "niah" ? t.niah.num_k * t.niah.num_v + 1 : t.family == "vt" ? 6 : t.family == "cwe" ? 10 : 1;
    // The VT example's noise: the most that keeps the example within 500 tokens, as RULER sizes it (within
    // a third of the budget on shorter contexts, and none where even that is too long: below about 900
    // tokens, where RULER has no answer).
    int example_units = 0;
    if (t.family == "vt") {
      const int example_budget = std::min(500, budget / 3);
      for (int lo = min_units, hi = 200; lo <= hi;) {
        const int mid = lo + (hi - lo) / 2;
        Choices probe(mix(settings.seed ^ mix(table_index + 1)));
        const Draft e = variable_chain(mid, 3, probe);
        if (count_tokens(e.input + e.answer_prefix) <= example_budget) example_units = mid, lo = mid + 1;
        else hi = mid - 1;
      }
    }
    auto draft = [&](int units, uint64_t stream) {
      Choices rng(mix(settings.seed ^ mix(table_index + 1) ^ mix(stream * 0x1000193ULL)));
      if (t.family == "niah") return niah(t, units, rng, c);
      if (t.family == "vt") return variable_tracking(units, example_units, rng);
      if (t.family == "cwe") return common_words(units, settings.length < 4096, rng, c);
      return frequent_words(units, fwe_vocab, rng);
    };
    auto tokens = [&](const Draft& d) { return count_tokens(d.input + d.answer_prefix); };
    // The most haystack units whose prompt fits, by bisection on a draft (RULER fits once per task, then steps
    // down per sample where a sample's own draws come out longer).
    const bool essay = t.family == "niah" && t.niah.haystack == Haystack::Essay;
    const int step = t.family == "fwe" ? std::max(1, budget / 32) : essay ? 50 : 5;
    int lo = min_units, hi = std::max(64, budget * 4), best = 0;
    while (lo <= hi) {
      const int mid = lo + (hi - lo) / 2;
      if (tokens(draft(mid, 0)) <= budget) best = mid, lo = mid + 1;
      else hi = mid - 1;
    }
    if (best < 1)
      throw UsageError("RULER task " + t.name + ": a context of " + std::to_string(settings.length) +
                       " tokens leaves no room for its haystack and " + std::to_string(t.max_new_tokens) + " new tokens");
    for (int s = 0; s < settings.samples; ++s) {
      int units = best;
      Draft d = draft(units, static_cast<uint64_t>(s) + 1);
      int n = tokens(d);
      while (n > budget && units - step >= min_units) {
        units -= step;
        d = draft(units, static_cast<uint64_t>(s) + 1);
        n = tokens(d);
      }
      RulerSample sample;
      sample.task = t.name;
      sample.index = s;
      sample.input = std::move(d.input);
      sample.question = std::move(d.question);
      sample.answer_prefix = std::move(d.answer_prefix);
      sample.outputs = std::move(d.outputs);
      sample.evidence = std::move(d.evidence);
      sample.max_new_tokens = t.max_new_tokens;
      sample.tokens = n;
      out.push_back(std::move(sample));
      if (progress) progress(out.size(), total);
    }
  }
  return out;
}

std::string ruler_essay(const std::string& path) {
  if (!path.empty()) {
    const auto text = read_file_text(path);
    if (!text) throw UsageError("cannot read --haystack '" + path + "'");
    return *text;
  }
  const std::filesystem::path dir = std::filesystem::path(KVSCOPE_SOURCE_DIR) / "sample_data" / "texts";
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.path().extension() == ".txt") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& f : files)
    if (const auto t = read_file_text(f)) text += *t + "\n";
  if (text.empty()) throw Error(dir.string() + ": no .txt files for the essay haystack; pass --haystack FILE");
  return text;
}

double ruler_score(const std::string& prediction, const std::vector<std::string>& outputs) {
  if (outputs.empty()) return 0.0;
  // evaluate.py's postprocess_pred: control characters become newlines, then strip
  std::string pred;
  for (unsigned char ch : prediction) pred += ch < 0x20 ? '\n' : static_cast<char>(std::tolower(ch));
  double found = 0.0;
  for (const auto& r : outputs) {
    std::string lower;
    for (unsigned char ch : r) lower += static_cast<char>(std::tolower(ch));
    found += pred.find(lower) != std::string::npos ? 1.0 : 0.0;
  }
  return found / static_cast<double>(outputs.size());
}

}  // namespace kvscope::eval
