#pragma once
// RULER's synthetic tasks (Hsieh et al., "RULER: What's the Real Context Size of Your Long-Context Language
// Models?", 2024; NVIDIA/RULER scripts/synthetic.yaml), generated here deterministically from a seed at a
// context length counted in the model's own tokens, and scored as RULER scores them.
//
//   niah_single_1..3      one needle (a word key, a 7-digit number or UUID value) in a noise or essay haystack
//   niah_multikey_1..3    four keys in an essay, or a haystack made of needles of other keys (words, UUIDs)
//   niah_multivalue       four values for one key
//   niah_multiquery       four keys asked at once
//   vt                    variable tracking: a chain of 4 assignments VAR B = VAR A ... in noise
//   cwe                   common words extraction: the 10 words repeated most in a numbered list
//   fwe                   frequent words extraction: the 3 most frequent coded words of a Zipf-sampled text
//
// RULER's QA tasks need SQuAD/HotpotQA and are not generated. Haystack "essay" text is the project's own
// (sample_data/texts) or a file the user passes; keys are word pairs drawn from that text's vocabulary. Each
// task's template and answer prefix are RULER's; the length is fitted as RULER fits it (a binary search on the
// haystack size so that the prompt plus the task's new tokens fits the target).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/eval/evidence.h"

namespace kvscope::eval {

struct RulerSample {
  std::string task;
  int index = 0;
  std::string input;          // the task template filled (context and question), without the answer prefix
  std::string question;       // the tail of `input` after the context (appended after compression, query-agnostic)
  std::string answer_prefix;  // written after the model's turn starts, as RULER does
  std::vector<std::string> outputs;  // every expected answer
  // Stretches of `input` the answer needs (issue 35), recorded where the generator put them in: niah_* the
  // queried keys' needles ("needle key", "needle value"), vt the queried chain's statements ("chain"), cwe and
  // fwe every occurrence of an expected word in the context ("word").
  std::vector<EvidenceText> evidence;
  int max_new_tokens = 0;
  int tokens = 0;  // input + answer prefix in the model's tokens, without a chat template
};

struct RulerSettings {
  int length = 4096;  // target tokens: input + answer prefix + the task's new tokens
  int samples = 50;
  uint64_t seed = 42;
  std::vector<std::string> tasks;  // empty: all
  std::string essay;               // the essay haystack's text (whitespace runs become one space)
};

// Tokens of a text under the model's tokenizer (no special tokens added).
using TokenCounter = std::function<int(const std::string&)>;

const std::vector<std::string>& ruler_task_names();
// Throws UsageError for an unknown task or a length too short for the task's fixed text; the same settings
// and counter give the same samples on every machine (kvscope's own generator, not the standard library's
// distributions).
// Samples are generated up front and held in memory, so their number is bounded: at most kMaxRulerSamples per
// task (RULER's own runs use 500) and at most kMaxRulerPromptTokens tokens of prompts in all (samples x tasks x
// length); more is a UsageError naming the bound. `progress` (optional) is called after each sample with the
// number done and the total.
inline constexpr int kMaxRulerSamples = 1000;
inline constexpr long long kMaxRulerPromptTokens = 1LL << 28;
std::vector<RulerSample> generate_ruler(const RulerSettings& settings, const TokenCounter& count_tokens,
                                        const std::function<void(std::size_t, std::size_t)>& progress = {});

// The essay haystack: the text of `path`, or with an empty path the project's own prose (sample_data/texts,
// sorted by name). Throws UsageError for an unreadable file, Error when the folder holds no text.
std::string ruler_essay(const std::string& path);

// RULER's evaluation: the prediction with control characters turned to newlines and stripped, then the share of
// expected answers found in it, case-insensitively (string_match_all, 0-1 scale).
double ruler_score(const std::string& prediction, const std::vector<std::string>& outputs);

}  // namespace kvscope::eval
