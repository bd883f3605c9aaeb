// kvscope figure: render one view of a recorded trace to PNG (or SVG for line/bar views) without a
// display: the GUI's own figure builders, laid out by ImPlot in an offscreen context and rasterised in
// software.
#include <algorithm>
#include <cstdio>

#include "app/number_checks.h"
#include "app/subcommands.h"
#include "core/common/atomic_file.h"
#include "core/common/error.h"
#include "core/common/output_is_input.h"
#ifdef KVSCOPE_HAVE_GUI
#include "core/eval/sweep_file.h"
#include "core/trace/eval_run_info.h"
#include "core/trace/hdf5_reader.h"
#include "core/trace/run_evidence.h"
#include "core/trace/trace_probe.h"
#include "viewers/figure_export.h"
#include "viewers/figure_size.h"
#include "viewers/pareto_plot.h"
#include "viewers/script.h"
#include "viewers/views.h"
#endif

namespace kvscope::app {

#ifdef KVSCOPE_HAVE_GUI
namespace {

struct FigureArgs {
  std::string trace, view = "attention", out, run, size, scale = "log", cmap = "viridis", stat, series, queries, keys,
      style = "kvscope", metric, bytes = "cache_bytes";
  std::vector<std::string> runs;
  int layer = 0, head = 0, kv_head = 0, step = -1, token = -1, width = 1200, height = 800;
  float font = 0.0f;
  double dpi = 300;
  bool decode = false, values = false, aggregate = false, dark = false, force = false;
};

// A sweep's quality against its cache's bytes, and the front beside the picture as data.
std::vector<std::string> bytes_axis_names() {
  std::vector<std::string> names;
  for (const auto& axis : viewers::pareto_bytes_axes()) names.emplace_back(axis.metric);
  return names;
}

int pareto(const FigureArgs& a) {
  const eval::SweepTable table = eval::open_sweep_file(a.trace);
  const std::string metric = a.metric.empty() ? viewers::default_pareto_metric(table.eval_kind) : a.metric;
  if (std::find(table.metrics.begin(), table.metrics.end(), metric) == table.metrics.end())
    throw UsageError("--metric '" + metric + "' is not a column of the sweep '" + table.path.string() + "'");
  const viewers::ParetoView points = viewers::pareto_points(table.rows, metric, a.bytes);
  const viewers::Figure fig = viewers::pareto_figure(points, viewers::pareto_title(table.eval_kind, points));
  const std::string sidecar = a.out + ".front.json";
  refuse_output_that_is_input({"--out", sidecar}, {{"sweep", a.trace}});
  check_output_path(sidecar, existing_policy(a.force), "Pareto front");
  viewers::ExportOptions e = viewers::sized_export(fig, a.size, viewers::parse_figure_look(a.style), a.dpi, a.font);
  e.dark = a.dark;
  viewers::export_figure(fig, a.out, e, existing_policy(a.force));
  AtomicFile front(sidecar, existing_policy(a.force), "Pareto front");
  front.write(viewers::pareto_json(points).dump(2) + "\n");
  front.commit();
  std::printf("%s\n%s\n", a.out.c_str(), sidecar.c_str());
  return 0;
}

}  // namespace
#endif

Command register_figure(CLI::App& root) {
  CLI::App* cmd = root.add_subcommand("figure", "render a view of an HDF5 trace to PNG, SVG or PDF (no display needed)");
#ifdef KVSCOPE_HAVE_GUI
  auto a = std::make_shared<FigureArgs>();
  cmd->add_option("trace", a->trace, "HDF5 trace file (--view pareto: a sweep folder, its eval.h5 or rows.csv)")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_option("--view", a->view,
                  "attention, similarity, layer_stats, budget, timeline, summary, compare, evidence, router (mixture-of-experts "
                  "runs: the router's weights per token in --layer, and the experts shared with a full-cache run of "
                  "the same prompt in every layer); pareto (of a "
                  "sweep: quality against the cache's real bytes, one curve per policy and cache type, the Pareto "
                  "front marked and written to OUT.front.json)");
  cmd->add_option("--metric", a->metric,
                  "pareto: the quality metric (default: kl_mean for fidelity, score for ruler, exact_match for needle)");
  cmd->add_option("--bytes", a->bytes,
                  "pareto: the bytes axis: cache_bytes (default: what the cache holds at the end, after its "
                  "evictions), cache_peak_bytes (the most it held, often the prefill before a policy evicts), or of a "
                  "sweep made with --cache-page, cache_paged_bytes and cache_paged_peak_bytes (the same in pages)")
      ->check(CLI::IsMember(bytes_axis_names()));
  cmd->add_option("--out", a->out, "output file: .png, .svg or .pdf (vector, maps embedded as pictures)")->required();
  cmd->add_flag("--force", a->force,
                "replace an existing --out file (a link at --out is replaced, never written through)");
  cmd->add_option("--run", a->run, "run name in the trace (default: the first; evidence: the policy's run)");
  cmd->add_option("--runs", a->runs, "compare: runs to show, the first is the reference")->delimiter(',');
  cmd->add_option("--layer", a->layer, "layer")->check(kNonNegative);
  cmd->add_option("--head", a->head, "query head")->check(kNonNegative);
  cmd->add_option("--kv-head", a->kv_head, "KV head (similarity, timeline)")->check(kNonNegative);
  cmd->add_option("--step", a->step, "step whose kept set marks the keys (-1: last)");
  cmd->add_option("--token", a->token, "position to mark with guides (-1: none)");
  cmd->add_option("--queries", a->queries,
                  "attention: query positions A:B (B excluded) rebuilt exactly from the run's q/k (--record qk=on); "
                  "pooled only where a pixel covers several tokens");
  cmd->add_option("--keys", a->keys, "attention: key positions C:D (D excluded), as --queries");
  cmd->add_flag("--decode", a->decode, "attention/compare: decode rows instead of the prefill map");
  cmd->add_flag("--values", a->values, "similarity: value vectors instead of keys");
  cmd->add_flag("--all-caches", a->aggregate, "timeline: share of all (layer, KV head) caches holding each position");
  cmd->add_option("--stat", a->stat, "layer_stats: statistic (default: the first recorded)");
  cmd->add_option("--series", a->series, "budget: diagnostic series (default: final budgets)");
  cmd->add_option("--scale", a->scale, "colour scale: log or linear")->check(CLI::IsMember({"log", "linear"}));
  cmd->add_option("--cmap", a->cmap, "colormap: viridis, magma, inferno, greys")
      ->check(CLI::IsMember({"viridis", "magma", "inferno", "greys"}));
  cmd->add_option("--size", a->size,
                  "column (3.3 in wide), page (7 in), WIDTHxHEIGHT pixels or WxHin inches (default 1200x800); "
                  "column and page are as tall as the view needs, with 9 pt text");
  cmd->add_option("--dpi", a->dpi, "pixels per inch for --size and a PDF's page (default 300)")->check(CLI::Range(50.0, 1200.0));
  cmd->add_option("--font", a->font, "font size in pixels (default: height / 50, or the --size or --style size in points)")
      ->check(CLI::Range(6.0f, 200.0f));
  cmd->add_option("--style", a->style, "kvscope (the window's colours) or matplotlib (its defaults: tab10, 10 pt, no grid)")
      ->check(CLI::IsMember({"kvscope", "matplotlib"}));
  cmd->add_flag("--dark", a->dark, "dark background, as in the window");
  return {cmd, [a]() {
            // The size is checked before the trace is read; its height may follow the view (sized_export).
            const viewers::FigureSize size = a->size.empty() ? viewers::FigureSize{} : viewers::parse_figure_size(a->size, a->dpi);
            a->width = size.width, a->height = size.height;
            refuse_output_that_is_input({"--out", a->out}, {{"trace", a->trace}});
            check_output_path(a->out, existing_policy(a->force), "figure");
            if (a->view == "pareto") return pareto(*a);
            if (!a->metric.empty() || a->bytes != "cache_bytes")
              throw UsageError("--metric and --bytes belong to --view pareto, not '" + a->view + "'");
            trace::probe_trace(a->trace);
            trace::TraceView view = trace::read_trace(a->trace);
            for (const auto& w : view.warnings) std::fprintf(stderr, "kvscope figure: warning: %s\n", w.c_str());
            if (view.runs.empty()) throw Error("trace '" + a->trace + "' has no runs");
            viewers::AppState state;
            for (const auto& r : view.runs)
              state.runs.push_back({r, a->trace + "#" + r->name, a->trace, false, nullptr, nullptr});
            state.active = 0;
            if (!a->run.empty()) {
              state.active = -1;
              std::string names;
              for (int i = 0; i < static_cast<int>(view.runs.size()); ++i) {
                names += (names.empty() ? "" : ", ") + view.runs[i]->name;
                if (view.runs[i]->name == a->run) state.active = i;
              }
              if (state.active < 0) throw UsageError("no run '" + a->run + "' in '" + a->trace + "' (runs: " + names + ")");
            }
            viewers::ViewOptions o;
            o.layer = a->layer, o.head = a->head, o.kv_head = a->kv_head, o.step = a->step, o.token = a->token;
            o.decode = a->decode, o.values = a->values, o.aggregate = a->aggregate;
            o.stat = a->stat, o.series = a->series, o.runs = a->runs;
            if (!a->queries.empty()) o.queries = viewers::parse_position_range("--queries", a->queries);
            if (!a->keys.empty()) o.keys = viewers::parse_position_range("--keys", a->keys);
            if ((o.queries || o.keys) && a->view != "attention")
              throw UsageError("--queries/--keys belong to --view attention, not '" + a->view + "'");
            if (a->view == "evidence") {
              // An evaluation's trace holds the full cache's run beside the policy's: the view is about the policy's.
              if (a->run.empty())
                for (int i = 0; i < static_cast<int>(view.runs.size()); ++i)
                  if (view.runs[i].get() == &trace::default_policy_run(view)) state.active = i;
              const trace::RunTrace& run = *view.runs[static_cast<std::size_t>(state.active)];
              o.evidence = trace::read_run_evidence(a->trace, run.name);
              o.first_answer_step = trace::eval_run_info(run).first_answer_step;
            }
            o.max_rows = a->height, o.max_cols = a->width;
            o.scale = a->scale == "log" ? viewers::ScaleKind::Log : viewers::ScaleKind::Linear;
            for (viewers::Colormap c : viewers::kAllColormaps)
              if (a->cmap == viewers::colormap_name(c)) o.cmap = c;
            const viewers::Figure fig = viewers::view_figure(state, a->view, o);
            viewers::ExportOptions e = viewers::sized_export(fig, a->size, viewers::parse_figure_look(a->style), a->dpi, a->font);
            e.dark = a->dark;
            viewers::export_figure(fig, a->out, e, existing_policy(a->force));
            std::printf("%s\n", a->out.c_str());
            return 0;
          }};
#else
  cmd->allow_extras();
  return {cmd, []() -> int {
            throw Error("this kvscope was built without the GUI libraries, which `figure` shares (run "
                        "scripts/setup_deps.sh and rebuild)");
          }};
#endif
}

}  // namespace kvscope::app
