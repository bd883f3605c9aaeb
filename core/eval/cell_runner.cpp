#include "core/eval/cell_runner.h"

#include "core/common/error.h"
#include "core/eval/eval_protocol.h"
#include "core/eval/ruler.h"

namespace kvscope::eval {

nlohmann::json EvalSettings::to_json(const std::string& eval_kind) const {
  if (eval_kind == "fidelity") {
    // Written only when set, so the grids of sweeps made before the option stay the same grids (resumable).
    nlohmann::json settings = {{"new_tokens", new_tokens}};
    if (stop_at_end) settings["stop_at_end"] = true;
    return settings;
  }
  if (eval_kind == "ppl") return {{"prompt_tokens", prompt_tokens}, {"max_tokens", max_tokens}};
  if (eval_kind == "needle") return {{"answer_tokens", answer_tokens}};
  if (eval_kind == "ruler") return {{"protocol", protocol}, {"chat", chat}};
  metric_names(eval_kind);  // throws UsageError naming the kinds
  return {};
}

std::vector<int> ppl_tokens(const Evaluator& evaluator, const std::string& text, int max_tokens, bool chat,
                            bool parse_special) {
  std::vector<int> tokens = evaluator.encode(text, chat, parse_special);
  if (max_tokens > 0 && static_cast<int>(tokens.size()) > max_tokens) tokens.resize(max_tokens);
  return tokens;
}

CellRunner::CellRunner(Evaluator& evaluator, const SweepGrid& grid, const std::vector<EvalPrompt>& prompts,
                       const EvalSettings& settings)
    : evaluator_(evaluator), grid_(grid), prompts_(prompts), settings_(settings) {
  if (prompts.size() != grid.prompts.size())
    throw Error(std::to_string(prompts.size()) + " prompts for a grid of " + std::to_string(grid.prompts.size()));
}

void CellRunner::prepare(std::size_t prompt) {
  if (prepared_ == prompt) return;
  fidelity_.reset();
  ppl_.reset();
  needle_.reset();
  answer_.reset();
  const EvalPrompt& p = prompts_[prompt];
  if (grid_.eval_kind == "fidelity") {
    fidelity_ = evaluator_.fidelity_reference(
        evaluator_.encode(p.text, p.chat, p.parse_special), settings_.new_tokens, settings_.reference_end());
  } else if (grid_.eval_kind == "ppl") {
    ppl_ =
        evaluator_.ppl_reference(ppl_tokens(evaluator_, p.text, settings_.max_tokens, p.chat, p.parse_special), settings_.prompt_tokens);
  } else if (grid_.eval_kind == "ruler") {
    const auto& model = evaluator_.model();
    const PreparedPrompt prepared = prepare_prompt(model, {p.text, p.question, p.answer_prefix, p.evidence},
                                                   settings_.chat, parse_protocol(settings_.protocol), p.max_new_tokens,
                                                   model.config.context_length - p.max_new_tokens);
    AnswerReference ref;
    ref.request = {prepared.prompt, prepared.appended, p.max_new_tokens, prepared.evidence};
    const AnswerResult full = evaluator_.answer(ref.request, {"full", ""});
    ref.score = ruler_score(full.text, p.outputs);
    ref.peak_bytes = full.memory.peak_bytes;
    answer_ = std::move(ref);
  } else {
    needle_ = evaluator_.needle_reference(evaluator_.encode(p.text, p.chat), p.value, settings_.answer_tokens);
  }
  prepared_ = prompt;
}

SweepRow CellRunner::run(std::size_t index) {
  const SweepCell cell = grid_.cell(index);
  prepare(cell.prompt);
  SweepRow row;
  row.cell = index;
  row.prompt = grid_.prompts[cell.prompt];
  row.policy = cell.policy.policy;
  row.budget = cell.policy.budget;
  row.cache_type = cell.cache_type;
  if (fidelity_)
    row.metrics = evaluator_.fidelity(*fidelity_, cell.policy).metrics();
  else if (ppl_)
    row.metrics = evaluator_.ppl(*ppl_, cell.policy).metrics();
  else if (answer_) {
    const AnswerResult r = evaluator_.answer(answer_->request, cell.policy, answer_->peak_bytes);
    AnswerScore scored{ruler_score(r.text, prompts_[cell.prompt].outputs), answer_->score, r.memory, r.run_ms};
    if (r.retention) {
      scored.evidence = r.retention->retention;
      row.evidence_layer_kept = r.retention->retention.layer_kept;
    }
    row.metrics = scored.metrics();
  }
  else
    row.metrics = evaluator_.needle(*needle_, cell.policy, settings_.answer_tokens).metrics();
  return row;
}

}  // namespace kvscope::eval
