#include "core/trace/eval_run_info.h"

#include <cmath>

#include "core/common/error.h"
#include "core/common/json_text.h"

namespace kvscope::trace {

namespace {

std::string where(const RunTrace& run, const std::string& attribute) {
  return "run '" + run.name + "': attribute '" + attribute + "'";
}

std::optional<long long> int_attr(const RunTrace& run, const std::string& attribute) {
  const auto it = run.metadata.find(attribute);
  if (it == run.metadata.end()) return std::nullopt;
  try {
    std::size_t used = 0;
    const long long v = std::stoll(it->second, &used);
    if (used == it->second.size()) return v;
  } catch (const std::exception&) {
  }
  throw Error(where(run, attribute) + " is '" + it->second + "', expected an integer");
}

std::optional<double> double_attr(const RunTrace& run, const std::string& attribute) {
  const auto it = run.metadata.find(attribute);
  if (it == run.metadata.end()) return std::nullopt;
  if (it->second == "nan" || it->second == "NaN") return std::nan("");
  try {
    std::size_t used = 0;
    const double v = std::stod(it->second, &used);
    if (used == it->second.size()) return v;
  } catch (const std::exception&) {
  }
  throw Error(where(run, attribute) + " is '" + it->second + "', expected a number");
}

}  // namespace

EvalRunInfo eval_run_info(const RunTrace& run) {
  EvalRunInfo info;
  info.from_evaluation = run.metadata.count("eval_first_answer_step") > 0;
  info.task = run.meta("eval_task");
  info.role = run.meta("eval_role");
  info.prediction = run.meta("eval_prediction");
  info.reference_run = run.meta("eval_reference_run");
  info.sample = int_attr(run, "eval_sample");
  info.score = double_attr(run, "eval_score");
  if (const auto it = run.metadata.find("eval_references"); it != run.metadata.end()) {
    const nlohmann::json refs = parse_json_text(it->second, where(run, "eval_references"));
    if (!refs.is_array()) throw Error(where(run, "eval_references") + " is not a JSON array");
    for (const auto& r : refs) {
      if (!r.is_string())
        throw Error(where(run, "eval_references") + " holds a " + r.type_name() + ", expected strings");
      info.references.push_back(r.get<std::string>());
    }
  }
  info.prompt_tokens = static_cast<int>(int_attr(run, "eval_prompt_tokens").value_or(run.prompt_length));
  info.appended_tokens = static_cast<int>(int_attr(run, "eval_appended_tokens").value_or(0));
  // Without the evaluation's word: the answer's first token is sampled at the end of the last prefill block.
  info.first_answer_step =
      static_cast<int>(int_attr(run, "eval_first_answer_step").value_or(run.first_decode_step() - 1));
  if (info.prompt_tokens != run.prompt_length)
    throw Error(where(run, "eval_prompt_tokens") + " is " + std::to_string(info.prompt_tokens) +
                " but the run's prompt_length is " + std::to_string(run.prompt_length));
  if (info.appended_tokens < 0 || info.appended_tokens > run.n_generated())
    throw Error(where(run, "eval_appended_tokens") + " is " + std::to_string(info.appended_tokens) + ", outside 0.." +
                std::to_string(run.n_generated()) + " (the run's generated tokens, appended question included)");
  if (info.first_answer_step < 0 || info.first_answer_step >= run.n_steps())
    throw Error(where(run, "eval_first_answer_step") + " is " + std::to_string(info.first_answer_step) +
                ", outside the run's " + std::to_string(run.n_steps()) + " recorded steps");
  return info;
}

std::vector<int> answer_ids(const RunTrace& run, const EvalRunInfo& info) {
  return {run.generated_ids.begin() + info.appended_tokens, run.generated_ids.end()};
}

std::string answer_text(const RunTrace& run, const EvalRunInfo& info) {
  std::string text;
  for (std::size_t i = static_cast<std::size_t>(info.appended_tokens); i < run.generated_strings.size(); ++i)
    text += run.generated_strings[i];
  return text;
}

namespace {
bool is_full_cache(const RunTrace& run) {
  return run.name == "full" || run.meta("policy") == "full" || run.meta("eval_role") == "full";
}

std::string run_names(const TraceView& view) {
  std::string names;
  for (const auto& r : view.runs) names += (names.empty() ? "" : ", ") + r->name;
  return names;
}
}  // namespace

const RunTrace& reference_run(const TraceView& view, const RunTrace& policy) {
  const std::string named = policy.meta("eval_reference_run");
  if (!named.empty()) {
    if (const RunTrace* r = view.find(named)) return *r;
    throw Error(
        "run '" + policy.name + "' names '" + named +
        "' as its full-cache run (eval_reference_run), but the trace has no such run (runs: " + run_names(view) + ")");
  }
  if (is_full_cache(policy)) return policy;
  if (const RunTrace* r = view.find("full")) return *r;
  for (const auto& r : view.runs)
    if (is_full_cache(*r)) return *r;
  throw Error("the trace has no full-cache run to measure run '" + policy.name + "' against (runs: " + run_names(view) +
              "): record one beside it (kvscope trace --policy full --policy ..., or eval --traces)");
}

const RunTrace& default_policy_run(const TraceView& view) {
  if (view.runs.empty()) throw Error("the trace has no runs");
  for (const auto& r : view.runs)
    if (r->meta("eval_role") == "policy") return *r;
  for (const auto& r : view.runs)
    if (!is_full_cache(*r)) return *r;
  return *view.runs.front();
}

}  // namespace kvscope::trace
