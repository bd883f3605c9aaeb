#pragma once
// Runs the cells of a sweep grid one at a time in this process. The full-cache reference of a prompt is
// computed when its first cell runs and kept while cells of the same prompt follow (grids run prompt by
// prompt), so each prompt's reference is computed once per process.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/eval/eval_run.h"
#include "core/eval/evidence.h"
#include "core/eval/sweep_store.h"

namespace kvscope::eval {

struct EvalPrompt {
  std::string name, text;
  std::string value;  // needle cases: the answer
  bool chat = false;  // text is the output of the model's chat template (see Evaluator::encode)
  bool parse_special = true;  // special-token text in a plain prompt is those tokens (--no-parse-special: false)
  // Answered prompts (RULER): the question that ends `text`, the answer prefix, the expected answers, the
  // answer's length.
  std::string question{}, answer_prefix{};
  std::vector<std::string> outputs{};
  int max_new_tokens = 0;
  std::vector<EvidenceText> evidence{};  // stretches of `text` the answer needs (RULER, needle cases; issue 35)
  std::string key{};                     // needle cases: what the question asks for
};

struct EvalSettings {
  int new_tokens = 32;      // fidelity: tokens of the full cache's continuation to score
  // fidelity: the continuation ends at the full cache's end-of-generation token (scored), as the window's runs
  // do; otherwise every new token is scored, past an end token, so every cell scores the same number of steps.
  bool stop_at_end = false;
  ReferenceEnd reference_end() const { return stop_at_end ? ReferenceEnd::AtEndOfGeneration : ReferenceEnd::AllNewTokens; }
  int prompt_tokens = 512;  // ppl: tokens of the text run as the prompt (compressed), the rest decoded
  int max_tokens = 0;       // ppl: cut the text to this many tokens (0 = whole text)
  int answer_tokens = 12;   // needle: greedy answer length
  std::string protocol = "query-aware";  // ruler: query-aware or query-agnostic (eval_protocol.h)
  bool chat = true;                      // ruler: wrap prompts in the model's chat template
  // The settings that matter for `eval_kind` (they go into grid.json, so changing one is another grid).
  nlohmann::json to_json(const std::string& eval_kind) const;
};

class CellRunner {
 public:
  CellRunner(Evaluator& evaluator, const SweepGrid& grid, const std::vector<EvalPrompt>& prompts,
             const EvalSettings& settings);
  SweepRow run(std::size_t cell);

 private:
  void prepare(std::size_t prompt);

  Evaluator& evaluator_;
  const SweepGrid& grid_;
  const std::vector<EvalPrompt>& prompts_;
  EvalSettings settings_;
  std::optional<std::size_t> prepared_;
  std::optional<FidelityReference> fidelity_;
  std::optional<PplReference> ppl_;
  std::optional<NeedleReference> needle_;
  struct AnswerReference {
    AnswerRequest request;
    double score = 0.0;
    std::size_t peak_bytes = 0;
  };
  std::optional<AnswerReference> answer_;
};

// Text to tokens for perplexity: BOS first when the model wants one, cut to max_tokens when > 0.
std::vector<int> ppl_tokens(const Evaluator& evaluator, const std::string& text, int max_tokens, bool chat = false,
                            bool parse_special = true);

}  // namespace kvscope::eval
