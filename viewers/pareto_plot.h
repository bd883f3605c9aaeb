#pragma once
// "Quantize or evict?" drawn: a sweep's quality (fidelity KL or top-1, RULER score, ...) against the bytes its
// cache really held (the cell's mean over prompts of cache_bytes at the end of the run, or cache_peak_bytes, as
// allocated: payload, scales, zero points, full-precision residual),
// one curve per (policy, cache type) over the budgets, with the quality's bootstrap interval, and the Pareto
// front marked: the cells no other cell beats on both (as few bytes or fewer and as good or better, one of them
// strictly). The front is also written as data (pareto_json) beside the picture.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/eval/bootstrap.h"
#include "core/eval/sweep_store.h"
#include "viewers/figure.h"

namespace kvscope::viewers {

struct ParetoPoint {
  std::string series, budget;  // series: "policy" or "policy @cache_type" (SweepRow::series)
  std::string policy, cache_type;  // the series' parts (cache_type empty in a sweep without cache types)
  double bytes = 0.0;          // mean of bytes_metric over the cell's prompts
  double quality = 0.0, low = 0.0, high = 0.0;  // mean and bootstrap interval of the metric
  int n = 0;
  bool on_front = false;
};

struct ParetoView {
  std::string metric, bytes_metric;
  bool higher_is_better = false;
  std::vector<ParetoPoint> points;  // series by first appearance, each by increasing bytes
};

// The bytes a Pareto view can be drawn against, with their labels: cache_bytes (at the end, after evicting),
// cache_peak_bytes (the most the cache held), and from a sweep made with --cache-page, cache_paged_bytes and
// cache_paged_peak_bytes (the same in N-token pages, as a paged serving engine allocates them).
struct BytesAxis {
  const char* metric;
  const char* label;
};
const std::vector<BytesAxis>& pareto_bytes_axes();

// Whether a larger value of `metric` is better (top-1 agreement, scores, exact match) or worse (KL, perplexity,
// log-prob gap, NMSE).
bool higher_is_better(const std::string& metric);
// The metric a kind's Pareto view plots by default: fidelity kl_mean, ruler score, needle exact_match, ppl ppl.
std::string default_pareto_metric(const std::string& eval_kind);

// Throws Error when no row has both metrics.
ParetoView pareto_points(const std::vector<eval::SweepRow>& rows, const std::string& metric,
                         const std::string& bytes_metric = "cache_bytes",
                         const eval::BootstrapSettings& settings = {});
Figure pareto_figure(const ParetoView& view, const std::string& title);
// The title `kvscope figure --view pareto` and the Quality panel give a sweep's Pareto figure: "fidelity: kl_mean vs
// cache bytes" ("sweep: ..." when the kind is unknown).
std::string pareto_title(const std::string& eval_kind, const ParetoView& view);
// The point of `view` nearest (x MiB, y) within `radius_px` pixels, at the plot's scale in units per pixel; null when
// none is that near (the Quality panel's read-out).
const ParetoPoint* pareto_point_near(const ParetoView& view, double x, double y, double x_units_per_px,
                                     double y_units_per_px, double radius_px = 8.0);
// {"metric", "bytes_metric", "higher_is_better", "points": [{series, budget, bytes, quality, low, high, n,
// on_front}], "front": [the points on the front, by increasing bytes]}.
nlohmann::json pareto_json(const ParetoView& view);

}  // namespace kvscope::viewers
