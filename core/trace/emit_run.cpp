#include "core/trace/emit_run.h"

#include <algorithm>

#include "core/common/error.h"
#include "core/trace/trace_names.h"

namespace kvscope::trace {

void emit_run(const RunTrace& run, TraceSink& sink, const std::string& name) {
  const int max_positions = !run.kept_mask.empty() ? run.kept_mask.front().n_positions
                                                   : run.prompt_length + run.n_generated();
  const Map2D* first_decode = run.decode_attention_map(0, 0);

  RunLayout layout;
  layout.name = name.empty() ? run.name : name;
  // Every attribute at the start: a sink stores those of begin_run and end_run alike.
  layout.metadata = run.metadata;
  layout.n_layers = run.n_layers;
  layout.n_heads = run.n_heads;
  layout.n_kv_heads = run.n_kv_heads;
  layout.head_dim = run.head_dim;
  layout.prompt_length = run.prompt_length;
  layout.max_positions = max_positions;
  layout.prompt_ids = run.prompt_ids;
  layout.prompt_strings = run.prompt_strings;
  if (first_decode) {
    layout.decode_cols = first_decode->cols;
    layout.decode_col_block = first_decode->col_block;
    layout.decode_pooling = first_decode->pooling;
    layout.decode_sink = run.decode_attention_sink_map(0, 0) != nullptr;
  }
  layout.nmse = !run.nmse.empty();
  layout.qk = !run.qk.empty();
  layout.qk_scale = run.qk_scale;
  layout.router_k = run.router_k;
  if (layout.qk) layout.qk_layers = run.qk_layers;
  layout.qk_softcap = run.qk_softcap;
  layout.layer_windows.assign(run.layer_windows.begin(), run.layer_windows.end());
  const int id = sink.begin_run(std::move(layout));

  auto send_maps = [&](MapKind kind, const RunTrace::MapTable& table) {
    for (const auto& [key, map] : table)
      sink.write_map(id, {kind, key.first, key.second}, *map, map_units(kind), map_definition(kind),
                     kind == MapKind::KeySimilarity || kind == MapKind::ValueSimilarity);
  };
  send_maps(MapKind::Attention, run.attention);
  send_maps(MapKind::KeySimilarity, run.key_similarity);
  send_maps(MapKind::ValueSimilarity, run.value_similarity);
  send_maps(MapKind::AttentionSink, run.attention_sink);
  for (const auto& [stat_name, stat] : run.stats) sink.write_stat(id, stat_name, stat);
  for (const auto& [stat_name, stat] : run.layer_stats) sink.write_layer_stat(id, stat_name, stat);

  // Steps in order, each with its events, kept-mask row, token and decode row, as the recorder sent them.
  std::vector<std::vector<Event>> events_of(static_cast<std::size_t>(run.n_steps()));
  for (const Event& e : run.events) {
    const int row = run.step_row(e);
    if (row >= 0 && row < run.n_steps()) events_of[row].push_back(e);
  }
  std::vector<const Map2D*> decode_maps, decode_sinks;
  if (first_decode)
    for (int l = 0; l < run.n_layers; ++l)
      for (int h = 0; h < run.n_heads; ++h) {
        decode_maps.push_back(run.decode_attention_map(l, h));
        decode_sinks.push_back(run.decode_attention_sink_map(l, h));
      }
  const bool decode_sink = first_decode && run.decode_attention_sink_map(0, 0) != nullptr;
  int generated = 0, decode_step = 0;
  for (int s = 0; s < run.n_steps(); ++s) {
    StepRecord rec;
    rec.stats = run.steps[s];
    rec.events = std::move(events_of[s]);
    for (const KeptMask& m : run.kept_mask) {
      if (s >= m.n_steps) break;
      const uint8_t* row = m.rows.row(static_cast<std::size_t>(s));
      rec.kept.emplace_back(row, row + static_cast<std::size_t>(m.n_kv_heads) * m.n_positions);
    }
    if (rec.stats.token >= 0 && generated < run.n_generated()) {
      rec.has_token = true;
      rec.token = run.generated_ids[generated];
      rec.token_string = generated < static_cast<int>(run.generated_strings.size()) ? run.generated_strings[generated] : "";
      rec.logprob = generated < static_cast<int>(run.logprobs.size()) ? run.logprobs[generated] : 0.0f;
      ++generated;
    }
    if (s == 0) rec.routing.assign(run.routing.begin(), run.routing.end());  // rows in position order, whichever step
    if (rec.stats.phase == 1) {
      if (!decode_maps.empty() && decode_step < first_decode->rows)
        for (const Map2D* m : decode_maps) {
          if (!m || decode_step >= m->rows) throw Error("run '" + run.name + "': decode attention maps differ in length");
          rec.decode_attention.insert(rec.decode_attention.end(), m->row(decode_step), m->row(decode_step) + m->cols);
        }
      if (decode_sink && decode_step < first_decode->rows)
        for (const Map2D* m : decode_sinks) {
          if (!m || decode_step >= m->rows) throw Error("run '" + run.name + "': decode sink shares differ in length");
          rec.decode_attention_sink.push_back(m->at(decode_step, 0));
        }
      if (decode_step < static_cast<int>(run.nmse.size())) rec.nmse = run.nmse[decode_step];
      ++decode_step;
    }
    sink.append_step(id, std::move(rec));
  }
  for (const QKSpanRef& span : run.qk) sink.append_qk(id, span);

  for (const auto& [series_name, series] : run.policy_series) sink.write_series(id, series_name, series);
  if (!run.layer_budgets.empty()) sink.write_layer_budgets(id, run.layer_budgets);
  if (run.complete) sink.end_run(id, {});
}

}  // namespace kvscope::trace
