#pragma once
// Needle in a haystack (the NIAH protocol of the papers' retrieval plots): a "magic number" sentence
// hidden at a chosen depth of filler text, then a question whose exact answer is that number.
// Everything follows from a seed, so a case can be rebuilt anywhere (another worker, another machine).
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/eval/evidence.h"
#include "core/model/tokenizer.h"

namespace kvscope::eval {

// The template and filler the generator draws from (sample_data/needle/: needle.json, and filler text
// split into sentences).
struct NeedleSource {
  std::string needle;    // contains {key} and {value}
  std::string question;  // contains {key}; the prompt ends with it
  std::vector<std::string> keys;
  std::vector<std::string> sentences;
};
// Reads <dir>/needle.json and the sentences of every <dir>/../texts/*.txt; throws Error naming the file.
NeedleSource load_needle_source(const std::filesystem::path& dir);
std::filesystem::path default_needle_dir();  // $KVSCOPE_SOURCE_DIR/sample_data/needle

struct NeedleCase {
  std::string prompt;  // filler with the needle inside, then the question
  std::string key, value;
  int context_tokens = 0;     // tokens the prompt encodes to (no BOS)
  double depth = 0.0;         // requested: 0 = first sentence, 1 = just before the question
  double actual_depth = 0.0;  // the needle's first character offset / the filler's length
  std::vector<EvidenceText> evidence;  // the needle sentence ("needle"), bytes of `prompt` (issue 35)
};

// A prompt of at most `context_tokens` tokens (and at least 90 % of it when the filler suffices), the needle
// at `depth` in [0, 1]. Throws UsageError for a depth outside [0, 1] or a context too short for needle and question.
NeedleCase make_needle_case(const NeedleSource& source, const model::Tokenizer& tokenizer, int context_tokens,
                            double depth, uint64_t seed);

// Exact match: the first run of digits in the answer equals the value ("is 4821." matches 4821; "48210",
// "4 821" and an answer without digits do not).
bool needle_answer_matches(const std::string& answer, const std::string& value);

}  // namespace kvscope::eval
