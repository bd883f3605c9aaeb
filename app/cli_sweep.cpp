// kvscope sweep: the quality of every (prompt, policy, budget) cell of a grid, persisted cell by cell in
// <out>/rows.csv and <out>/eval.h5, resumable, run in this process, in N local worker processes, or as
// tasks on a Ray cluster; ends with a quality-vs-budget figure (PNG and SVG) and a summary table.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>

#include "app/number_checks.h"
#include "app/eval_prompts.h"
#include "app/progress_line.h"
#include "app/run_options.h"
#include "app/subcommands.h"
#include "app/sweep_retention.h"
#include "app/sweep_workers.h"
#include "core/common/error.h"
#include "core/common/file_text.h"
#include "core/common/sha256.h"
#include "core/eval/cell_runner.h"
#include "core/eval/eval_protocol.h"
#include "core/eval/sweep_summary.h"
#include "core/policy/budget_spec.h"
#include "core/policy/registry.h"
#ifdef KVSCOPE_HAVE_GUI
#include "viewers/figure_export.h"
#include "viewers/quality_plot.h"
#endif

namespace kvscope::app {

namespace {

struct SweepArgs {
  ModelOptions model;
  PromptOptions prompt;
  std::string prompts_dir, policies, budgets, compression_ratios, eval_kind, out, ray_address, metric, cache_types;
  std::string ray_python = "python3";
  int cache_page = 0;
  int workers = 1;
  bool serve = false;
  eval::EvalSettings settings;
  std::vector<int> lengths = NeedleGrid{}.lengths;
  std::vector<std::string> depths = {"0", "25", "50", "75", "100"};
  // Unset: each kind's `kvscope eval` default (needle 1, ruler RulerSettings' 42), so a sweep and an eval of the
  // same options run the same samples.
  std::optional<uint64_t> seed;
  eval::RulerSettings ruler;  // --length, --samples, --tasks, --haystack (seed from --seed)
  std::string haystack;
  bool no_chat = false;
  std::string baseline;  // the summary's paired differences are to this policy (default: full, if in the grid)
};

std::string default_metric(const std::string& kind) {
  if (kind == "fidelity") return "kl_mean";
  if (kind == "ppl") return "ppl";
  if (kind == "ruler") return "score";
  return "exact_match";
}

// The grid from the flags alone (no model needed except to generate needle cases).
struct Prepared {
  eval::SweepGrid grid;
  std::vector<eval::EvalPrompt> prompts;
};

Prepared prepare(const SweepArgs& a, const model::Model* model) {
  Prepared p;
  p.grid.eval_kind = a.eval_kind;
  p.grid.policies = eval::split_policy_list(a.policies);
  if (a.budgets.empty() && a.compression_ratios.empty())
    throw UsageError("no budgets: pass --budgets 10%,25% or --compression-ratios 0.75,0.5");
  if (!a.budgets.empty()) p.grid.budgets = eval::split_list(a.budgets, "budget");
  if (!a.compression_ratios.empty())
    for (const auto& r : eval::split_list(a.compression_ratios, "compression ratio"))
      p.grid.budgets.push_back(policy::BudgetSpec::compression_ratio_text(r));
  // Unknown names fail here, before any work; a policy or budget given twice would run every cell twice.
  std::map<std::pair<std::string, std::map<std::string, std::string>>, std::string> policies_seen;
  for (const auto& spec : p.grid.policies) {
    const policy::PolicyInstance made = policy::make_policy(spec);
    const auto [seen, added] = policies_seen.emplace(std::pair{made.name, made.params.as_text()}, spec);
    if (!added)
      throw UsageError("--policies names the policy '" + spec + "' twice" +
                       (seen->second == spec ? "" : " (as '" + seen->second + "' too)") + "; give each policy once");
    const auto digest = made.provenance.find("policy_file_sha256");
    p.grid.policy_digests.push_back(digest == made.provenance.end() ? "" : digest->second);
  }
  std::map<std::pair<policy::BudgetSpec::Kind, double>, std::string> budgets_seen;
  for (const auto& b : p.grid.budgets) {
    const policy::BudgetSpec budget = policy::BudgetSpec::parse(b);
    const auto [seen, added] = budgets_seen.emplace(std::pair{budget.kind, budget.value}, b);
    if (!added)
      throw UsageError("--budgets names the budget '" + b + "' twice" +
                       (seen->second == b ? "" : " (as '" + seen->second + "' too)") + "; give each budget once");
  }
  if (!a.cache_types.empty()) {
    // An item with '=' and no ':' continues the previous type's options, as for policies:
    // kivi2:group=32,residual=128,q8_0 is two types.
    p.grid.cache_types = eval::split_policy_list(a.cache_types);
    std::map<std::string, std::string> types_seen;
    for (const auto& type : p.grid.cache_types) {
      const std::string name = kernels::cache_type_name(kernels::parse_cache_types(type));
      if (const auto [seen, added] = types_seen.emplace(name, type); !added)
        throw UsageError("--cache-types names the cache type '" + type + "' twice" +
                         (seen->second == type ? "" : " (as '" + seen->second + "' too)") + "; give each type once");
    }
  }
  p.grid.cache_page_tokens = a.cache_page;
  p.grid.settings = a.settings.to_json(a.eval_kind);
  if (a.eval_kind == "needle") {
    if (!a.prompt.prompt.empty() || !a.prompt.prompt_file.empty() || !a.prompt.messages_file.empty() ||
        !a.prompts_dir.empty())
      throw UsageError(
          "a needle sweep generates its prompts (--lengths, --depths, --seed); drop "
          "--prompt/--prompt-file/--messages/--prompts");
    NeedleGrid needle{a.lengths, parse_depths(a.depths), a.seed.value_or(NeedleGrid{}.seed), a.settings.answer_tokens};
    p.grid.settings["lengths"] = needle.lengths;
    p.grid.settings["depths"] = needle.depths;
    p.grid.settings["seed"] = needle.seed;
    if (model) p.prompts = needle_prompts(*model, needle);
  } else if (a.eval_kind == "ruler") {
    if (!a.prompt.prompt.empty() || !a.prompt.prompt_file.empty() || !a.prompt.messages_file.empty() ||
        !a.prompts_dir.empty())
      throw UsageError("a RULER sweep generates its prompts (--length, --samples, --tasks, --seed); drop "
                       "--prompt/--prompt-file/--messages/--prompts");
    eval::parse_protocol(a.settings.protocol);
    eval::RulerSettings ruler = a.ruler;
    ruler.seed = a.seed.value_or(eval::RulerSettings{}.seed);
    p.grid.settings["length"] = ruler.length;
    p.grid.settings["samples"] = ruler.samples;
    p.grid.settings["seed"] = ruler.seed;
    p.grid.settings["tasks"] = ruler.tasks;
    p.grid.settings["haystack"] = a.haystack.empty() ? "sample_data/texts" : a.haystack;
    if (model) {
      ruler.essay = eval::ruler_essay(a.haystack);
      p.prompts = ruler_prompts(*model, ruler, !a.no_chat);
    }
  } else {
    p.prompts = load_prompts(a.prompt, a.prompts_dir, model);
    // Written only when set, so the grids of sweeps made before the option stay the same grids (resumable).
    if (a.prompt.no_parse_special) p.grid.settings["parse_special"] = false;
  }
  if (model) {
    p.grid.settings["model"] = model->path().filename().string();
    for (const auto& prompt : p.prompts) {
      p.grid.prompts.push_back(prompt.name);
      p.grid.prompt_digests.push_back(sha256_hex(prompt.text));
    }
  }
  return p;
}

// Child mode: cell indices on stdin, one JSON row per line on stdout.
int serve(const SweepArgs& a) {
  const model::Model model = a.model.load();
  Prepared p = prepare(a, &model);
  eval::Evaluator evaluator(model);
  eval::CellRunner runner(evaluator, p.grid, p.prompts, a.settings);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    std::size_t cell = 0;
    nlohmann::json out;
    try {
      cell = std::stoul(line);
      out = runner.run(cell).to_json();
    } catch (const std::exception& e) {
      out = {{"cell", cell}, {"error", e.what()}};
    }
    std::cout << out.dump() << std::endl;
  }
  return 0;
}

// The worker command lines: this program with the same flags minus the scheduling ones, plus --serve.
std::vector<WorkerCommand> worker_commands(const SweepArgs& a) {
  std::vector<std::string> args = {self_executable()};
  const auto& all = command_line();
  bool threads_given = false;
  for (std::size_t i = 1; i < all.size(); ++i) {
    const std::string& s = all[i];
    bool scheduling = false;
    for (const char* flag : {"--workers", "--ray", "--ray-python"}) {
      if (s == flag) ++i;  // its value follows
      scheduling = scheduling || s == flag || s.rfind(std::string(flag) + "=", 0) == 0;
    }
    if (scheduling) continue;
    threads_given = threads_given || s == "--threads" || s.rfind("--threads=", 0) == 0;
    args.push_back(s);
  }
  args.push_back("--serve");
  if (!a.ray_address.empty()) {
    std::vector<std::string> driver = {a.ray_python,
                                       (std::filesystem::path(KVSCOPE_SOURCE_DIR) / "tools" / "ray_sweep.py").string(),
                                       "--address", a.ray_address, "--"};
    driver.insert(driver.end(), args.begin(), args.end());
    return {{driver, true}};
  }
  if (!threads_given) {
    // N workers share the cores; each takes its share so they do not oversubscribe.
    const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
    args.push_back("--threads");
    args.push_back(std::to_string(std::max(1L, cores / a.workers)));
  }
  return std::vector<WorkerCommand>(a.workers, WorkerCommand{args, false});
}

// The metric per (policy, budget): mean over prompts, its 95 % bootstrap interval, and where the grid has the
// full cache, the paired difference to it (* when its interval excludes zero).
void print_summary(const std::vector<eval::CellSummary>& summary, const eval::SweepGrid& grid, const std::string& metric,
                   const std::string& baseline) {
  std::printf("%s, mean over %zu prompt(s) [95%% bootstrap interval]", metric.c_str(), grid.prompts.size());
  if (!baseline.empty()) std::printf("; vs %s: paired difference (* its interval excludes 0)", baseline.c_str());
  std::printf("\n");
  for (const auto& s : summary) {
    if (s.metric != metric) continue;
    std::printf("  %-28s %-8s %10.4g [%.4g, %.4g]", s.policy.c_str(), s.budget.c_str(), s.value.mean, s.value.low,
                s.value.high);
    if (s.difference)
      std::printf("   vs %s %+.4g [%+.4g, %+.4g]%s", baseline.c_str(), s.difference->mean, s.difference->low, s.difference->high,
                  s.difference->excludes_zero() ? " *" : "");
    std::printf("  n=%d\n", s.value.n);
  }
  const bool few = std::any_of(summary.begin(), summary.end(), [](const eval::CellSummary& s) { return s.value.n < 10; });
  if (few) std::printf("(fewer than 10 prompts per cell: a bootstrap interval that small says little)\n");
}

// The options only some kinds of sweep read (as `kvscope eval KIND` takes them). Given to a sweep of another kind
// they would be silently ignored, so they are refused.
void check_kind_options(const CLI::App& cmd, const std::string& kind) {
  static const std::vector<std::string> kPromptKinds = {"fidelity", "ppl"};
  static const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> kOptions = {
      {{"--prompt", "--prompt-file", "--messages", "--prompts", "--chat", "--system", "--chat-date", "--no-think",
        "--template-arg", "--no-parse-special", "--chat-template"},
       kPromptKinds},
      {{"--max-new-tokens", "--stop-at-end"}, {"fidelity"}},
      {{"--prompt-tokens", "--max-tokens"}, {"ppl"}},
      {{"--lengths", "--depths", "--answer-tokens"}, {"needle"}},
      {{"--seed"}, {"needle", "ruler"}},
      {{"--length", "--samples", "--tasks", "--haystack", "--protocol", "--no-chat"}, {"ruler"}},
  };
  for (const auto& [names, kinds] : kOptions) {
    if (std::find(kinds.begin(), kinds.end(), kind) != kinds.end()) continue;
    for (const auto& name : names) {
      if (cmd.count(name) == 0) continue;
      std::string which;
      for (const auto& k : kinds) which += (which.empty() ? "" : " and ") + k;
      throw UsageError(name + " is not an option of a " + kind + " sweep (" + which +
                       " sweeps read it, as `kvscope eval " + kinds.front() + "` does); drop it");
    }
  }
}

int run_sweep(SweepArgs a, const CLI::App& cmd) {
  a.settings.chat = !a.no_chat;
  eval::metric_names(a.eval_kind);  // an unknown kind fails before anything loads
  check_kind_options(cmd, a.eval_kind);
  if (a.out.empty()) throw UsageError("sweep needs --out DIR");
  if (a.workers < 1) throw UsageError("--workers must be at least 1");
  if (a.settings.stop_at_end && a.eval_kind != "fidelity")
    throw UsageError("--stop-at-end ends fidelity's full-cache continuation; a " + a.eval_kind + " sweep has none");
  // Flags, policy names, budgets, the prompt folder and --baseline, checked without the model.
  eval::baseline_policy(prepare(a, nullptr).grid, a.baseline);
  const std::string metric = a.metric.empty() ? default_metric(a.eval_kind) : a.metric;
  const auto& names = eval::metric_names(a.eval_kind);
  if (std::find(names.begin(), names.end(), metric) == names.end())
    throw UsageError("--metric '" + metric + "' is not a " + a.eval_kind + " metric");
  if (a.serve) return serve(a);

  const model::Model model = a.model.load();
  Prepared p = prepare(a, &model);
  eval::SweepStore store(a.out, p.grid);
  std::vector<std::size_t> pending;
  for (std::size_t i = 0; i < p.grid.size(); ++i)
    if (!store.done(i)) pending.push_back(i);
  pending = p.grid.run_order(std::move(pending));
  std::fprintf(stderr,
               "kvscope sweep: %zu cells (%zu prompts x %zu policies x %zu cache types x %zu budgets), %zu done, %zu "
               "to run -> %s\n",
               p.grid.size(), p.grid.prompts.size(), p.grid.policies.size(), p.grid.cache_type_count(),
               p.grid.budgets.size(), store.done_count(),
               pending.size(), a.out.c_str());
  ProgressLine progress("sweep", static_cast<long>(p.grid.size()), static_cast<long>(store.done_count()));
  int failures = 0;
  auto take = [&](const nlohmann::json& answer) {
    if (answer.contains("error")) {
      ++failures;
      progress.finish();
      std::fprintf(stderr, "kvscope sweep: cell %zu failed: %s\n", answer.value("cell", std::size_t{0}),
                   answer["error"].get<std::string>().c_str());
    } else {
      store.append(eval::SweepRow::from_json(answer));
    }
    progress.update(static_cast<long>(store.done_count() + failures));
  };
  if (!pending.empty() && a.workers == 1 && a.ray_address.empty()) {
    eval::Evaluator evaluator(model);
    eval::CellRunner runner(evaluator, p.grid, p.prompts, a.settings);
    for (std::size_t cell : pending) {
      nlohmann::json answer;
      try {
        answer = runner.run(cell).to_json();
      } catch (const UsageError& e) {
        answer = {{"cell", cell}, {"error", e.what()}};
      }
      take(answer);
    }
  } else if (!pending.empty()) {
    // Called for queued cells at every hand-out, so derived from the index alone (cell() parses the cache type).
    const auto locality = [&p](std::size_t cell) {
      const std::size_t group = p.grid.prefill_group(cell);
      return CellLocality{group / p.grid.cache_type_count(), group};
    };
    run_in_workers(worker_commands(a), pending, locality, take);
  }
  progress.finish();

#ifdef KVSCOPE_HAVE_GUI
  if (!store.rows().empty()) {
    const auto fig = viewers::quality_vs_budget(store.rows(), p.grid.series(), p.grid.budgets, metric,
                                                a.eval_kind + ": " + metric + " vs budget");
    for (const char* ext : {".png", ".svg"}) {
      const auto path = std::filesystem::path(a.out) / ("quality_" + metric + ext);
      viewers::export_figure(fig, path.string(), {}, Existing::Replace);  // the sweep's own folder, redrawn on resume
      std::fprintf(stderr, "kvscope sweep: wrote %s\n", path.c_str());
    }
  }
#endif
  if (!store.rows().empty()) {
    store.write_summary(a.baseline, eval::BootstrapSettings{});
    print_summary(eval::summarize(p.grid, store.rows(), {metric}, a.baseline), p.grid, metric,
                  eval::baseline_policy(p.grid, a.baseline));
    std::fprintf(stderr, "kvscope sweep: intervals in %s\n", store.summary_path().c_str());
    print_sweep_retention(p.grid, store.rows(), eval::BootstrapSettings{});
    for (const auto& path : write_sweep_retention(a.out, p.grid, store.rows(), eval::BootstrapSettings{}))
      std::fprintf(stderr, "kvscope sweep: wrote %s\n", path.c_str());
  }
  std::fprintf(stderr, "kvscope sweep: rows in %s and %s\n", store.csv_path().c_str(), store.hdf5_path().c_str());
  if (failures) {
    std::fprintf(stderr, "kvscope sweep: %d cell(s) failed (see above); run again to retry them\n", failures);
    return 1;
  }
  return 0;
}

}  // namespace

