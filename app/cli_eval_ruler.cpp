// kvscope eval ruler: RULER's synthetic tasks generated for the model's tokenizer at a context length, run under
// a policy and scored as RULER scores them, with bootstrap intervals per task and for the average.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "app/eval_evidence.h"
#include "app/eval_prompts.h"
#include "app/eval_report.h"
#include "app/eval_subcommands.h"
#include "app/number_checks.h"
#include "app/progress_line.h"
#include "app/run_options.h"
#include "core/common/atomic_file.h"
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
  bool no_chat = false, vs_full = false, json = false, force = false;
  eval::BootstrapSettings bootstrap;
  TraceOptions traces;
  CacheTypeFlags cache_type;  // the cell's; a --vs-full full-cache run stays float32
};

int run_ruler(const RulerArgs& a) {
  const eval::Protocol protocol = eval::parse_protocol(a.protocol);
  const eval::CellPolicy cell{with_allocation(a.policy, a.allocation), a.budget, a.cache_type.types(), a.cache_type.page_tokens};
  policy::make_policy(cell.policy);
  if (!a.write_samples.empty()) {
    std::vector<NamedPath> inputs = run_input_files(&a.model, nullptr, {cell.policy});
    inputs.push_back({"--haystack", a.haystack});
    refuse_output_that_is_input({"--write-samples", a.write_samples}, inputs);
    check_output_path(a.write_samples, existing_policy(a.force), "--write-samples");
  }
  a.traces.prepare();
  eval::RulerSettings settings = a.settings;
  settings.tasks = a.tasks;
  settings.essay = eval::ruler_essay(a.haystack);
  for (const auto& t : settings.tasks)  // an unknown task fails before the model loads
    if (std::find(eval::ruler_task_names().begin(), eval::ruler_task_names().end(), t) == eval::ruler_task_names().end())
      throw UsageError("unknown RULER task '" + t + "'; see `kvscope eval ruler --help`");
  const model::Model model = a.model.load();
  std::fprintf(stderr, "generating RULER samples at %d tokens...\n", settings.length);
  const auto samples = ruler_samples(model, settings, !a.no_chat);
  // Every sample's trace file is refused before the first run, not halfway through.
  std::vector<std::filesystem::path> trace_paths;
  if (a.traces.enabled())
    for (const auto& s : samples)
      trace_paths.push_back(a.traces.sample_path(eval::sample_trace_name(s.task, s.index), a.force));
  eval::Evaluator evaluator(model);
  RetentionSummary retention;
  // Put in place once every sample is scored: a failed run leaves the previous file untouched.
  std::unique_ptr<AtomicFile> written;
  if (!a.write_samples.empty())
    written = std::make_unique<AtomicFile>(a.write_samples, existing_policy(a.force), "--write-samples");
  std::map<std::string, std::vector<double>> by_task, full_by_task;
  std::vector<std::string> order;
  nlohmann::json rows = nlohmann::json::array();
  ProgressLine line("ruler " + cell.policy + " " + cell.budget, static_cast<long>(samples.size()));
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const auto& s = samples[i];
    if (!by_task.count(s.task)) order.push_back(s.task);
    eval::PromptParts parts{s.input, s.question, s.answer_prefix, s.evidence};
    const auto prepared = eval::prepare_prompt(model, parts, !a.no_chat, protocol, s.max_new_tokens,
                                               model.config.context_length - s.max_new_tokens);
    eval::AnswerRequest request{prepared.prompt, prepared.appended, s.max_new_tokens,
                                a.traces.evidence_for(prepared.evidence)};
    nlohmann::json row = {{"task", s.task}, {"index", s.index}, {"outputs", s.outputs},
                          {"prompt_tokens", prepared.prompt.size()}, {"appended_tokens", prepared.appended.size()}};
    const auto trace = a.traces.open(a.traces.enabled() ? trace_paths[i] : std::filesystem::path(), a.force);
    const eval::TraceTarget target = trace ? trace->target() : eval::TraceTarget{};
    std::size_t full_peak = 0;
    std::optional<eval::AnswerResult> full;
    if ((a.vs_full || trace) && cell.policy != "full") {  // a trace holds the full cache's run beside the policy's
      full = evaluator.answer(request, {"full", ""}, 0, target);
      full_peak = full->memory.peak_bytes;
      const double score = eval::ruler_score(full->text, s.outputs);
      if (a.vs_full) full_by_task[s.task].push_back(score);
      row["full_prediction"] = full->text;
      row["full_score"] = score;
    }
    const auto answer = evaluator.answer(request, cell, full_peak, target);
    const double score = eval::ruler_score(answer.text, s.outputs);
    by_task[s.task].push_back(score);
    row["prediction"] = answer.text;
    row["score"] = score;
    row["peak_cache_bytes"] = answer.memory.peak_bytes;
    add_paged_fields(row, answer.memory);
    add_evidence_fields(row, request.evidence, answer.retention);
    retention.add(answer.retention, score);
    if (trace) {
      const eval::SampleFacts facts{s.task,
                                    static_cast<int64_t>(s.index),
                                    s.outputs,
                                    static_cast<int>(prepared.prompt.size()),
                                    static_cast<int>(prepared.appended.size()),
                                    request.evidence};
      std::optional<eval::SampleRunFacts> full_run;
      if (full)
        full_run =
            eval::SampleRunFacts{full->run_name,          false,          row["full_score"].get<double>(), full->text,
                                 full->first_answer_step, full->retention};
      a.traces.finish(*trace, facts,
                      {answer.run_name, true, score, answer.text, answer.first_answer_step, answer.retention}, full_run,
                      row);
    }
    if (written)  // what an independent run needs to score the same samples: the exact prompt ids
      written->write(nlohmann::json{{"task", s.task},
                                    {"index", s.index},
                                    {"input", s.input},
                                    {"answer_prefix", s.answer_prefix},
                                    {"outputs", s.outputs},
                                    {"max_new_tokens", s.max_new_tokens},
                                    {"prompt_ids", prepared.prompt},
                                    {"appended_ids", prepared.appended},
                                    {"chat", prepared.chat},
                                    {"evidence", evidence_json(request.evidence)},
                                    {"prediction", answer.text},
                                    {"score", score}}
                         .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                     "\n");
    rows.push_back(std::move(row));
    line.update(static_cast<long>(i + 1));
  }
  line.finish();
  if (written) written->commit();
  nlohmann::json tasks = nlohmann::json::object();
  for (const auto& name : order) tasks[name] = scored_group_json(by_task[name], full_by_task[name], a.bootstrap);
  // Per sample index, the mean over tasks: samples of one index share nothing but their seed stream, so the
  // tasks' means are averaged sample by sample and the average's interval is a mean's interval.
  auto per_index_average = [&](const std::map<std::string, std::vector<double>>& table) {
    std::vector<double> out;
    for (const auto& [name, scores] : table) {
      if (scores.empty()) continue;  // no full-cache runs (no --vs-full)
      out.resize(settings.samples, 0.0);
      for (std::size_t i = 0; i < scores.size(); ++i) out[i] += scores[i] / static_cast<double>(table.size());
    }
    return out;
  };
  const nlohmann::json average =
      scored_group_json(per_index_average(by_task), per_index_average(full_by_task), a.bootstrap);
  nlohmann::json out = {{"eval", "ruler"},
                        {"policy", cell.policy},
                        {"budget", cell.budget},
                        {"cache_type", kernels::cache_type_name(cell.cache_type)},
                        {"protocol", eval::protocol_name(protocol)},
                        {"length", settings.length},
                        {"samples", settings.samples},
                        {"seed", settings.seed},
                        {"chat", !a.no_chat && model.chat_template.chat_template.has_value()},
                        {"bootstrap", bootstrap_json(a.bootstrap)},
                        {"tasks", tasks},
                        {"records", rows}};
  out["average"] = average;
  out["evidence_retention"] = retention.json(cell.policy, a.bootstrap);
  out["average"].erase("full");
  out["average"].erase("difference");
  if (average.contains("full")) out["full_average"] = average["full"], out["difference"] = average["difference"];
  if (a.json) {
    std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  std::printf("RULER at %d tokens, %s at budget %s, cache %s, %s, %d samples per task (scores x100, %d%% bootstrap "
              "intervals)\n",
              settings.length, cell.policy.c_str(), cell.budget.empty() ? "(whole prompt)" : cell.budget.c_str(),
              kernels::cache_type_name(cell.cache_type).c_str(), eval::protocol_name(protocol).c_str(), settings.samples, static_cast<int>(a.bootstrap.level * 100));
  for (const auto& name : order) print_scored_group(name, tasks[name], 18, /*show_n=*/false);
  print_scored_group("average", average, 18, /*show_n=*/false);
  retention.print(cell.policy, a.bootstrap);
  return 0;
}

}  // namespace

