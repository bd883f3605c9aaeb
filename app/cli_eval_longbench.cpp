// kvscope eval longbench: LongBench (v1) records run under a policy and scored as LongBench scores them, with
// bootstrap intervals; or, with --score-only, its metrics on given (prediction, reference) pairs.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "app/eval_evidence.h"
#include "app/eval_report.h"
#include "app/eval_subcommands.h"
#include "app/number_checks.h"
#include "app/progress_line.h"
#include "app/run_options.h"
#include "core/common/atomic_file.h"
#include "core/common/error.h"
#include "core/common/json_text.h"
#include "core/eval/bootstrap.h"
#include "core/eval/eval_protocol.h"
#include "core/eval/eval_run.h"
#include "core/eval/longbench.h"
#include "core/eval/longbench_evidence.h"
#include "core/policy/registry.h"

namespace kvscope::app {
namespace {

struct LongBenchArgs {
  ModelOptions model;
  std::string policy = "full", allocation, budget;
  std::string data, dataset, prompts_file, predictions;
  std::string protocol = "query-aware";
  int limit = 0, max_length = 0;
  bool no_chat = false, vs_full = false, json = false, force = false;
  // --score-only
  bool score_only = false;
  std::string metric, pairs, classes;
  eval::BootstrapSettings bootstrap;
  TraceOptions traces;
  CacheTypeFlags cache_type;  // the cell's; a --vs-full full-cache run stays float32
};

std::vector<eval::MetricPair> parse_pairs(const std::string& pairs_json, const std::string& classes_json) {
  const nlohmann::json pairs = parse_json_text(pairs_json, "--pairs");
  if (!pairs.is_array()) throw UsageError("--pairs is not a JSON list of [prediction, reference] pairs");
  std::vector<std::string> shared;
  if (!classes_json.empty()) {
    const nlohmann::json c = parse_json_text(classes_json, "--classes");
    if (!c.is_array()) throw UsageError("--classes is not a JSON list of strings");
    for (const auto& x : c) {
      if (!x.is_string()) throw UsageError("--classes holds a " + std::string(x.type_name()) + " (expected strings)");
      shared.push_back(x.get<std::string>());
    }
  }
  std::vector<eval::MetricPair> out;
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const auto& p = pairs[i];
    const std::string where = "--pairs item " + std::to_string(i);
    if (!p.is_array() || p.size() < 2 || p.size() > 3 || !p[0].is_string() || !p[1].is_string())
      throw UsageError(where + " is not [prediction, reference] (two strings, and optionally a list of classes)");
    eval::MetricPair pair{p[0].get<std::string>(), p[1].get<std::string>(), shared};
    if (p.size() == 3) {
      if (!p[2].is_array()) throw UsageError(where + ": its third element is not a list of classes");
      pair.classes.clear();
      for (const auto& x : p[2]) {
        if (!x.is_string()) throw UsageError(where + ": a class is not a string");
        pair.classes.push_back(x.get<std::string>());
      }
    }
    out.push_back(std::move(pair));
  }
  return out;
}

int run_score_only(const LongBenchArgs& a) {
  if (a.metric.empty()) throw UsageError("--score-only needs --metric (qa_f1, rouge_l, classification, retrieval, count, code_sim)");
  if (a.pairs.empty()) throw UsageError("--score-only needs --pairs '[[prediction, reference], ...]'");
  const auto pairs = parse_pairs(a.pairs, a.classes);
  // LongBench's classification scores a prediction against the class names it mentions: with none, every score
  // is 0 whatever the prediction.
  if (a.metric == "classification")
    for (std::size_t i = 0; i < pairs.size(); ++i)
      if (pairs[i].classes.empty())
        throw UsageError("--metric classification needs the class names: --pairs item " + std::to_string(i) +
                         " has none (give --classes '[\"name\", ...]' for every pair, or a third element per pair)");
  const auto scores = eval::longbench_metric_scores(a.metric, pairs);
  if (a.json) {
    // Shortest round-trip floats: the scores are compared with other implementations to 1e-9.
    std::cout << nlohmann::json{{"metric", a.metric}, {"scores", scores}}.dump() << "\n";
    return 0;
  }
  for (std::size_t i = 0; i < scores.size(); ++i) std::printf("%zu  %.6f\n", i, scores[i]);
  return 0;
}

int run_records(const LongBenchArgs& a) {
  if (a.data.empty()) throw UsageError("eval longbench needs --data FILE.jsonl (or --score-only)");
  const eval::Protocol protocol = eval::parse_protocol(a.protocol);
  const eval::CellPolicy cell{with_allocation(a.policy, a.allocation), a.budget, a.cache_type.types(), a.cache_type.page_tokens};
  policy::make_policy(cell.policy);  // a bad spec fails before anything loads
  a.traces.prepare();
  if (!a.predictions.empty()) {
    std::vector<NamedPath> inputs = run_input_files(&a.model, nullptr, {cell.policy});
    inputs.push_back({"--data", a.data});
    inputs.push_back({"--prompts", a.prompts_file});
    refuse_output_that_is_input({"--predictions", a.predictions}, inputs);
    check_output_path(a.predictions, existing_policy(a.force), "--predictions");
  }
  std::string prompts_json;
  if (!a.prompts_file.empty()) {
    std::ifstream in(a.prompts_file);
    if (!in) throw UsageError("cannot read --prompts file '" + a.prompts_file + "'");
    prompts_json = std::string(std::istreambuf_iterator<char>(in), {});
    if (!parse_json_text(prompts_json, a.prompts_file).is_object())
      throw UsageError(a.prompts_file + ": expected a JSON object of task -> prompt format");
  }
  std::vector<eval::LongBenchRecord> records = eval::read_longbench_jsonl(a.data);
  std::map<std::string, eval::LongBenchTask> tasks_by_name;  // looked up once: unknown tasks fail before the model loads
  for (auto& r : records) {
    if (!a.dataset.empty()) r.dataset = a.dataset;
    if (r.dataset.empty())
      throw UsageError(a.data + ": a record has no 'dataset' field; give the task with --dataset NAME");
    if (!tasks_by_name.count(r.dataset)) tasks_by_name.emplace(r.dataset, eval::longbench_task(r.dataset, prompts_json));
  }
  if (a.limit > 0 && static_cast<int>(records.size()) > a.limit) records.resize(a.limit);
  // Every record's trace file is refused before the first run, not halfway through.
  std::vector<std::filesystem::path> trace_paths;
  if (a.traces.enabled())
    for (std::size_t i = 0; i < records.size(); ++i)
      trace_paths.push_back(
          a.traces.sample_path(eval::sample_trace_name(records[i].dataset, static_cast<int64_t>(i)), a.force));
  const model::Model model = a.model.load();
  eval::Evaluator evaluator(model);
  RetentionSummary retention;
  // Written beside --predictions and put in place once every record is scored: a failed run leaves no
  // file that passes for a whole prediction set, and the previous one untouched.
  std::unique_ptr<AtomicFile> predictions;
  if (!a.predictions.empty())
    predictions = std::make_unique<AtomicFile>(a.predictions, existing_policy(a.force), "--predictions");

  std::map<std::string, std::vector<double>> by_task, full_by_task;
  std::vector<double> all, full_all;
  nlohmann::json rows = nlohmann::json::array();
  ProgressLine line("longbench " + cell.policy + " " + cell.budget, static_cast<long>(records.size()));
  for (std::size_t i = 0; i < records.size(); ++i) {
    const auto& record = records[i];
    const eval::LongBenchTask& task = tasks_by_name.at(record.dataset);
    eval::PromptParts parts;
    parts.text = eval::longbench_prompt(task, record);
    parts.question = eval::longbench_question(task, record);
    parts.evidence = eval::longbench_answer_evidence(parts.text, parts.question, record);
    const eval::PreparedPrompt prepared =
        eval::prepare_prompt(model, parts, task.chat && !a.no_chat, protocol, task.max_new_tokens, a.max_length);
    eval::AnswerRequest request{prepared.prompt, prepared.appended, task.max_new_tokens,
                                a.traces.evidence_for(prepared.evidence)};
    const auto trace = a.traces.open(a.traces.enabled() ? trace_paths[i] : std::filesystem::path(), a.force);
    const eval::TraceTarget target = trace ? trace->target() : eval::TraceTarget{};
    std::size_t full_peak = 0;
    double full_score = -1.0;
    std::string full_text;
    std::optional<eval::AnswerResult> full;
    if ((a.vs_full || trace) && cell.policy != "full") {  // a trace holds the full cache's run beside the policy's
      full = evaluator.answer(request, {"full", ""}, 0, target);
      full_peak = full->memory.peak_bytes;
      full_text = eval::first_line_if(task.stop_at_newline, full->text);
      full_score = eval::longbench_record_score(task, full_text, record);
      if (a.vs_full) {
        full_by_task[task.name].push_back(full_score);
        full_all.push_back(full_score);
      }
    }
    const auto answer = evaluator.answer(request, cell, full_peak, target);
    const std::string text = eval::first_line_if(task.stop_at_newline, answer.text);
    const double score = eval::longbench_record_score(task, text, record);
    by_task[task.name].push_back(score);
    all.push_back(score);
    nlohmann::json row = {{"index", i},
                          {"id", record.id},
                          {"dataset", task.name},
                          {"prompt_tokens", prepared.prompt.size()},
                          {"appended_tokens", prepared.appended.size()},
                          {"truncated", prepared.truncated},
                          {"prediction", text},
                          {"score", score}};
    if (full_score >= 0) row["full_score"] = full_score, row["full_prediction"] = full_text;
    add_paged_fields(row, answer.memory);
    add_evidence_fields(row, request.evidence, answer.retention);
    retention.add(answer.retention, score);
    if (trace) {
      const eval::SampleFacts facts{task.name,
                                    static_cast<int64_t>(i),
                                    record.answers,
                                    static_cast<int>(prepared.prompt.size()),
                                    static_cast<int>(prepared.appended.size()),
                                    request.evidence};
      std::optional<eval::SampleRunFacts> full_run;
      if (full)
        full_run = eval::SampleRunFacts{full->run_name,          false,          full_score, full_text,
                                        full->first_answer_step, full->retention};
      a.traces.finish(*trace, facts, {answer.run_name, true, score, text, answer.first_answer_step, answer.retention},
                      full_run, row);
    }
    rows.push_back(std::move(row));
    // LongBench's own pred/*.jsonl layout, so its eval.py can score the same predictions; with the exact prompt
    // ids and the evidence spans on them, which eval.py ignores.
    if (predictions)
      predictions->write(nlohmann::json{{"pred", text},
                                        {"answers", record.answers},
                                        {"all_classes", record.all_classes},
                                        {"length", record.length},
                                        {"prompt_ids", prepared.prompt},
                                        {"appended_ids", prepared.appended},
                                        {"evidence", evidence_json(prepared.evidence)}}
                             .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                         "\n");
    line.update(static_cast<long>(i + 1));
  }
  line.finish();
  if (predictions) predictions->commit();

  // LongBench reports 100 x the mean score per task.
  nlohmann::json tasks = nlohmann::json::object();
  for (const auto& [name, scores] : by_task) tasks[name] = scored_group_json(scores, full_by_task[name], a.bootstrap);
  nlohmann::json out = {{"eval", "longbench"},
                        {"policy", cell.policy},
                        {"budget", cell.budget},
                        {"cache_type", kernels::cache_type_name(cell.cache_type)},
                        {"protocol", eval::protocol_name(protocol)},
                        {"data", a.data},
                        {"bootstrap", bootstrap_json(a.bootstrap)},
                        {"tasks", tasks},
                        {"records", rows}};
  nlohmann::json overall = scored_group_json(all, full_all, a.bootstrap);
  if (overall.contains("full")) out["full"] = overall["full"], out["difference"] = overall["difference"];
  overall.erase("full");
  overall.erase("difference");
  out["overall"] = std::move(overall);
  out["evidence_retention"] = retention.json(cell.policy, a.bootstrap);
  if (a.json) {
    std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  std::printf("LongBench, %s at budget %s, cache %s, %s (scores x100, %d%% bootstrap intervals, %d resamples)\n",
              cell.policy.c_str(), cell.budget.empty() ? "(whole prompt)" : cell.budget.c_str(),
              kernels::cache_type_name(cell.cache_type).c_str(), eval::protocol_name(protocol).c_str(), static_cast<int>(a.bootstrap.level * 100), a.bootstrap.resamples);
  for (const auto& [name, t] : tasks.items()) print_scored_group(name, t, 22, /*show_n=*/true);
  retention.print(cell.policy, a.bootstrap);
  return 0;
}

}  // namespace

Command add_eval_longbench(CLI::App& eval) {
  auto a = std::make_shared<LongBenchArgs>();
  CLI::App* cmd = eval.add_subcommand(
      "longbench", "LongBench (v1) records under a policy, scored as LongBench scores them, with bootstrap intervals");
  a->model.add_to(cmd);
  cmd->add_option("--data", a->data, "LongBench JSONL (fields context, input, answers, all_classes, length, dataset)");
  cmd->add_option("--dataset", a->dataset, "the task of every record (default: each record's 'dataset' field)");
  cmd->add_option("--limit", a->limit, "score the first N records only")->check(kNonNegative);
  cmd->add_option("--policy", a->policy, "policy spec (see `kvscope policies`)");
  cmd->add_option("--allocation", a->allocation, "layer budget allocation for the policy");
  add_budget_options(cmd, a->budget, "KV tokens per layer and KV head or share of the prompt");
  a->cache_type.add_to(cmd);
  cmd->add_option("--protocol", a->protocol,
                  "query-aware (the whole prompt compressed at once, LongBench's and the papers' setting) or "
                  "query-agnostic (the context compressed alone, the question appended after: kvpress's)");
  cmd->add_option("--max-length", a->max_length,
                  "truncate prompts longer than this many tokens in the middle, as LongBench does (default: the "
                  "model's context minus the task's new tokens minus 64 for the chat template)")
      ->check(kNonNegative);
  cmd->add_flag("--no-chat", a->no_chat, "never wrap prompts in the model's chat template");
  cmd->add_option("--prompts", a->prompts_file, "JSON object of task -> prompt format, replacing LongBench's");
  cmd->add_flag("--vs-full", a->vs_full, "also run the full cache on every record and report the paired difference");
  cmd->add_option("--predictions", a->predictions,
                  "write the predictions as LongBench's pred JSONL (put in place when every record is done)");
  cmd->add_flag("--force", a->force,
                "replace an existing --predictions file or --traces files (a link is replaced, never written "
                "through)");
  a->traces.add_to(cmd);
  cmd->add_option("--bootstrap-resamples", a->bootstrap.resamples, "bootstrap resamples")->check(kPositive);
  cmd->add_option("--bootstrap-seed", a->bootstrap.seed, "bootstrap seed");
  cmd->add_flag("--json", a->json, "print a machine-readable record");
  cmd->add_flag("--score-only", a->score_only, "score --pairs with --metric; no model runs");
  cmd->add_option("--metric", a->metric, "with --score-only: qa_f1, rouge_l, classification, retrieval, count, code_sim");
  cmd->add_option("--pairs", a->pairs, "with --score-only: JSON list of [prediction, reference(, classes)]");
  cmd->add_option("--classes", a->classes, "with --score-only: JSON list of class names for every pair");
  return {cmd, [a]() { return a->score_only ? run_score_only(*a) : run_records(*a); }};
}

}  // namespace kvscope::app
