#include "viewers/retention_plot.h"

namespace kvscope::viewers {

std::optional<Figure> evidence_retention_by_layer(const std::vector<eval::SweepRow>& rows,
                                                  const std::vector<std::string>& policies, const std::string& budget,
                                                  const eval::BootstrapSettings& settings) {
  LinePlot plot;
  plot.title = "evidence kept at the first answer token, budget " + budget + " (bands: 95% bootstrap over samples)";
  plot.x_label = "layer";
  plot.y_label = "share of the evidence in the cache";
  plot.integer_x = true;
  plot.y_limits = std::array<double, 2>{0.0, 1.0};
  for (std::size_t p = 0; p < policies.size(); ++p) {
    std::vector<std::vector<double>> by_layer;  // [layer][sample]
    for (const auto& row : rows) {
      if (row.series() != policies[p] || row.budget != budget || row.evidence_layer_kept.empty()) continue;
      if (by_layer.size() < row.evidence_layer_kept.size()) by_layer.resize(row.evidence_layer_kept.size());
      for (std::size_t l = 0; l < row.evidence_layer_kept.size(); ++l)
        by_layer[l].push_back(row.evidence_layer_kept[l]);
    }
    if (by_layer.empty()) continue;
    LineSeries s;
    s.name = policies[p] + " (n=" + std::to_string(by_layer.front().size()) + ")";
    s.color = static_cast<int>(p);  // a policy keeps its colour across budgets
    for (std::size_t l = 0; l < by_layer.size(); ++l) {
      const eval::Interval ci = eval::bootstrap_mean(by_layer[l], settings);
      s.x.push_back(static_cast<double>(l));
      s.y.push_back(ci.mean);
      s.y_low.push_back(ci.low);
      s.y_high.push_back(ci.high);
    }
    plot.series.push_back(std::move(s));
  }
  if (plot.series.empty()) return std::nullopt;
  plot.legend_outside = plot.series.size() > 4;
  Figure fig;
  fig.title = "evidence retention by layer at " + budget;
  fig.parts.push_back(std::move(plot));
  return fig;
}

}  // namespace kvscope::viewers
