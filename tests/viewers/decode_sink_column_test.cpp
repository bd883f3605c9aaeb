// The attention panel (and `kvscope figure --view attention`, which draws the same plot) gives a decode map of a
// model with sink logits the sink's column after the last key, from the run's decode_attention_sink maps.
#include <catch2/catch.hpp>

#include "core/trace/live_trace.h"
#include "viewers/attention_heatmap.h"

using namespace kvscope;

namespace {

// One layer, one head, a 4-token prompt and 3 decode steps over 8 positions, decode rows at full resolution.
std::shared_ptr<const trace::RunTrace> decode_run(bool sinks, const std::vector<float>& shares) {
  trace::RunLayout layout;
  layout.name = "sinks";
  layout.n_layers = layout.n_heads = layout.n_kv_heads = 1;
  layout.head_dim = 4;
  layout.prompt_length = 4;
  layout.max_positions = 8;
  layout.decode_cols = 8;
  layout.decode_sink = sinks;
  trace::LiveTrace live(std::chrono::milliseconds(0));
  const int id = live.begin_run(layout);
  trace::StepRecord prefill;
  prefill.stats.seq_len = 4;
  live.append_step(id, std::move(prefill));
  for (int s = 0; s < static_cast<int>(shares.size()); ++s) {
    trace::StepRecord rec;
    rec.stats.phase = 1;
    rec.stats.step = s;
    rec.stats.seq_len = 5 + s;
    rec.decode_attention.assign(8, 0.0f);
    for (int k = 0; k < 5 + s; ++k) rec.decode_attention[static_cast<std::size_t>(k)] = (1.0f - shares[s]) / (5 + s);
    rec.decode_attention_sink = {shares[s]};
    live.append_step(id, std::move(rec));
  }
  live.end_run(id, {});
  return live.snapshot();
}

}  // namespace

TEST_CASE("a decode attention map of a model with sinks shows each row's sink share as its last column",
          "[viewers][sinks]") {
  const std::vector<float> shares = {0.5f, 0.25f, 0.75f};
  viewers::HeatmapPlot plot;
  std::string why;
  REQUIRE(viewers::attention_plot(*decode_run(true, shares), {}, true, false, viewers::ScaleKind::Linear,
                                  viewers::Colormap::Viridis, 512, plot, why));
  CHECK(plot.sink_column);
  REQUIRE(plot.map.rows == 3);
  REQUIRE(plot.map.cols == 9);  // 8 key positions, then the sink
  for (int s = 0; s < 3; ++s) CHECK(plot.map.at(s, 8) == shares[static_cast<std::size_t>(s)]);

  REQUIRE(viewers::attention_plot(*decode_run(false, shares), {}, true, false, viewers::ScaleKind::Linear,
                                  viewers::Colormap::Viridis, 512, plot, why));
  CHECK_FALSE(plot.sink_column);  // a model without sinks: the keys alone
  CHECK(plot.map.cols == 8);
}
