#pragma once
// The prompts an evaluation runs on: --prompt TEXT, --prompt-file FILE, or every file of --prompts DIR
// (sorted by name); for needle runs, cases generated from lengths x depths and a seed.
#include <string>
#include <vector>

#include "app/run_options.h"
#include "core/eval/cell_runner.h"
#include "core/eval/ruler.h"

namespace kvscope::app {

// Throws UsageError when none or more than one source is given, or when the folder cannot be read or holds
// no readable files (naming the folder or file), and for bad chat flags (PromptOptions::chat_spec). With --chat
// or --messages the model's chat template is applied when `model` is given.
std::vector<eval::EvalPrompt> load_prompts(const PromptOptions& options, const std::string& prompts_dir,
                                           const model::Model* model);

struct NeedleGrid {
  std::vector<int> lengths = {512, 1024, 2048};
  std::vector<double> depths = {0.0, 0.25, 0.5, 0.75, 1.0};  // parsed from percentages
  uint64_t seed = 1;
  int answer_tokens = 12;  // room left in the context for the answer
};
// "0,25,50,75,100" (percent) to [0, 1]; UsageError for values outside 0..100.
std::vector<double> parse_depths(const std::vector<std::string>& percents);
// One prompt per (length, depth), lengths outer; the case's seed mixes the grid seed with both, so adding
// a length leaves the other cases unchanged.
std::vector<eval::EvalPrompt> needle_prompts(const model::Model& model, const NeedleGrid& grid);

// RULER samples for the model, lengths counted in its tokens (core/eval/ruler.h); chat: the prompts go through
// its chat template, whose tokens count toward the length. UsageError for a length beyond its context.
std::vector<eval::RulerSample> ruler_samples(const model::Model& model, const eval::RulerSettings& settings, bool chat);
// The same as prompts named "<task>#<index>".
std::vector<eval::EvalPrompt> ruler_prompts(const model::Model& model, const eval::RulerSettings& settings, bool chat);

}  // namespace kvscope::app
