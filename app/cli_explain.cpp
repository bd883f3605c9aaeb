// kvscope explain: why one benchmark sample failed (issue 35), from its per-sample trace (`eval ... --traces DIR`,
// or any trace holding a policy's run beside the full cache's with --record qk=on): the references and both
// predictions, the evidence and how much of it each layer kept when the answer started, the (layer, head) pairs
// whose full-cache attention fell most on what the policy had evicted (core/trace/evidence_blame.h), and where
// each evidence token went.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "app/subcommands.h"
#include "core/common/error.h"
#include "core/eval/evidence_retention.h"
#include "core/trace/eval_run_info.h"
#include "core/trace/evidence_blame.h"
#include "core/trace/evidence_fate.h"
#include "core/trace/evidence_in_cache.h"
#include "core/trace/hdf5_reader.h"
#include "core/trace/run_evidence.h"
#include "core/trace/trace_probe.h"

namespace kvscope::app {

namespace {

constexpr int kLargest = 5;

struct ExplainArgs {
  std::string trace, run;
  bool json = false;
};

// The decoded pieces of positions [first, last]: the prompt's, then the appended tokens'.
std::string token_text(const trace::RunTrace& run, int first, int last) {
  std::string text;
  for (int p = first; p <= last; ++p) {
    if (p < static_cast<int>(run.prompt_strings.size()))
      text += run.prompt_strings[static_cast<std::size_t>(p)];
    else if (p - run.prompt_length < static_cast<int>(run.generated_strings.size()) && p >= run.prompt_length)
      text += run.generated_strings[static_cast<std::size_t>(p - run.prompt_length)];
  }
  return text;
}

std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

nlohmann::json number(double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); }

struct Explanation {
  const trace::RunTrace* policy = nullptr;
  const trace::RunTrace* full = nullptr;
  trace::EvalRunInfo policy_info, full_info;
  std::optional<std::vector<eval::EvidenceSpan>> evidence;
  std::optional<eval::EvidenceRetention> retention;
  std::vector<trace::EvidenceFate> fate;
  trace::EvidenceBlame blame;
};

nlohmann::json to_json(const std::string& file, const Explanation& x) {
  nlohmann::json j;
  j["trace"] = file;
  j["run"] = x.policy->name;
  j["reference_run"] = x.full->name;
  j["task"] = x.policy_info.task;
  j["sample"] = x.policy_info.sample ? nlohmann::json(*x.policy_info.sample) : nlohmann::json(nullptr);
  j["score"] = x.policy_info.score ? number(*x.policy_info.score) : nlohmann::json(nullptr);
  j["full_score"] = x.full_info.score ? number(*x.full_info.score) : nlohmann::json(nullptr);
  j["references"] = x.policy_info.references;
  j["prediction"] =
      x.policy_info.from_evaluation ? x.policy_info.prediction : trace::answer_text(*x.policy, x.policy_info);
  j["full_prediction"] =
      x.full_info.from_evaluation ? x.full_info.prediction : trace::answer_text(*x.full, x.full_info);
  j["prompt_tokens"] = x.policy_info.prompt_tokens;
  j["appended_tokens"] = x.policy_info.appended_tokens;
  j["first_answer_step"] = x.policy_info.first_answer_step;
  j["evidence_known"] = x.evidence.has_value();
  j["evidence"] = nullptr;
  j["retention"] = nullptr;
  j["evidence_fate"] = nullptr;
  if (x.evidence) {
    j["evidence"] = nlohmann::json::array();
    for (const auto& s : *x.evidence)
      j["evidence"].push_back(
          {{"first", s.first}, {"last", s.last}, {"kind", s.kind}, {"text", token_text(*x.policy, s.first, s.last)}});
    const eval::EvidenceRetention& r = *x.retention;
    j["retention"] = {{"step", x.policy_info.first_answer_step},
                      {"mean", r.mean},
                      {"min_layer", r.min_layer},
                      {"min_layer_kept", r.min_layer_kept},
                      {"layers_mostly_lost", r.layers_mostly_lost},
                      {"mostly_lost", r.mostly_lost()},
                      {"layer_kept", r.layer_kept},
                      {"kept", r.kept}};
    j["evidence_fate"] = nlohmann::json::array();
    for (const auto& f : x.fate) {
      nlohmann::json departures = nlohmann::json::array();
      for (const auto& d : f.departures)
        departures.push_back({{"layer", d.layer},
                              {"kv_head", d.kv_head},
                              {"step", d.step},
                              {"action", trace::event_action_name(d.action)},
                              {"merge_target", d.merge_target}});
      j["evidence_fate"].push_back({{"position", f.position},
                                    {"kind", f.kind},
                                    {"text", token_text(*x.policy, f.position, f.position)},
                                    {"caches", f.caches},
                                    {"kept", f.kept},
                                    {"evicted", f.evicted()},
                                    {"merged", f.merged()},
                                    {"departures", departures}});
    }
  }
  const trace::EvidenceBlame& b = x.blame;
  auto head_json = [](const trace::HeadBlame& h) {
    return nlohmann::json{{"layer", h.layer},
                          {"head", h.head},
                          {"lost_mass", number(h.lost_mass)},
                          {"evidence_mass", number(h.evidence_mass)},
                          {"evidence_lost_mass", number(h.evidence_lost_mass)}};
  };
  nlohmann::json heads = nlohmann::json::array(), largest = nlohmann::json::array();
  for (const auto& h : b.heads) heads.push_back(head_json(h));
  for (const auto& h : b.largest(kLargest)) largest.push_back(head_json(h));
  j["blame"] = {{"divergence", b.divergence},
                {"diverged", b.diverged},
                {"query", b.query},
                {"mask_step", b.mask_step},
                {"mean_lost_mass", number(b.mean_lost_mass)},
                {"max_lost_mass", number(b.max_lost_mass)},
                {"n_lost", b.n_lost},
                {"layers_without_qk", b.layers_without_qk},
                {"largest", largest},
                {"heads", heads}};
  return j;
}

std::string score_text(const std::optional<double>& s) {
  if (!s) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", *s);
  return buf;
}

void print_text(const std::string& file, const Explanation& x) {
  const trace::EvalRunInfo& pi = x.policy_info;
  std::printf("%s: run %s against the full cache's run %s\n", file.c_str(), x.policy->name.c_str(),
              x.full->name.c_str());
  if (pi.from_evaluation)
    std::printf("sample %s #%s   score %s (full cache %s)\n", pi.task.empty() ? "?" : pi.task.c_str(),
                pi.sample ? std::to_string(*pi.sample).c_str() : "?", score_text(pi.score).c_str(),
                score_text(x.full_info.score).c_str());
  else
    std::printf(
        "not a trace from an evaluation (no eval_* attributes): no score or references; the answer is read as starting "
        "after the prompt\n");
  if (!pi.references.empty()) {
    std::printf("references:");
    for (const auto& r : pi.references) std::printf(" %s", quoted(r).c_str());
    std::printf("\n");
  }
  std::printf("prediction (%s): %s\n", x.policy->name.c_str(),
              quoted(pi.from_evaluation ? pi.prediction : trace::answer_text(*x.policy, pi)).c_str());
  std::printf(
      "prediction (%s): %s\n", x.full->name.c_str(),
      quoted(x.full_info.from_evaluation ? x.full_info.prediction : trace::answer_text(*x.full, x.full_info)).c_str());

  if (!x.evidence) {
    std::printf("\nevidence: unknown (the run has no evidence/ group); blame below covers every evicted token\n");
  } else {
    std::printf("\nevidence: %zu span(s)\n", x.evidence->size());
    for (const auto& s : *x.evidence)
      std::printf("  [%d, %d] %-13s %s\n", s.first, s.last, s.kind.c_str(),
                  quoted(token_text(*x.policy, s.first, s.last)).c_str());
    const eval::EvidenceRetention& r = *x.retention;
    std::printf(
        "evidence kept when the first answer token was sampled (step %d): mean %.3f; least in layer %d (%.3f); "
        "%d of %zu layers kept under half%s\n",
        pi.first_answer_step, r.mean, r.min_layer, r.min_layer_kept, r.layers_mostly_lost, r.layer_kept.size(),
        r.mostly_lost() ? " (mostly lost)" : "");
    std::printf("  by layer:");
    for (std::size_t l = 0; l < r.layer_kept.size(); ++l)
      std::printf("%s %zu:%.2f", l % 10 == 0 && l ? "\n           " : "", l, r.layer_kept[l]);
    std::printf("\n");
  }

  const trace::EvidenceBlame& b = x.blame;
  std::printf("\n");
  if (b.diverged) {
    const auto pa = trace::answer_ids(*x.policy, pi), fa = trace::answer_ids(*x.full, x.full_info);
    auto piece = [](const trace::RunTrace& run, const trace::EvalRunInfo& info, int t, std::size_t n) {
      const std::size_t i = static_cast<std::size_t>(info.appended_tokens + t);
      return static_cast<std::size_t>(t) < n && i < run.generated_strings.size() ? quoted(run.generated_strings[i])
                                                                                 : std::string("(ended)");
    };
    std::printf("the answers part at answer token %d: %s (%s) vs %s (%s)\n", b.divergence,
                piece(*x.policy, pi, b.divergence, pa.size()).c_str(), x.policy->name.c_str(),
                piece(*x.full, x.full_info, b.divergence, fa.size()).c_str(), x.full->name.c_str());
  } else {
    std::printf("the answers agree token for token: blame is taken at the first answer token\n");
  }
  std::printf(
      "attention the full cache's query at position %d paid to tokens %s no longer held at the end of its step %d: "
      "mean %.4f, "
      "max %.4f over (layer, head)\n",
      b.query, x.policy->name.c_str(), b.mask_step, b.mean_lost_mass, b.max_lost_mass);
  if (!b.layers_without_qk.empty())
    std::printf("  (layers %s left out: %s recorded no queries and keys of them, --record qk=layers:%s)\n",
                trace::format_layer_list(b.layers_without_qk).c_str(), x.full->name.c_str(), x.full->qk_layers_text().c_str());
  std::printf("largest lost attention (layer, head):%s\n",
              x.evidence ? "   lost    on evidence   evidence lost" : "   lost");
  for (const auto& h : b.largest(kLargest)) {
    std::printf("  layer %2d head %2d:           %.4f", h.layer, h.head, h.lost_mass);
    if (x.evidence) std::printf("   %.4f        %.4f", h.evidence_mass, h.evidence_lost_mass);
    std::printf("\n");
  }

  if (x.evidence) {
    std::printf("\nwhere the evidence went (by step %d):\n", pi.first_answer_step);
    for (const auto& f : x.fate) {
      std::printf("  %5d %-13s %-16s kept in %d of %d caches", f.position, f.kind.c_str(),
                  quoted(token_text(*x.policy, f.position, f.position)).c_str(), f.kept, f.caches);
      if (!f.departures.empty()) {
        const auto& d = f.departures.front();
        std::printf("; evicted in %d, merged in %d; first left at step %d (layer %d, kv head %d, %s", f.evicted(),
                    f.merged(), d.step, d.layer, d.kv_head, trace::event_action_name(d.action));
        if (d.action == trace::EventAction::Merged) std::printf(" into %d", d.merge_target);
        std::printf(")");
        std::set<int> targets;
        for (const auto& e : f.departures)
          if (e.action == trace::EventAction::Merged) targets.insert(e.merge_target);
        if (!targets.empty()) {
          std::printf("; merged into");
          for (int t : targets) std::printf(" %d", t);
        }
      }
      std::printf("\n");
    }
  }
}

}  // namespace

