#include "core/trace/live_trace.h"

#include <algorithm>

#include "core/common/error.h"

namespace kvscope::trace {

LiveTrace::LiveTrace(std::chrono::milliseconds min_publish_interval) : min_interval_(min_publish_interval) {}

std::shared_ptr<const RunTrace> LiveTrace::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return published_;
}

void LiveTrace::check_run(int run) const {
  if (!begun_ || run != 0) throw Error("live trace: run id " + std::to_string(run) + " was never begun (one run per live trace)");
}

RunTrace::MapTable& LiveTrace::table(MapKind kind) {
  switch (kind) {
    case MapKind::Attention: return trace_.attention;
    case MapKind::KeySimilarity: return trace_.key_similarity;
    case MapKind::AttentionSink: return trace_.attention_sink;
    case MapKind::ValueSimilarity: break;
  }
  return trace_.value_similarity;
}

int LiveTrace::begin_run(RunLayout layout) {
  if (begun_) throw Error("live trace: holds one run; '" + layout.name + "' would be a second");
  begun_ = true;
  layout_ = std::move(layout);
  trace_.name = layout_.name;
  trace_.metadata = layout_.metadata;
  trace_.n_layers = layout_.n_layers;
  trace_.n_heads = layout_.n_heads;
  trace_.n_kv_heads = layout_.n_kv_heads;
  trace_.head_dim = layout_.head_dim;
  trace_.prompt_length = layout_.prompt_length;
  trace_.prompt_ids = layout_.prompt_ids;
  trace_.prompt_strings = layout_.prompt_strings;
  trace_.qk_scale = layout_.qk ? layout_.qk_scale : 0.0;
  trace_.router_k = layout_.router_k;
  trace_.qk_layers = layout_.qk ? layout_.qk_layers : std::vector<int>{};
  trace_.qk_softcap = layout_.qk ? layout_.qk_softcap : 0.0;
  trace_.layer_windows.assign(layout_.layer_windows.begin(), layout_.layer_windows.end());
  const std::size_t mask_row = static_cast<std::size_t>(layout_.n_kv_heads) * layout_.max_positions;
  kept_.assign(static_cast<std::size_t>(layout_.n_layers), AppendOnlyRows<uint8_t>(mask_row, 16));
  const std::size_t head_rows = static_cast<std::size_t>(layout_.n_layers) * layout_.n_heads;
  decode_ = AppendOnlyRows<float>(head_rows * layout_.decode_cols + (layout_.decode_sink ? head_rows : 0), 16);
  publish();
  return 0;
}

void LiveTrace::create_map(int run, const MapSlot& slot, const Map2D& shape, const std::string&, const std::string&) {
  check_run(run);
  auto m = std::make_shared<Map2D>(shape);
  m->values.assign(static_cast<std::size_t>(m->rows) * m->cols, 0.0f);
  std::lock_guard<std::mutex> lock(maps_mutex_);
  building_[slot] = std::move(m);
}

void LiveTrace::write_map_rows(int run, const MapSlot& slot, int first_row, int n_rows, std::span<const float> values) {
  check_run(run);
  Map2D* target = nullptr;
  {
    std::lock_guard<std::mutex> lock(maps_mutex_);
    auto it = building_.find(slot);
    if (it == building_.end()) throw Error("live trace: rows for a map that was never created");
    target = it->second.get();
  }
  // Only the thread of this map's head writes its rows, so the copy needs no lock; the map tables do.
  Map2D& m = *target;
  if (first_row < 0 || first_row + n_rows > m.rows || values.size() != static_cast<std::size_t>(n_rows) * m.cols)
    throw Error("live trace: rows " + std::to_string(first_row) + ".." + std::to_string(first_row + n_rows) +
                " do not fit a map of " + std::to_string(m.rows) + " x " + std::to_string(m.cols));
  std::copy(values.begin(), values.end(), m.values.begin() + static_cast<std::ptrdiff_t>(first_row) * m.cols);
  // The map is shown once whole: a half-built one would read as attention that is not there.
  if (first_row + n_rows == m.rows) {
    std::lock_guard<std::mutex> lock(maps_mutex_);
    auto it = building_.find(slot);
    table(slot.kind)[{slot.layer, slot.index}] = std::move(it->second);
    building_.erase(it);
  }
}

void LiveTrace::write_map(int run, const MapSlot& slot, const Map2D& map, const std::string& units,
                          const std::string& definition, bool lower_triangle) {
  share_map(run, slot, std::make_shared<const Map2D>(map), units, definition, lower_triangle);
}

void LiveTrace::share_map(int run, const MapSlot& slot, const std::shared_ptr<const Map2D>& map, const std::string&,
                          const std::string&, bool) {
  check_run(run);
  std::lock_guard<std::mutex> lock(maps_mutex_);
  table(slot.kind)[{slot.layer, slot.index}] = map;
}

void LiveTrace::write_stat(int run, const std::string& name, const LayerHeadStat& stat) {
  check_run(run);
  trace_.stats[name] = stat;
}

