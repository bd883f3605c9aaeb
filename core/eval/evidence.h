#pragma once
// Evidence (issue 35): the prompt tokens that hold what a benchmark sample's answer needs (RULER's needle values
// and keys, VT's chain, CWE/FWE's word occurrences, the needle test's sentence, a LongBench answer found in its
// context). A generator marks them in the sample's text (EvidenceText); preparing the prompt turns them into
// token positions of the prompt the model runs (EvidenceSpan), so a run's kept masks can be read against them.
#include <cstddef>
#include <string>
#include <vector>

namespace kvscope::eval {

// A stretch of a sample's user text (byte offsets into PromptParts::text, end exclusive) and what it holds
// ("needle value", "needle key", "chain", "word", "answer", ...).
struct EvidenceText {
  std::size_t begin = 0, end = 0;
  std::string kind;
};

// The same stretch as original token positions of the run (the prompt first, then any appended tokens),
// first and last inclusive: every token that holds at least one byte of the stretch.
struct EvidenceSpan {
  int first = 0, last = 0;
  std::string kind;
};

}  // namespace kvscope::eval