Command register_explain(CLI::App& root) {
  auto a = std::make_shared<ExplainArgs>();
  CLI::App* cmd =
      root.add_subcommand("explain",
                          "why one benchmark sample failed: its evidence, what the policy evicted and where the "
                          "full cache's attention went (a per-sample trace with --record qk=on)");
  cmd->add_option("trace", a->trace, "HDF5 trace holding the policy's run and the full cache's run of one sample")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--run", a->run,
                  "the policy's run (default: the run whose eval_role is policy, else the first that is not full)");
  cmd->add_flag("--json", a->json, "print everything as one JSON object (every (layer, head)'s masses included)");
  return {cmd, [a]() {
            trace::probe_trace(a->trace);
            trace::ReadOptions options;
            options.maps = false;
            const trace::TraceView view = trace::read_trace(a->trace, options);
            for (const auto& w : view.warnings) std::fprintf(stderr, "kvscope explain: warning: %s\n", w.c_str());
            Explanation x;
            if (a->run.empty()) {
              x.policy = &trace::default_policy_run(view);
            } else {
              x.policy = view.find(a->run);
              if (!x.policy) {
                std::string names;
                for (const auto& r : view.runs) names += (names.empty() ? "" : ", ") + r->name;
                throw UsageError("no run '" + a->run + "' in '" + a->trace + "' (runs: " + names + ")");
              }
            }
            x.full = &trace::reference_run(view, *x.policy);
            x.policy_info = trace::eval_run_info(*x.policy);
            x.full_info = trace::eval_run_info(*x.full);
            x.evidence = trace::read_run_evidence(a->trace, x.policy->name);
            std::vector<int> positions;
            if (x.evidence) {
              positions = eval::evidence_positions(*x.evidence);
              x.retention = trace::evidence_in_cache(*x.policy, positions, x.policy_info.first_answer_step);
              x.fate = trace::evidence_fate(*x.policy, *x.evidence, x.policy_info.first_answer_step);
            }
            x.blame = trace::evidence_blame(*x.policy, x.policy_info, *x.full, x.full_info, positions);
            if (a->json)
              std::cout << to_json(a->trace, x).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
            else
              print_text(a->trace, x);
            return 0;
          }};
}

}  // namespace kvscope::app
