// kvscope eval fidelity|ppl|needle: what a policy costs in quality against the full cache on the same
// tokens. One (policy, budget) per call; `kvscope sweep` runs grids of them.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
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
#include "app/subcommands.h"
#include "core/common/atomic_file.h"
#include "core/common/error.h"
#include "core/eval/eval_run.h"
#include "core/eval/evidence_tokens.h"
#include "core/policy/registry.h"
#ifdef KVSCOPE_HAVE_GUI
#include "viewers/figure_export.h"
#include "viewers/quality_plot.h"
#endif

namespace kvscope::app {

namespace {

struct EvalArgs {
  ModelOptions model;
  PromptOptions prompt;
  std::string policy = "full", allocation, budget, figure, write_samples;
  bool json = false, force = false;
  eval::EvalSettings settings;
  CacheTypeFlags cache_type;  // the cell's; the full-cache reference is float32
  std::vector<int> lengths = NeedleGrid{}.lengths;
  std::vector<std::string> depths = {"0", "25", "50", "75", "100"};
  uint64_t seed = NeedleGrid{}.seed;
  TraceOptions traces;                // needle only
  eval::BootstrapSettings bootstrap;  // needle only: the evidence retention table's intervals
};

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / (1024.0 * 1024.0));
  return buf;
}

// Engine progress of the long runs (ppl decodes thousands of tokens) as one line per stage.
struct StageProgress {
  std::unique_ptr<ProgressLine> line;
  void start(const std::string& label, long total) {
    if (line) line->finish();
    line = std::make_unique<ProgressLine>(label, total);
  }
  void operator()(const engine::Progress& p) {
    if (line && p.phase == observation::Phase::Decode) line->update(p.done);
  }
  ~StageProgress() {
    if (line) line->finish();
  }
};

void print_memory(const eval::CacheMemory& m) {
  std::printf("cache             peak %s of the full cache's %s (saved %.1f%%), at the end %s\n",
              mib(m.peak_bytes).c_str(), mib(m.full_peak_bytes).c_str(), 100.0 * m.saved(), mib(m.bytes).c_str());
  if (m.page_tokens > 0)
    std::printf("cache entries     %s as stored, %s in pages of %d tokens per layer and KV head (peak %s)\n",
                mib(m.entry_bytes).c_str(), mib(m.paged_bytes).c_str(), m.page_tokens, mib(m.paged_peak_bytes).c_str());
}

nlohmann::json metrics_json(const eval::Metrics& metrics) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, value] : metrics) j[name] = value;
  return j;
}