Command register_sweep(CLI::App& root) {
  auto a = std::make_shared<SweepArgs>();
  CLI::App* cmd =
      root.add_subcommand("sweep", "evaluate a grid of policies x budgets x prompts into a resumable CSV/HDF5 folder");
  a->model.add_to(cmd);
  a->prompt.add_to(cmd);
  cmd->add_option("--prompts", a->prompts_dir, "folder of prompt files (every file is one prompt)");
  cmd->add_option("--policies", a->policies,
                  "policy specs, comma-separated (parameters continue a spec: snapkv:window=32,kernel=7,h2o)")
      ->required();
  cmd->add_option(
      "--budgets", a->budgets,
      "budgets, comma-separated: 5%,10%,25% (shares round to the nearest token), token counts, or cr:R");
  cmd->add_option("--compression-ratios", a->compression_ratios,
                  "compression ratios, comma-separated, as kvpress states them (0.25,0.5: keep int(n * (1 - R)) "
                  "tokens); with --budgets too, both sets run");
  cmd->add_option("--cache-types", a->cache_types,
                  "KV cache types, comma-separated, a grid dimension (f32,f16,q8_0,q4_0,kivi2:group=32,residual=128, "
                  "q4_0:rot=hadamard for rows stored Hadamard-rotated; see --cache-type and --cache-rotation of "
                  "`kvscope generate`); rows, eval.h5 and grid.json carry each cell's type, and "
                  "summaries and figures draw one curve per policy and type ('snapkv @q8_0'). Default: f32 only");
  cmd->add_option("--cache-page", a->cache_page,
                  "also count every cell's cache in pages of N tokens per layer and KV head, at the end and at its "
                  "largest (cache_paged_bytes, cache_paged_peak_bytes columns; see --cache-page of `kvscope generate`)")
      ->check(kPositive);
  cmd->add_option("--eval", a->eval_kind, "fidelity, ppl, needle or ruler")->required();
  cmd->add_option("--out", a->out, "sweep folder (created; an existing sweep is resumed)");
  cmd->add_option("--metric", a->metric, "metric of the figure and summary (default: kl_mean, ppl or exact_match)");
  cmd->add_option("--max-new-tokens", a->settings.new_tokens, "fidelity: continuation tokens to score")
      ->check(kPositive);
  cmd->add_flag("--stop-at-end", a->settings.stop_at_end,
                "fidelity: end each full-cache continuation at its end-of-generation token (scored), as the "
                "window's runs do; by default every new token is scored, past an end token");
  cmd->add_option("--prompt-tokens", a->settings.prompt_tokens, "ppl: tokens run as the compressed prompt")
      ->check(kPositive);
  cmd->add_option("--max-tokens", a->settings.max_tokens, "ppl: cut each text to this many tokens (0 = all)")
      ->check(kNonNegative);
  cmd->add_option("--lengths", a->lengths, "needle: context lengths in tokens")
      ->delimiter(',')
      ->check(kPositive);
  cmd->add_option("--depths", a->depths, "needle: depths in percent")->delimiter(',');
  cmd->add_option("--seed", a->seed, "needle, ruler: seed of the generated cases");
  cmd->add_option("--answer-tokens", a->settings.answer_tokens, "needle: greedy answer length")
      ->check(kPositive);
  cmd->add_option("--length", a->ruler.length, "ruler: context length in the model's tokens")
      ->check(CLI::Range(256, 1 << 20));
  cmd->add_option("--samples", a->ruler.samples, "ruler: samples per task (at most 1000)")
      ->check(CLI::Range(1, eval::kMaxRulerSamples));
  cmd->add_option("--tasks", a->ruler.tasks, "ruler: tasks (default all; see `kvscope eval ruler --help`)")
      ->delimiter(',');
  cmd->add_option("--haystack", a->haystack, "ruler: text file for the essay haystacks (default sample_data/texts)");
  cmd->add_option("--protocol", a->settings.protocol, "ruler: query-aware or query-agnostic (see `kvscope eval ruler`)");
  cmd->add_flag("--no-chat", a->no_chat, "ruler: do not wrap prompts in the model's chat template");
  cmd->add_option("--baseline", a->baseline,
                  "policy of the grid the summary's paired differences are taken to (default: full, when in the grid)");
  cmd->add_option("--workers", a->workers, "local worker processes (each loads the model once)")
      ->check(kPositive);
  cmd->add_option("--ray", a->ray_address, "run each cell as a task on this Ray cluster (tools/ray_sweep.py)");
  cmd->add_option("--ray-python", a->ray_python, "Python with Ray installed, for --ray (default python3)");
  cmd->add_flag("--serve", a->serve, "worker mode: read cell indices on stdin, write JSON rows on stdout")->group("");
  return {cmd, [a, cmd]() { return run_sweep(*a, *cmd); }};
}

}  // namespace kvscope::app