void LiveTrace::write_layer_stat(int run, const std::string& name, const LayerStat& stat) {
  check_run(run);
  trace_.layer_stats[name] = stat;
}

void LiveTrace::write_series(int run, const std::string& name, const policy::Series& series) {
  check_run(run);
  trace_.policy_series[name] = series;
}

void LiveTrace::write_layer_budgets(int run, const std::vector<int>& budgets) {
  check_run(run);
  trace_.layer_budgets = budgets;
}

void LiveTrace::append_step(int run, StepRecord rec) {
  check_run(run);
  trace_.steps.push_back(rec.stats);
  bytes_since_publish_ += trace_.steps.moved_by_last_append() * sizeof(StepStats);
  trace_.events.append(rec.events.begin(), rec.events.end());
  bytes_since_publish_ += trace_.events.moved_by_last_append() * sizeof(Event);
  for (std::size_t l = 0; l < kept_.size(); ++l) {
    uint8_t* row = kept_[l].append();
    if (l < rec.kept.size()) std::copy_n(rec.kept[l].begin(), std::min(rec.kept[l].size(), kept_[l].row_size()), row);
    bytes_since_publish_ += kept_[l].bytes_moved_by_last_append();
  }
  if (!rec.decode_attention.empty() && decode_.row_size() > 0) {
    float* row = decode_.append();
    const std::size_t maps = static_cast<std::size_t>(layout_.n_layers) * layout_.n_heads * layout_.decode_cols;
    std::copy_n(rec.decode_attention.begin(), std::min(rec.decode_attention.size(), maps), row);
    if (layout_.decode_sink)
      std::copy_n(rec.decode_attention_sink.begin(), std::min(rec.decode_attention_sink.size(), decode_.row_size() - maps),
                  row + maps);
    bytes_since_publish_ += decode_.bytes_moved_by_last_append();
  }
  if (rec.has_token) {
    trace_.generated_ids.push_back(rec.token);
    trace_.generated_strings.push_back(std::move(rec.token_string));
    trace_.logprobs.push_back(rec.logprob);
  }
  if (!rec.routing.empty()) {
    trace_.routing.append(std::make_move_iterator(rec.routing.begin()), std::make_move_iterator(rec.routing.end()));
    bytes_since_publish_ += trace_.routing.moved_by_last_append() * sizeof(TokenRouting);
  }
  if (!rec.nmse.empty()) {
    trace_.nmse.push_back(std::move(rec.nmse));
    bytes_since_publish_ += trace_.nmse.moved_by_last_append() * sizeof(std::vector<float>);
  }
  // The step that ends the prompt holds the policy's decision, which the window shows before decode
  // follows: it is published at once, not up to an interval later.
  const bool prefill_done = rec.stats.phase == 0 && rec.stats.seq_len >= layout_.prompt_length;
  if (prefill_done || std::chrono::steady_clock::now() - last_publish_ >= min_interval_) publish();
}

void LiveTrace::append_qk(int run, const QKSpanRef& span) {
  check_run(run);
  const int expected = trace_.qk.empty() ? 0 : trace_.qk.back()->first_position + trace_.qk.back()->n_positions;
  if (!span || span->first_position != expected)
    throw Error("live trace: q/k span starts at position " + std::to_string(span ? span->first_position : -1) +
                ", expected " + std::to_string(expected));
  trace_.qk.push_back(span);  // shared, not copied: the spans are immutable
  bytes_since_publish_ += trace_.qk.moved_by_last_append() * sizeof(QKSpanRef);
}

void LiveTrace::end_run(int run, const std::map<std::string, std::string>& final_metadata) {
  check_run(run);
  for (const auto& [k, v] : final_metadata) trace_.metadata[k] = v;
  trace_.complete = true;
  publish();
}

void LiveTrace::publish() {
  if (!begun_) return;
  std::shared_ptr<RunTrace> snap;
  {
    std::lock_guard<std::mutex> lock(maps_mutex_);
    snap = std::make_shared<RunTrace>(trace_);
  }
  snap->kept_mask.resize(kept_.size());
  for (std::size_t l = 0; l < kept_.size(); ++l) {
    KeptMask& m = snap->kept_mask[l];
    m.n_kv_heads = layout_.n_kv_heads;
    m.n_positions = layout_.max_positions;
    m.n_steps = static_cast<int>(kept_[l].rows());
    m.rows = kept_[l].view();
  }
  DecodeRows& d = snap->decode_rows;
  d.rows = decode_.view();
  d.n_layers = layout_.n_layers;
  d.n_heads = layout_.n_heads;
  d.cols = layout_.decode_cols;
  d.col_block = layout_.decode_col_block;
  d.source_cols = layout_.max_positions;
  d.pooling = layout_.decode_pooling;
  d.sink = layout_.decode_sink;
  last_publish_bytes_ = bytes_since_publish_;
  bytes_since_publish_ = 0;
  last_publish_ = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  published_ = std::move(snap);
}

}  // namespace kvscope::trace
