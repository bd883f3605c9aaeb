// kvscope eval ruler: RULER's synthetic tasks generated for the model's tokenizer at a context length, run under
// a policy and scored as RULER scores them, with bootstrap intervals per task and for the average.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "app/eval_subcommands.h"
#include "app/progress_line.h"
#include "app/run_options.h"
#include "core/common/error.h"
#include "core/common/file_text.h"
#include "core/eval/bootstrap.h"
#include "core/eval/eval_protocol.h"
#include "core/eval/eval_run.h"
#include "core/eval/ruler.h"
#include "core/policy/registry.h"

namespace kvscope::app {
namespace {

struct RulerArgs {
  ModelOptions model;
  std::string policy = "full", allocation, budget;
  std::string protocol = "query-aware";
  std::vector<std::string> tasks;
  std::string haystack, write_samples;
  eval::RulerSettings settings;
  bool no_chat = false, vs_full = false, json = false;
  eval::BootstrapSettings bootstrap;
};

nlohmann::json interval_json(const eval::Interval& ci) {
  return {{"score", 100.0 * ci.mean}, {"ci_low", 100.0 * ci.low}, {"ci_high", 100.0 * ci.high}, {"n", ci.n}};
}

int run_ruler(const RulerArgs& a) {
  const eval::Protocol protocol = eval::parse_protocol(a.protocol);
  const eval::CellPolicy cell{with_allocation(a.policy, a.allocation), a.budget};
  policy::make_policy(cell.policy);
  eval::RulerSettings settings = a.settings;
  settings.tasks = a.tasks;
  settings.essay = eval::ruler_essay(a.haystack);
  for (const auto& t : settings.tasks)  // an unknown task fails before the model loads
    if (std::find(eval::ruler_task_names().begin(), eval::ruler_task_names().end(), t) == eval::ruler_task_names().end())
      throw UsageError("unknown RULER task '" + t + "'; see `kvscope eval ruler --help`");
  const model::Model model = a.model.load();
  if (settings.length > model.config.context_length)
    throw UsageError("--length " + std::to_string(settings.length) + " exceeds the model's context of " +
                     std::to_string(model.config.context_length) + " tokens");
  std::fprintf(stderr, "generating RULER samples at %d tokens...\n", settings.length);
  eval::RulerSettings fitted = settings;
  fitted.length -= eval::wrapping_tokens(model, !a.no_chat);  // the chat template's tokens count too
  const auto samples = eval::generate_ruler(
      fitted, [&](const std::string& text) { return static_cast<int>(model.tokenizer->encode(text, true).size()); });
  eval::Evaluator evaluator(model);
  std::ofstream written;
  if (!a.write_samples.empty()) {
    written.open(a.write_samples);
    if (!written) throw Error("cannot write --write-samples '" + a.write_samples + "'");
  }
  std::map<std::string, std::vector<double>> by_task, full_by_task;
  std::vector<std::string> order;
  nlohmann::json rows = nlohmann::json::array();
  ProgressLine line("ruler " + cell.policy + " " + cell.budget, static_cast<long>(samples.size()));
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const auto& s = samples[i];
    if (!by_task.count(s.task)) order.push_back(s.task);
    eval::PromptParts parts{s.input, s.question, s.answer_prefix};
    const auto prepared = eval::prepare_prompt(model, parts, !a.no_chat, protocol, s.max_new_tokens,
                                               model.config.context_length - s.max_new_tokens);
    eval::AnswerRequest request{prepared.prompt, prepared.appended, s.max_new_tokens};
    nlohmann::json row = {{"task", s.task}, {"index", s.index}, {"outputs", s.outputs},
                          {"prompt_tokens", prepared.prompt.size()}, {"appended_tokens", prepared.appended.size()}};
    std::size_t full_peak = 0;
    if (a.vs_full && cell.policy != "full") {
      const auto full = evaluator.answer(request, {"full", ""});
      full_peak = full.memory.peak_bytes;
      const double score = eval::ruler_score(full.text, s.outputs);
      full_by_task[s.task].push_back(score);
      row["full_prediction"] = full.text;
      row["full_score"] = score;
    }
    const auto answer = evaluator.answer(request, cell, full_peak);
    const double score = eval::ruler_score(answer.text, s.outputs);
    by_task[s.task].push_back(score);
    row["prediction"] = answer.text;
    row["score"] = score;
    row["peak_cache_bytes"] = answer.memory.peak_bytes;
    if (written)  // what an independent run needs to score the same samples: the exact prompt ids
      written << nlohmann::json{{"task", s.task}, {"index", s.index}, {"input", s.input},
                                {"answer_prefix", s.answer_prefix}, {"outputs", s.outputs},
                                {"max_new_tokens", s.max_new_tokens}, {"prompt_ids", prepared.prompt},
                                {"appended_ids", prepared.appended}, {"chat", prepared.chat},
                                {"prediction", answer.text}, {"score", score}}
                         .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
              << "\n";
    rows.push_back(std::move(row));
    line.update(static_cast<long>(i + 1));
  }
  line.finish();
  nlohmann::json tasks = nlohmann::json::object();
  std::vector<double> average_per_sample, full_average_per_sample;
  for (const auto& name : order) {
    const auto& scores = by_task[name];
    nlohmann::json t = interval_json(eval::bootstrap_mean(scores, a.bootstrap));
    if (full_by_task.count(name)) {
      t["full"] = interval_json(eval::bootstrap_mean(full_by_task[name], a.bootstrap));
      t["difference"] = interval_json(eval::bootstrap_paired_difference(scores, full_by_task[name], a.bootstrap));
    }
    tasks[name] = std::move(t);
  }
  // Per sample index, the mean over tasks: samples of one index share nothing but their seed stream, so the
  // tasks' means are averaged sample by sample and the average's interval is a mean's interval.
  auto per_index_average = [&](const std::map<std::string, std::vector<double>>& table) {
    std::vector<double> out(settings.samples, 0.0);
    for (const auto& [name, scores] : table)
      for (std::size_t i = 0; i < scores.size(); ++i) out[i] += scores[i] / static_cast<double>(table.size());
    return out;
  };
  average_per_sample = per_index_average(by_task);
  nlohmann::json out = {{"eval", "ruler"},
                        {"policy", cell.policy},
                        {"budget", cell.budget},
                        {"protocol", eval::protocol_name(protocol)},
                        {"length", settings.length},
                        {"samples", settings.samples},
                        {"seed", settings.seed},
                        {"chat", !a.no_chat && model.chat_template.chat_template.has_value()},
                        {"bootstrap", {{"resamples", a.bootstrap.resamples}, {"level", a.bootstrap.level},
                                       {"seed", a.bootstrap.seed}}},
                        {"tasks", tasks},
                        {"average", interval_json(eval::bootstrap_mean(average_per_sample, a.bootstrap))},
                        {"records", rows}};
  if (!full_by_task.empty()) {
    full_average_per_sample = per_index_average(full_by_task);
    out["full_average"] = interval_json(eval::bootstrap_mean(full_average_per_sample, a.bootstrap));
    out["difference"] =
        interval_json(eval::bootstrap_paired_difference(average_per_sample, full_average_per_sample, a.bootstrap));
  }
  if (a.json) {
    std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  std::printf("RULER at %d tokens, %s at budget %s, %s, %d samples per task (scores x100, %d%% bootstrap intervals)\n",
              settings.length, cell.policy.c_str(), cell.budget.empty() ? "(whole prompt)" : cell.budget.c_str(),
              eval::protocol_name(protocol).c_str(), settings.samples, static_cast<int>(a.bootstrap.level * 100));
  auto print = [](const std::string& name, const nlohmann::json& t) {
    std::printf("  %-18s %6.2f  [%6.2f, %6.2f]", name.c_str(), t["score"].get<double>(), t["ci_low"].get<double>(),
                t["ci_high"].get<double>());
    if (t.contains("difference"))
      std::printf("   full %6.2f, difference %+6.2f [%+.2f, %+.2f]", t["full"]["score"].get<double>(),
                  t["difference"]["score"].get<double>(), t["difference"]["ci_low"].get<double>(),
                  t["difference"]["ci_high"].get<double>());
    std::printf("\n");
  };
  for (const auto& name : order) print(name, tasks[name]);
  nlohmann::json average = out["average"];
  if (out.contains("difference")) average["full"] = out["full_average"], average["difference"] = out["difference"];
  print("average", average);
  return 0;
}

}  // namespace

EvalSubcommand add_eval_ruler(CLI::App& eval) {
  auto a = std::make_shared<RulerArgs>();
  CLI::App* cmd = eval.add_subcommand(
      "ruler", "RULER's synthetic tasks (needles, variable tracking, common/frequent words) at a context length, "
               "scored as RULER scores them, with bootstrap intervals");
  a->model.add_to(cmd);
  cmd->add_option("--policy", a->policy, "policy spec (see `kvscope policies`)");
  cmd->add_option("--allocation", a->allocation, "layer budget allocation for the policy");
  cmd->add_option("--budget", a->budget, "KV tokens per layer and KV head or share of the prompt");
  cmd->add_option("--length", a->settings.length,
                  "context length in the model's tokens: prompt, answer prefix and the task's new tokens")
      ->check(CLI::Range(256, 1 << 20));
  cmd->add_option("--samples", a->settings.samples, "samples per task")->check(CLI::PositiveNumber);
  cmd->add_option("--seed", a->settings.seed, "seed of the generated samples");
  std::string names;
  for (const auto& n : eval::ruler_task_names()) names += (names.empty() ? "" : ", ") + n;
  cmd->add_option("--tasks", a->tasks, "tasks (default all): " + names)->delimiter(',');
  cmd->add_option("--haystack", a->haystack, "text file for the essay haystacks (default: sample_data/texts)");
  cmd->add_option("--protocol", a->protocol,
                  "query-aware (the whole prompt compressed at once, RULER's setting) or query-agnostic (the context "
                  "compressed alone, the question appended after: kvpress's)");
  cmd->add_flag("--no-chat", a->no_chat, "do not wrap prompts in the model's chat template (RULER's 'base')");
  cmd->add_flag("--vs-full", a->vs_full, "also run the full cache on every sample and report paired differences");
  cmd->add_option("--write-samples", a->write_samples,
                  "write every sample (text, prompt ids, expected answers, prediction) as JSONL");
  cmd->add_option("--bootstrap-resamples", a->bootstrap.resamples, "bootstrap resamples")->check(CLI::PositiveNumber);
  cmd->add_option("--bootstrap-seed", a->bootstrap.seed, "bootstrap seed");
  cmd->add_flag("--json", a->json, "print a machine-readable record");
  return {cmd, [a]() { return run_ruler(*a); }};
}

}  // namespace kvscope::app
