#include "viewers/pareto_plot.h"

#include <algorithm>
#include <cmath>

#include "core/common/error.h"
#include "core/eval/sweep_summary.h"

namespace kvscope::viewers {

bool higher_is_better(const std::string& metric) {
  static const std::vector<std::string> kHigher = {"top1_agreement", "agreeing_prefix", "score", "full_score",
                                                   "exact_match", "full_exact_match", "memory_saved"};
  return std::find(kHigher.begin(), kHigher.end(), metric) != kHigher.end();
}

std::string default_pareto_metric(const std::string& eval_kind) {
  if (eval_kind == "fidelity") return "kl_mean";
  if (eval_kind == "ruler") return "score";
  if (eval_kind == "needle") return "exact_match";
  return "ppl";
}

ParetoView pareto_points(const std::vector<eval::SweepRow>& rows, const std::string& metric,
                         const std::string& bytes_metric, const eval::BootstrapSettings& settings) {
  ParetoView view{metric, bytes_metric, higher_is_better(metric), {}};
  std::vector<std::string> series;
  std::vector<std::pair<std::string, std::string>> cells;
  for (const auto& r : rows) {
    if (std::find(series.begin(), series.end(), r.series()) == series.end()) series.push_back(r.series());
    if (std::find(cells.begin(), cells.end(), std::pair{r.series(), r.budget}) == cells.end())
      cells.emplace_back(r.series(), r.budget);
  }
  for (const auto& name : series) {
    std::vector<ParetoPoint> curve;
    for (const auto& [cell_series, budget] : cells) {
      if (cell_series != name) continue;
      const double bytes = eval::cell_mean(rows, name, budget, bytes_metric);
      const auto quality = eval::cell_interval(rows, name, budget, metric, settings);
      if (std::isnan(bytes) || !quality) continue;
      ParetoPoint p;
      p.series = name, p.budget = budget, p.bytes = bytes;
      p.quality = quality->mean, p.low = quality->low, p.high = quality->high, p.n = quality->n;
      const auto row = std::find_if(rows.begin(), rows.end(), [&](const eval::SweepRow& r) { return r.series() == name; });
      p.policy = row->policy, p.cache_type = row->cache_type;
      curve.push_back(std::move(p));
    }
    std::stable_sort(curve.begin(), curve.end(), [](const ParetoPoint& a, const ParetoPoint& b) { return a.bytes < b.bytes; });
    view.points.insert(view.points.end(), curve.begin(), curve.end());
  }
  if (view.points.empty())
    throw Error("no sweep row has both '" + metric + "' and '" + bytes_metric + "' to draw a Pareto view");
  const double sign = view.higher_is_better ? 1.0 : -1.0;
  for (auto& p : view.points) {
    p.on_front = std::none_of(view.points.begin(), view.points.end(), [&](const ParetoPoint& q) {
      const double gain = sign * (q.quality - p.quality);
      return q.bytes <= p.bytes && gain >= 0.0 && (q.bytes < p.bytes || gain > 0.0);
    });
  }
  return view;
}

namespace {
constexpr double kMiB = 1024.0 * 1024.0;
}  // namespace

const std::vector<BytesAxis>& pareto_bytes_axes() {
  static const std::vector<BytesAxis> axes = {{"cache_bytes", "cache bytes"},
                                              {"cache_peak_bytes", "peak cache bytes"},
                                              {"cache_paged_bytes", "paged cache bytes"},
                                              {"cache_paged_peak_bytes", "paged peak cache bytes"}};
  return axes;
}

std::string pareto_title(const std::string& eval_kind, const ParetoView& view) {
  std::string bytes = view.bytes_metric;
  for (const auto& axis : pareto_bytes_axes())
    if (view.bytes_metric == axis.metric) bytes = axis.label;
  return (eval_kind.empty() ? std::string("sweep") : eval_kind) + ": " + view.metric + " vs " + bytes;
}

const ParetoPoint* pareto_point_near(const ParetoView& view, double x, double y, double x_units_per_px,
                                     double y_units_per_px, double radius_px) {
  const ParetoPoint* best = nullptr;
  double best_d = radius_px * radius_px;
  for (const auto& p : view.points) {
    const double dx = (p.bytes / kMiB - x) / x_units_per_px, dy = (p.quality - y) / y_units_per_px;
    if (dx * dx + dy * dy <= best_d) best = &p, best_d = dx * dx + dy * dy;
  }
  return best;
}

Figure pareto_figure(const ParetoView& view, const std::string& title) {
  LinePlot plot;
  plot.title = title;
  plot.x_label = view.bytes_metric + " (MiB, mean over prompts)";
  plot.y_label = view.metric + (view.higher_is_better ? " (higher is better)" : " (lower is better)");
  plot.legend_outside = true;
  std::vector<std::string> order;
  for (const auto& p : view.points)
    if (std::find(order.begin(), order.end(), p.series) == order.end()) order.push_back(p.series);
  // A policy keeps its colour over cache types, a cache type its marker and dash over policies: a 4 x 4 grid's
  // sixteen curves all look different.
  const std::vector<SeriesStyle> styles = sweep_series_styles(order);
  for (std::size_t s = 0; s < order.size(); ++s) {
    LineSeries line;
    line.name = order[s];
    line.color = styles[s].color;
    line.marker = styles[s].marker;
    line.dash = styles[s].dash;
    for (const auto& p : view.points) {
      if (p.series != order[s]) continue;
      line.x.push_back(p.bytes / kMiB);
      line.y.push_back(p.quality);
      line.y_low.push_back(p.low);
      line.y_high.push_back(p.high);
    }
    plot.series.push_back(std::move(line));
  }
  // The front as markers over the curves, joined in order of bytes.
  std::vector<const ParetoPoint*> front;
  for (const auto& p : view.points)
    if (p.on_front) front.push_back(&p);
  std::sort(front.begin(), front.end(), [](const ParetoPoint* a, const ParetoPoint* b) { return a->bytes < b->bytes; });
  LineSeries marks;
  marks.name = "Pareto front";
  marks.kind = LineSeries::Kind::Markers;
  marks.color = kInkSeries;
  marks.marker = 0;  // rings around the curves' own markers, which stay visible inside them
  marks.marker_scale = 1.9;
  for (const ParetoPoint* p : front) {
    marks.x.push_back(p->bytes / kMiB);
    marks.y.push_back(p->quality);
  }
  plot.series.push_back(std::move(marks));
  Figure fig;
  fig.title = title;
  fig.parts.emplace_back(std::move(plot));
  return fig;
}

nlohmann::json pareto_json(const ParetoView& view) {
  nlohmann::json points = nlohmann::json::array(), front = nlohmann::json::array();
  std::vector<const ParetoPoint*> on_front;
  for (const auto& p : view.points) {
    const nlohmann::json j = {{"series", p.series}, {"budget", p.budget}, {"bytes", p.bytes}, {"quality", p.quality},
                              {"low", p.low},       {"high", p.high},     {"n", p.n},         {"on_front", p.on_front}};
    points.push_back(j);
    if (p.on_front) on_front.push_back(&p);
  }
  std::stable_sort(on_front.begin(), on_front.end(),
                   [](const ParetoPoint* a, const ParetoPoint* b) { return a->bytes < b->bytes; });
  for (const ParetoPoint* p : on_front)
    front.push_back({{"series", p->series}, {"budget", p->budget}, {"bytes", p->bytes}, {"quality", p->quality}});
  return {{"metric", view.metric},
          {"bytes_metric", view.bytes_metric},
          {"higher_is_better", view.higher_is_better},
          {"points", points},
          {"front", front}};
}

}  // namespace kvscope::viewers
