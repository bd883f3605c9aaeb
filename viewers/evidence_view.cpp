#include "viewers/evidence_view.h"

#include <cstdio>

#include "core/eval/evidence_retention.h"
#include "core/trace/evidence_in_cache.h"

namespace kvscope::viewers {

Figure evidence_figure(const trace::RunTrace& run, const std::vector<eval::EvidenceSpan>& evidence,
                       int first_answer_step) {
  const std::vector<int> positions = eval::evidence_positions(evidence);
  const eval::EvidenceRetention at_answer = trace::evidence_in_cache(run, positions, first_answer_step);
  const std::vector<std::vector<double>> by_step = trace::evidence_kept_by_step(run, positions);
  char buf[160];

  HeatmapPlot map;
  trace::Map2D& m = map.map;
  m.rows = m.source_rows = run.n_layers;
  m.cols = m.source_cols = static_cast<int>(by_step.size());
  m.values.assign(static_cast<std::size_t>(m.rows) * m.cols, 0.0f);
  for (int s = 0; s < m.cols; ++s)
    for (int l = 0; l < m.rows; ++l)
      m.values[static_cast<std::size_t>(l) * m.cols + s] =
          static_cast<float>(by_step[static_cast<std::size_t>(s)][static_cast<std::size_t>(l)]);
  map.scale = {ScaleKind::Linear, 0.0f, 1.0f};
  map.cmap = Colormap::Viridis;
  map.colorbar_label = "share of evidence kept";
  std::snprintf(buf, sizeof buf, "%s: evidence kept (%zu tokens)", run.name.c_str(),
                positions.size());
  map.title = buf;
  // The share is read at the end of each step, so the line sits where the first answer token's step ends.
  map.x_label = "step; line: end of the first answer's step";
  map.y_label = "layer";
  map.marks_x = {static_cast<double>(first_answer_step) + 1.0};
  std::snprintf(buf, sizeof buf, "%p", static_cast<const void*>(&run));
  map.signature =
      run.name + buf + "|evidence|" + std::to_string(run.n_steps()) + "|" + std::to_string(positions.size());

  LinePlot bars;
  std::snprintf(buf, sizeof buf, "at the first answer token (step %d): mean %.2f", first_answer_step,
                at_answer.mean);
  bars.title = buf;
  bars.x_label = "layer";
  bars.y_label = "share of evidence kept";
  bars.integer_x = true;
  bars.y_limits = std::array<double, 2>{0.0, 1.05};
  LineSeries s;
  s.name = "evidence kept (mean over KV heads)";
  s.kind = LineSeries::Kind::Bars;
  for (int l = 0; l < run.n_layers; ++l) {
    s.x.push_back(l);
    s.y.push_back(at_answer.layer_kept[static_cast<std::size_t>(l)]);
  }
  bars.series.push_back(std::move(s));

  Figure f;
  f.title = "evidence";
  f.parts.push_back(std::move(map));
  f.parts.push_back(std::move(bars));
  return f;
}

}  // namespace kvscope::viewers