Command add_eval_ruler(CLI::App& eval) {
  auto a = std::make_shared<RulerArgs>();
  CLI::App* cmd = eval.add_subcommand(
      "ruler", "RULER's synthetic tasks (needles, variable tracking, common/frequent words) at a context length, "
               "scored as RULER scores them, with bootstrap intervals");
  a->model.add_to(cmd);
  cmd->add_option("--policy", a->policy, "policy spec (see `kvscope policies`)");
  cmd->add_option("--allocation", a->allocation, "layer budget allocation for the policy");
  add_budget_options(cmd, a->budget, "KV tokens per layer and KV head or share of the prompt");
  a->cache_type.add_to(cmd);
  cmd->add_option("--length", a->settings.length,
                  "context length in the model's tokens: prompt, answer prefix and the task's new tokens")
      ->check(CLI::Range(256, 1 << 20));
  cmd->add_option("--samples", a->settings.samples, "samples per task (at most 1000)")
      ->check(CLI::Range(1, eval::kMaxRulerSamples));
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
  cmd->add_option(
      "--write-samples", a->write_samples,
      "write every sample (text, prompt ids, expected answers, evidence spans, prediction) as JSONL (put in place when "
      "every sample is done)");
  cmd->add_flag("--force", a->force,
                "replace an existing --write-samples file or --traces files (a link is replaced, never written "
                "through)");
  a->traces.add_to(cmd);
  cmd->add_option("--bootstrap-resamples", a->bootstrap.resamples, "bootstrap resamples")->check(kPositive);
  cmd->add_option("--bootstrap-seed", a->bootstrap.seed, "bootstrap seed");
  cmd->add_flag("--json", a->json, "print a machine-readable record");
  return {cmd, [a]() { return run_ruler(*a); }};
}

}  // namespace kvscope::app