int run_fidelity(const EvalArgs& a) {
  const eval::CellPolicy cell{with_allocation(a.policy, a.allocation), a.budget, a.cache_type.types(), a.cache_type.page_tokens};
  policy::make_policy(cell.policy);  // a bad spec or prompt fails before the model loads
  const std::string body = a.prompt.body();
  const run::ChatSpec chat = a.prompt.chat_spec();
  const model::Model model = a.model.load();
  eval::Evaluator evaluator(model);
  StageProgress progress;
  evaluator.progress = [&](const engine::Progress& p) { progress(p); };
  const auto prompt = run::encode_prompt(model, body, chat);
  progress.start("full cache", a.settings.new_tokens);
  const auto reference = evaluator.fidelity_reference(
      prompt, a.settings.new_tokens, a.settings.reference_end());
  progress.start(cell.policy, a.settings.new_tokens);
  const auto result = evaluator.fidelity(reference, cell);
  progress.line->finish();
  if (a.json) {
    nlohmann::json j = {{"eval", "fidelity"},
                        {"policy", cell.policy},
                        {"budget", cell.budget},
                        {"cache_type", kernels::cache_type_name(cell.cache_type)},
                        {"prompt_tokens", prompt.size()},
                        {"continuation", model.tokenizer->decode(reference.continuation)},
                        {"continuation_tokens", reference.continuation},
                        {"reference_stop_reason", reference.stop_reason},
                        {"metrics", metrics_json(result.metrics())},
                        {"layer_nmse", result.layer_nmse},
                        {"reference_run_ms", reference.run_ms}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("fidelity of %s at budget %s (cache %s) to the f32 full cache: %d teacher-forced tokens after a "
              "%zu-token prompt\n",
              cell.policy.c_str(), cell.budget.empty() ? "(whole prompt)" : cell.budget.c_str(),
              kernels::cache_type_name(cell.cache_type).c_str(), result.score.steps, prompt.size());
  std::printf("top-1 agreement   %.3f (the first %d tokens agree)\n", result.score.top1_agreement,
              result.score.agreeing_prefix);
  std::printf("KL(full||policy)  mean %.4f  max %.4f nats\n", result.score.kl_mean, result.score.kl_max);
  std::printf("log-prob gap      %.4f nats/token (full minus policy, on the full cache's continuation)\n",
              result.score.logprob_gap);
  std::printf("output NMSE       per layer:");
  for (double v : result.layer_nmse) std::printf(" %.2g", v);
  std::printf("\n");
  print_memory(result.memory);
  return 0;
}

int run_ppl(const EvalArgs& a) {
  const eval::CellPolicy cell{with_allocation(a.policy, a.allocation), a.budget, a.cache_type.types(), a.cache_type.page_tokens};
  policy::make_policy(cell.policy);
  const std::string body = a.prompt.body();
  const run::ChatSpec chat = a.prompt.chat_spec();
  const model::Model model = a.model.load();
  eval::Evaluator evaluator(model);
  StageProgress progress;
  evaluator.progress = [&](const engine::Progress& p) { progress(p); };
  const auto tokens =
      eval::ppl_tokens(evaluator, run::prompt_text(model, body, chat), a.settings.max_tokens, chat.enabled,
                        chat.parse_special);
  const long scored = static_cast<long>(tokens.size()) - a.settings.prompt_tokens;
  progress.start("full cache", scored);
  const auto reference = evaluator.ppl_reference(tokens, a.settings.prompt_tokens);
  progress.start(cell.policy, scored);
  const auto result = evaluator.ppl(reference, cell);
  progress.line->finish();
  if (a.json) {
    std::cout << nlohmann::json{{"eval", "ppl"},
                                {"policy", cell.policy},
                                {"budget", cell.budget},
                                {"cache_type", kernels::cache_type_name(cell.cache_type)},
                                {"text_tokens", tokens.size()},
                                {"prompt_tokens", a.settings.prompt_tokens},
                                {"metrics", metrics_json(result.metrics())}}
                     .dump(2)
              << "\n";
    return 0;
  }
  std::printf("perplexity of %zu tokens (the first %d compressed as the prompt, %d decoded teacher-forced)\n",
              tokens.size(), a.settings.prompt_tokens, result.scored_tokens);
  std::printf("%-28s %10s\n", "cache", "perplexity");
  std::printf("%-28s %10.3f\n", "full (f32)", result.ppl_full);
  std::printf("%-28s %10.3f  (x%.4f)\n",
              (cell.policy + " " + cell.budget + " (" + kernels::cache_type_name(cell.cache_type) + ")").c_str(),
              result.ppl, result.ppl / result.ppl_full);
  print_memory(result.memory);
  return 0;
}

int run_needle(const EvalArgs& a) {
  const eval::CellPolicy cell{with_allocation(a.policy, a.allocation), a.budget, a.cache_type.types(), a.cache_type.page_tokens};
  policy::make_policy(cell.policy);
  NeedleGrid grid{a.lengths, parse_depths(a.depths), a.seed, a.settings.answer_tokens};
#ifdef KVSCOPE_HAVE_GUI
  if (!a.figure.empty() && a.figure.size() >= 4 && a.figure.substr(a.figure.size() - 4) != ".png")
    throw UsageError("--figure '" + a.figure + "': the needle grid is a heatmap; give a .png path");
#endif
  if (!a.figure.empty()) {
    refuse_output_that_is_input({"--figure", a.figure}, run_input_files(&a.model, nullptr, {cell.policy}));
    check_output_path(a.figure, existing_policy(a.force), "--figure");
  }
  if (!a.write_samples.empty()) {
    refuse_output_that_is_input({"--write-samples", a.write_samples},
                                run_input_files(&a.model, nullptr, {cell.policy}));
    check_output_path(a.write_samples, existing_policy(a.force), "--write-samples");
  }
  a.traces.prepare();
  // A case's trace: needle_<length>_<depth percent>.h5, every one refused before the first run.
  std::vector<std::filesystem::path> trace_paths;
  if (a.traces.enabled())
    for (int length : grid.lengths)
      for (double depth : grid.depths)
        trace_paths.push_back(a.traces.sample_path(
            "needle_" + std::to_string(length) + "_" + std::to_string(std::lround(depth * 100.0)) + ".h5", a.force));
  const model::Model model = a.model.load();
  eval::Evaluator evaluator(model);
  RetentionSummary retention;
  const auto prompts = needle_prompts(model, grid);
  // Put in place once every case is scored: a failed run leaves the previous file untouched.
  std::unique_ptr<AtomicFile> written;
  if (!a.write_samples.empty())
    written = std::make_unique<AtomicFile>(a.write_samples, existing_policy(a.force), "--write-samples");
  std::vector<std::vector<double>> scores(grid.depths.size(), std::vector<double>(grid.lengths.size(), 0.0));
  nlohmann::json cases = nlohmann::json::array();
  ProgressLine line("needle " + cell.policy, static_cast<long>(prompts.size()));
  int full_total = 0;  // the full cache's hits on the same cases
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const auto trace = a.traces.open(a.traces.enabled() ? trace_paths[i] : std::filesystem::path(), a.force);
    const eval::TraceTarget target = trace ? trace->target() : eval::TraceTarget{};
    const bool full_policy = cell.policy == "full";  // then the trace holds one run
    // The plain prompt (Evaluator::encode without a template), with each token's bytes for the needle's span.
    const model::Encoding encoded = model.tokenizer->encode_prompt_with_bytes(prompts[i].text);
    const auto reference = evaluator.needle_reference(
        encoded.ids, prompts[i].value, a.settings.answer_tokens,
        a.traces.evidence_for(eval::evidence_token_spans(prompts[i].evidence, encoded.bytes)),
        full_policy ? eval::TraceTarget{} : target);
    const auto r = evaluator.needle(reference, cell, a.settings.answer_tokens, target);
    scores[i % grid.depths.size()][i / grid.depths.size()] = r.match ? 1.0 : 0.0;
    full_total += r.full_match;
    nlohmann::json row = {{"case", prompts[i].name},
                          {"value", prompts[i].value},
                          {"answer", r.answer},
                          {"match", r.match},
                          {"metrics", metrics_json(r.metrics())}};
    add_evidence_fields(row, reference.evidence, r.retention);
    retention.add(r.retention, r.match ? 1.0 : 0.0);
    if (written)
      written->write(nlohmann::json{{"case", prompts[i].name},
                                    {"key", prompts[i].key},
                                    {"value", prompts[i].value},
                                    {"prompt_ids", encoded.ids},
                                    {"evidence", row["evidence"]},
                                    {"answer", r.answer},
                                    {"match", r.match}}
                         .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                     "\n");
    if (trace) {
      const eval::SampleFacts facts{
          "needle", static_cast<int64_t>(i), {prompts[i].value}, static_cast<int>(reference.prompt.size()),
          0,        reference.evidence};
      std::optional<eval::SampleRunFacts> full;
      if (!full_policy)
        full = eval::SampleRunFacts{reference.run_name,          false,
                                    reference.match ? 1.0 : 0.0, reference.answer,
                                    reference.first_answer_step, reference.retention};
      a.traces.finish(*trace, facts,
                      {r.run_name, true, r.match ? 1.0 : 0.0, r.answer, r.first_answer_step, r.retention}, full, row);
    }
    cases.push_back(std::move(row));
    line.update(static_cast<long>(i + 1));
  }
  line.finish();
  if (written) written->commit();
#ifdef KVSCOPE_HAVE_GUI
  if (!a.figure.empty())
    viewers::export_figure(
        viewers::needle_grid(scores, grid.lengths, grid.depths, "needle retrieval, " + cell.policy + " " + cell.budget),
        a.figure, {}, existing_policy(a.force));
#else
  if (!a.figure.empty()) throw Error("this kvscope was built without the GUI libraries, which --figure needs");
#endif
  if (a.json) {
    std::cout
        << nlohmann::json{{"eval", "needle"},        {"policy", cell.policy},
                          {"budget", cell.budget},   {"seed", a.seed},
                          {"lengths", grid.lengths}, {"depths", grid.depths},
                          {"cases", cases},          {"evidence_retention", retention.json(cell.policy, a.bootstrap)}}
               .dump(2)
        << "\n";
    return 0;
  }
  std::printf("needle retrieval of %s at budget %s (exact match of the 7-digit value; seed %llu)\n",
              cell.policy.c_str(), cell.budget.empty() ? "(whole prompt)" : cell.budget.c_str(),
              static_cast<unsigned long long>(a.seed));
  std::printf("depth \\ tokens");
  for (int l : grid.lengths) std::printf(" %7d", l);
  std::printf("\n");
  double total = 0.0;
  for (std::size_t d = 0; d < grid.depths.size(); ++d) {
    std::printf("%13.0f%%", grid.depths[d] * 100.0);
    for (double s : scores[d]) std::printf(" %7s", s > 0.5 ? "hit" : "miss"), total += s;
    std::printf("\n");
  }
  std::printf("accuracy %.3f over %zu cases (the full cache: %.3f)\n", total / prompts.size(), prompts.size(),
              static_cast<double>(full_total) / prompts.size());
  retention.print(cell.policy, a.bootstrap);
  return 0;
}

}  // namespace

