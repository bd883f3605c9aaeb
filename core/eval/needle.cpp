#include "core/eval/needle.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <random>

#include "core/common/error.h"
#include "core/common/file_text.h"

namespace kvscope::eval {

namespace {

std::string read_text(const std::filesystem::path& path) {
  auto text = read_file_text(path);
  if (!text) throw Error("cannot read '" + path.string() + "'");
  return std::move(*text);
}

// Sentences end at '.', '!' or '?' followed by whitespace; runs of whitespace become one space.
std::vector<std::string> split_sentences(const std::string& text) {
  std::vector<std::string> out;
  std::string current;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (!current.empty() && current.back() != ' ') current += ' ';
    } else {
      current += c;
    }
    const bool end = (c == '.' || c == '!' || c == '?') &&
                     (i + 1 == text.size() || std::isspace(static_cast<unsigned char>(text[i + 1])));
    if (end) {
      while (!current.empty() && current.front() == ' ') current.erase(current.begin());
      if (current.size() > 1 && current.front() != '#') out.push_back(current);
      current.clear();
    }
  }
  return out;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

// Uniform in [0, n) from the engine's raw output, so the same seed gives the same case with every
// standard library (std::uniform_int_distribution's algorithm is implementation-defined).
std::size_t draw(std::mt19937_64& rng, std::size_t n) { return static_cast<std::size_t>(rng() % n); }

int count_tokens(const model::Tokenizer& tokenizer, const std::string& text) {
  return static_cast<int>(tokenizer.encode(text, false).size());
}

}  // namespace

std::filesystem::path default_needle_dir() {
  const char* env = std::getenv("KVSCOPE_SOURCE_DIR");
  return std::filesystem::path(env && *env ? env : KVSCOPE_SOURCE_DIR) / "sample_data" / "needle";
}

NeedleSource load_needle_source(const std::filesystem::path& dir) {
  const auto json_path = dir / "needle.json";
  NeedleSource source;
  try {
    const auto j = nlohmann::json::parse(read_text(json_path));
    source.needle = j.at("needle").get<std::string>();
    source.question = j.at("question").get<std::string>();
    source.keys = j.at("keys").get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    throw Error("'" + json_path.string() + "': expected an object with strings needle, question and a list keys (" +
                e.what() + ")");
  }
  if (source.needle.find("{value}") == std::string::npos || source.needle.find("{key}") == std::string::npos ||
      source.question.find("{key}") == std::string::npos || source.keys.empty())
    throw Error("'" + json_path.string() +
                "': needle needs {key} and {value}, question needs {key}, keys must not be empty");
  std::vector<std::filesystem::path> texts;
  const auto text_dir = dir.parent_path() / "texts";
  if (std::filesystem::is_directory(text_dir))
    for (const auto& entry : std::filesystem::directory_iterator(text_dir))
      if (entry.path().extension() == ".txt") texts.push_back(entry.path());
  std::sort(texts.begin(), texts.end());
  for (const auto& path : texts) {
    auto sentences = split_sentences(read_text(path));
    source.sentences.insert(source.sentences.end(), sentences.begin(), sentences.end());
  }
  if (source.sentences.empty()) throw Error("no filler sentences in '" + text_dir.string() + "/*.txt'");
  return source;
}

NeedleCase make_needle_case(const NeedleSource& source, const model::Tokenizer& tokenizer, int context_tokens,
                            double depth, uint64_t seed) {
  if (!(depth >= 0.0 && depth <= 1.0)) throw UsageError("needle depth " + std::to_string(depth) + " is outside [0, 1]");
  std::mt19937_64 rng(seed);
  NeedleCase c;
  c.depth = depth;
  c.key = source.keys[draw(rng, source.keys.size())];
  c.value = std::to_string(1000000 + draw(rng, 9000000));  // seven digits, no leading zero
  const std::string needle = replace_all(replace_all(source.needle, "{key}", c.key), "{value}", c.value);
  const std::string question = "\n\n" + replace_all(source.question, "{key}", c.key);
  const int fixed = count_tokens(tokenizer, needle) + count_tokens(tokenizer, question) + 2;
  if (fixed >= context_tokens)
    throw UsageError("a needle context of " + std::to_string(context_tokens) +
                     " tokens cannot hold the needle and question (" + std::to_string(fixed) + " tokens)");

  // Filler: sentences in a seeded order (Fisher-Yates on our own draws), cycling when the source runs out.
  std::vector<std::size_t> order(source.sentences.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[draw(rng, i)]);
  std::vector<std::string> filler;
  int filler_tokens = 0;
  for (std::size_t i = 0; filler_tokens + fixed < context_tokens; ++i) {
    const std::string& s = source.sentences[order[i % order.size()]];
    filler.push_back(s);
    filler_tokens += count_tokens(tokenizer, " " + s);
  }
  // Sentence-wise counts only approximate the whole; drop sentences until the whole prompt fits.
  while (true) {
    const std::size_t at = static_cast<std::size_t>(depth * filler.size() + 0.5);
    std::string text;
    std::size_t needle_offset = 0;
    for (std::size_t i = 0; i <= filler.size(); ++i) {
      if (i == at) {
        needle_offset = text.size() + (text.empty() ? 0 : 1);
        text += (text.empty() ? "" : " ") + needle;
      }
      if (i < filler.size()) text += (text.empty() ? "" : " ") + filler[i];
    }
    c.actual_depth = text.empty() ? 0.0 : static_cast<double>(needle_offset) / text.size();
    c.evidence = {{needle_offset, needle_offset + needle.size(), "needle"}};
    c.prompt = text + question;
    c.context_tokens = count_tokens(tokenizer, c.prompt);
    if (c.context_tokens <= context_tokens || filler.empty()) break;
    filler.pop_back();
  }
  return c;
}

bool needle_answer_matches(const std::string& answer, const std::string& value) {
  const auto begin =
      std::find_if(answer.begin(), answer.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); });
  const auto end =
      std::find_if(begin, answer.end(), [](char ch) { return !std::isdigit(static_cast<unsigned char>(ch)); });
  return begin != answer.end() && std::string(begin, end) == value;
}

}  // namespace kvscope::eval