Command register_eval(CLI::App& root) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* cmd = root.add_subcommand("eval", "measure what a policy costs in quality against the full cache");
  cmd->require_subcommand(1);
  auto common = [&](CLI::App* sub) {
    a->model.add_to(sub);
    a->prompt.add_to(sub);
    sub->add_option("--policy", a->policy, "policy spec, e.g. snapkv:window=32 (see `kvscope policies`)");
    sub->add_option("--allocation", a->allocation, "layer budget allocation for the policy");
    add_budget_options(sub, a->budget, "KV tokens per layer and KV head (e.g. 128) or share of the prompt (e.g. 20%)");
    sub->add_flag("--json", a->json, "print a machine-readable record instead of a table");
    a->cache_type.add_to(sub);
  };
  CLI::App* fidelity = cmd->add_subcommand(
      "fidelity", "top-1 agreement, KL and log-prob gap, teacher-forced on the full cache's continuation");
  common(fidelity);
  fidelity
      ->add_option("--max-new-tokens", a->settings.new_tokens,
                   "tokens of the full cache's greedy continuation to score")
      ->check(kPositive);
  fidelity->add_flag("--stop-at-end", a->settings.stop_at_end,
                     "end the full cache's continuation at its end-of-generation token (scored), as the window's "
                     "runs and its fidelity do; by default every new token is scored, past an end token");
  CLI::App* ppl = cmd->add_subcommand("ppl", "teacher-forced perplexity of a text with compression active");
  common(ppl);
  ppl->add_option("--prompt-tokens", a->settings.prompt_tokens,
                  "tokens run as the (compressed) prompt; the rest are decoded")
      ->check(kPositive);
  ppl->add_option("--max-tokens", a->settings.max_tokens, "cut the text to this many tokens (0 = all)")
      ->check(kNonNegative);
  CLI::App* needle = cmd->add_subcommand("needle", "needle-in-a-haystack retrieval over context lengths and depths");
  a->model.add_to(needle);
  needle->add_option("--policy", a->policy, "policy spec");
  needle->add_option("--allocation", a->allocation, "layer budget allocation for the policy");
  add_budget_options(needle, a->budget, "KV tokens per layer and KV head or share of the prompt");
  needle->add_flag("--json", a->json, "print a machine-readable record instead of a table");
  a->cache_type.add_to(needle);
  needle->add_option("--lengths", a->lengths, "context lengths in tokens, up to the model's context")
      ->delimiter(',')
      ->check(kPositive);
  needle->add_option("--depths", a->depths, "needle depths in percent of the haystack")->delimiter(',');
  needle->add_option("--seed", a->seed, "seed of the generated cases");
  needle->add_option("--answer-tokens", a->settings.answer_tokens, "greedy answer length")->check(kPositive);
  needle->add_option("--figure", a->figure, "write the grid as a heatmap PNG");
  needle->add_option("--write-samples", a->write_samples,
                     "write every case (key, value, prompt ids, evidence spans, answer) as JSONL (put in place when "
                     "every case is done)");
  needle->add_flag("--force", a->force,
                   "replace an existing --figure, --write-samples or --traces file (a link is replaced, never "
                   "written through)");
  a->traces.add_to(needle);
  needle->add_option("--bootstrap-resamples", a->bootstrap.resamples, "bootstrap resamples of the evidence table")
      ->check(kPositive);
  needle->add_option("--bootstrap-seed", a->bootstrap.seed, "bootstrap seed of the evidence table");
  const Command longbench = add_eval_longbench(*cmd);
  const Command ruler = add_eval_ruler(*cmd);
  return {cmd, [a, fidelity, ppl, longbench, ruler]() {
            if (fidelity->parsed()) return run_fidelity(*a);
            if (ppl->parsed()) return run_ppl(*a);
            if (longbench.parser->parsed()) return longbench.run();
            if (ruler.parser->parsed()) return ruler.run();
            return run_needle(*a);
          }};
}

}  // namespace kvscope::app
