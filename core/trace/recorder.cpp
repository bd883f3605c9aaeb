#include "core/trace/recorder.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/analysis/output_error.h"
#include "core/analysis/similarity.h"
#include "core/common/error.h"
#include "core/trace/hdf5_writer.h"
#include "core/trace/run_metadata.h"
#include "core/trace/trace_names.h"

namespace kvscope::trace {

using observation::Phase;

namespace {

// Per-layer byte counts as run metadata: "123,456,...".
std::string comma_list(const std::vector<std::size_t>& values) {
  std::string text;
  for (std::size_t v : values) text += (text.empty() ? "" : ",") + std::to_string(v);
  return text;
}

bool parse_switch(const std::string& key, const std::string& value) {
  if (value == "on" || value == "true" || value == "1" || value == "yes") return true;
  if (value == "off" || value == "false" || value == "0" || value == "no") return false;
  throw UsageError("--record: '" + key + "' takes on or off, not '" + value + "'");
}

std::vector<int> parse_list(const std::string& key, const std::string& value) {
  std::vector<int> out;
  if (value.empty() || value == "none") return out;
  std::stringstream ss(value);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      std::size_t used = 0;
      const int v = std::stoi(item, &used);
      if (used != item.size() || v < 0) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      throw UsageError("--record: '" + key + "' takes a list of indices like 0,3, not '" + value + "'");
    }
  }
  return out;
}

// "0-3,14" -> 0,1,2,3,14 (sorted, without repeats): the layers of `qk=layers:...`.
std::vector<int> parse_layer_ranges(const std::string& value) {
  auto bad = [&] {
    return UsageError("--record: qk=layers: takes layer indices and ranges like 0-3,14, not '" + value + "'");
  };
  auto index = [&](const std::string& text) {
    std::size_t used = 0;
    int v = -1;
    try {
      v = std::stoi(text, &used);
    } catch (const std::exception&) {
      throw bad();
    }
    if (used != text.size() || v < 0 || text.empty() || text[0] == '+' || text[0] == '-') throw bad();
    return v;
  };
  std::set<int> layers;
  std::stringstream ss(value);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto dash = item.find('-');
    const int first = index(item.substr(0, dash));
    const int last = dash == std::string::npos ? first : index(item.substr(dash + 1));
    if (last < first) throw bad();
    for (int l = first; l <= last; ++l) layers.insert(l);
  }
  if (layers.empty()) throw bad();
  return {layers.begin(), layers.end()};
}

// Adds the lifetime of the scope to a millisecond counter.
class BusyTimer {
 public:
  explicit BusyTimer(std::atomic<double>& total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~BusyTimer() { total_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  std::atomic<double>& total_;
  std::chrono::steady_clock::time_point start_;
};

constexpr float kNoScore = std::numeric_limits<float>::quiet_NaN();

}  // namespace

RecordOptions RecordOptions::parse(const std::string& spec) {
  RecordOptions o;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ';')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos) throw UsageError("--record: expected key=value, got '" + item + "'");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "layers") {
      o.full_layers = parse_list(key, value);
    } else if (key == "heads") {
      o.full_heads = parse_list(key, value);
    } else if (key == "pooling") {
      if (value != "max" && value != "mean") throw UsageError("--record: pooling is max or mean, not '" + value + "'");
      o.pooling = value == "max" ? Pooling::Max : Pooling::Mean;
    } else if (key == "size") {
      const auto v = parse_list(key, value);
      if (v.size() != 1 || v[0] < 16 || v[0] > 4096) throw UsageError("--record: size is one number in [16, 4096], not '" + value + "'");
      o.max_map_size = v[0];
    } else if (key == "similarity") {
      o.similarity = parse_switch(key, value);
    } else if (key == "nmse") {
      o.nmse = parse_switch(key, value);
    } else if (key == "decode") {
      o.decode_attention = parse_switch(key, value);
    } else if (key == "attention") {
      o.attention = parse_switch(key, value);
    } else if (key == "stats") {
      o.stats = parse_switch(key, value);
    } else if (key == "qk") {
      static const std::string kLayers = "layers:";
      if (value.rfind(kLayers, 0) == 0) {
        o.qk = true;
        o.qk_layers = parse_layer_ranges(value.substr(kLayers.size()));
      } else {
        try {
          o.qk = parse_switch(key, value);
        } catch (const UsageError&) {
          throw UsageError("--record: 'qk' takes on, off or layers:LIST (like layers:0-3,14), not '" + value + "'");
        }
        o.qk_layers.clear();
      }
    } else {
      throw UsageError("--record: unknown key '" + key +
                       "' (valid: layers, heads, pooling, size, similarity, nmse, decode, attention, stats, qk)");
    }
  }
  return o;
}

std::string RecordOptions::to_json() const {
  nlohmann::json j;
  j["full_layers"] = full_layers;
  j["full_heads"] = full_heads;
  j["max_map_size"] = max_map_size;
  j["pooling"] = pooling_name(pooling);
  j["attention"] = attention;
  j["stats"] = stats;
  j["similarity"] = similarity;
  j["decode_attention"] = decode_attention;
  j["nmse"] = nmse;
  j["qk"] = qk;
  if (qk && !qk_layers.empty()) j["qk_layers"] = qk_layers;
  return j.dump();
}

bool RecordOptions::full_resolution(int layer, int head) const {
  if (std::find(full_layers.begin(), full_layers.end(), layer) == full_layers.end()) return false;
  return full_heads.empty() || std::find(full_heads.begin(), full_heads.end(), head) != full_heads.end();
}

bool RecordOptions::records_qk(int layer) const {
  return qk && (qk_layers.empty() || std::binary_search(qk_layers.begin(), qk_layers.end(), layer));
}

std::string run_name(const std::string& policy, const std::string& budget) {
  std::string name = policy;
  if (!budget.empty()) {
    std::string b = budget;
    if (!b.empty() && b.back() == '%') b = b.substr(0, b.size() - 1) + "pct";
    name += "_b" + b;
  }
  for (char& c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) c = '_';
  return name;
}

// A prefill map being pooled: rows go to the writer in batches and, for the live view, into a Map2D.
struct Recorder::MapBuild {
  MapBuild(const analysis::PoolShape& shape, MapSlot map_slot) : pooler(shape, {}), slot(map_slot), pool_shape(shape) {}
  analysis::RowPooler pooler;
  MapSlot slot;
  analysis::PoolShape pool_shape;
  std::vector<double> sink_share;  // per prompt query, for a model with sink logits (else empty)
  std::vector<float> pending;
  int pending_first = 0, pending_rows = 0;
};

Recorder::Recorder(RecordOptions options, std::vector<TraceSink*> sinks, RecordedRun run)
    : options_(std::move(options)), sinks_(std::move(sinks)), run_(std::move(run)) {
  const auto& c = run_.config;
  if (c.n_layers <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads != 0)
    throw Error("recorder: model shape " + std::to_string(c.n_layers) + " layers, " + std::to_string(c.n_heads) + " heads, " +
                std::to_string(c.n_kv_heads) + " kv heads is not valid");
  prompt_length_ = static_cast<int>(run_.prompt.size());
  max_positions_ = prompt_length_ + std::max(0, run_.max_new_tokens);
  const std::size_t heads = static_cast<std::size_t>(c.n_layers) * c.n_kv_heads;
  mirror_.assign(heads, {});
  state_.assign(heads, std::vector<uint8_t>(static_cast<std::size_t>(max_positions_), kEvicted));
  layer_done_.assign(c.n_layers, false);
  similarity_done_.assign(c.n_layers, false);
  stats_.assign(c.n_layers, std::vector<analysis::AttentionStats>(c.n_heads));
  layer_colsum_.assign(c.n_layers, {});
  decode_shape_ = analysis::PoolShape::fit(1, max_positions_, 1, options_.max_map_size, options_.pooling);
  decode_rows_.assign(static_cast<std::size_t>(c.n_layers) * c.n_heads * decode_shape_.cols(), 0.0f);
  if (c.attention_sinks) decode_sink_shares_.assign(static_cast<std::size_t>(c.n_layers) * c.n_heads, 0.0f);
  nmse_row_.assign(c.n_layers, 0.0f);

  RunLayout layout;
  layout.name = run_.name;
  layout.metadata = run_.metadata;
  layout.metadata["record_options"] = options_.to_json();
  layout.n_layers = c.n_layers;
  layout.n_heads = c.n_heads;
  layout.n_kv_heads = c.n_kv_heads;
  layout.head_dim = c.head_dim;
  layout.prompt_length = prompt_length_;
  layout.max_positions = max_positions_;
  layout.prompt_ids.assign(run_.prompt.begin(), run_.prompt.end());
  for (int id : run_.prompt)
    layout.prompt_strings.push_back(run_.tokenizer ? run_.tokenizer->token_text(id) : std::to_string(id));
  if (options_.decode_attention && run_.max_new_tokens > 1) {
    layout.decode_cols = decode_shape_.cols();
    layout.decode_col_block = decode_shape_.col_block;
    layout.decode_pooling = options_.pooling;
    layout.decode_sink = c.attention_sinks;
  }
  layout.nmse = options_.nmse;
  layout.router_k = c.n_experts > 0 ? c.n_experts_used : 0;
  if (options_.qk) {
    for (int l : options_.qk_layers)
      if (l >= c.n_layers)
        throw UsageError("--record: qk=layers: names layer " + std::to_string(l) + ", but the model has layers 0.." +
                         std::to_string(c.n_layers - 1));
    for (int l = 0; l < c.n_layers; ++l)
      if (options_.records_qk(l)) layout.qk_layers.push_back(l);
    qk_ = std::make_unique<QKRecording>(c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, layout.qk_layers);
    layout.qk = true;
    // The scale every backend's attention applies to q.k (kernels/cpu/attention.cpp, kernels/cuda/attention.cu).
    layout.qk_scale = 1.0 / std::sqrt(static_cast<double>(static_cast<float>(c.head_dim)));
    layout.qk_softcap = c.attn_logit_softcap;
  }
  if (c.local_layer_count() > 0)
    for (int l = 0; l < c.n_layers; ++l) layout.layer_windows.push_back(c.window_of(l));
  for (TraceSink* sink : sinks_) run_ids_.push_back(sink->begin_run(layout));
  last_step_end_ = std::chrono::steady_clock::now();
}

Recorder::~Recorder() = default;

observation::ObservationRequest Recorder::request(int layer, Phase phase) const {
  observation::ObservationRequest r;
  r.rows = phase == Phase::Prefill ? (options_.attention || options_.stats) && !prefill_adopted_ : options_.decode_attention;
  // An adopted prefill brings its q/k with it (and a replayed prefill has no queries to give).
  r.queries = r.log_sum_exp = options_.records_qk(layer) && !(phase == Phase::Prefill && prefill_adopted_);
  return r;
}

void Recorder::adopt_prefill(const RunTrace& source) {
  const auto& c = run_.config;
  if (source.n_layers != c.n_layers || source.n_heads != c.n_heads || source.n_kv_heads != c.n_kv_heads ||
      source.prompt_ids != std::vector<int32_t>(run_.prompt.begin(), run_.prompt.end()))
    throw Error("recorder: cannot adopt the prefill of run '" + source.name + "': another model shape or prompt");
  if (qk_) {
    adopted_qk_ = qk_spans_before(std::vector<QKSpanRef>(source.qk.begin(), source.qk.end()), prompt_length_);
    const int held = adopted_qk_.empty() ? 0 : adopted_qk_.back()->first_position + adopted_qk_.back()->n_positions;
    if (held != prompt_length_)
      throw Error("recorder: cannot adopt the prefill of run '" + source.name + "': it holds q/k of " + std::to_string(held) +
                  " of the prompt's " + std::to_string(prompt_length_) + " positions (recorded without qk=on?)");
    for (int l = 0; l < c.n_layers; ++l)
      if (options_.records_qk(l) && !source.holds_qk(l))
        throw Error("recorder: cannot adopt the prefill of run '" + source.name + "': it holds no q/k of layer " +
                    std::to_string(l) + " (it holds q/k of layers " + source.qk_layers_text() + ")");
  }
  prefill_adopted_ = true;
  std::fill(layer_done_.begin(), layer_done_.end(), true);
  std::fill(similarity_done_.begin(), similarity_done_.end(), true);
  // The maps are shared, immutable Map2Ds: a live sink keeps the pointers (no copy), a writer packs them.
  auto send = [&](MapKind kind, const RunTrace::MapTable& table, bool triangle) {
    for (const auto& [key, map] : table)
      for (std::size_t i = 0; i < sinks_.size(); ++i)
        sinks_[i]->share_map(run_ids_[i], {kind, key.first, key.second}, map, map_units(kind), map_definition(kind), triangle);
  };
  if (options_.attention) {
    send(MapKind::Attention, source.attention, false);
    send(MapKind::AttentionSink, source.attention_sink, false);
  }
  if (options_.similarity) {
    send(MapKind::KeySimilarity, source.key_similarity, true);
    send(MapKind::ValueSimilarity, source.value_similarity, true);
  }
  if (options_.stats) {
    for (const auto& [name, stat] : source.stats)
      for (std::size_t i = 0; i < sinks_.size(); ++i) sinks_[i]->write_stat(run_ids_[i], name, stat);
    for (const auto& [name, stat] : source.layer_stats)
      for (std::size_t i = 0; i < sinks_.size(); ++i) sinks_[i]->write_layer_stat(run_ids_[i], name, stat);
  }
  flush_sinks();
}

void Recorder::send_qk(const QKSpanRef& span) {
  for (std::size_t i = 0; i < sinks_.size(); ++i) sinks_[i]->append_qk(run_ids_[i], span);
}

void Recorder::flush_sinks() {
  for (TraceSink* sink : sinks_) sink->flush();
}

void Recorder::key_positions(int layer, int kv_head, int n_cols, std::vector<int32_t>& out) const {
  const auto& m = mirror_[static_cast<std::size_t>(layer) * run_.config.n_kv_heads + kv_head];
  out.clear();
  // No entry ever left: the cache holds positions 0..seq_len-1 in order, so column j is position j.
  if (static_cast<int>(m.size()) == prev_seq_len_) return;
  const int n_old = static_cast<int>(std::lower_bound(m.begin(), m.end(), prev_seq_len_) - m.begin());
  out.resize(n_cols);
  for (int j = 0; j < n_cols; ++j) out[j] = j < static_cast<int>(m.size()) ? m[j] : prev_seq_len_ + (j - n_old);
}

void Recorder::flush_map_rows(MapBuild& b, bool all) {
  if (b.pending_rows == 0 || (!all && b.pending_rows < 64)) return;
  for (std::size_t i = 0; i < sinks_.size(); ++i)
    sinks_[i]->write_map_rows(run_ids_[i], b.slot, b.pending_first, b.pending_rows, b.pending);
  b.pending.clear();
  b.pending_first += b.pending_rows;
  b.pending_rows = 0;
}

void Recorder::on_rows(int layer, int head, int first_row, int n_rows, int n_cols, const float* probs) {
  BusyTimer busy(busy_ms_);
  const auto& c = run_.config;
  std::vector<int32_t> cols;
  key_positions(layer, kv_of(head), n_cols, cols);

  if (prefill_finished_) {
    if (!options_.decode_attention) return;
    float* out = decode_rows_.data() + (static_cast<std::size_t>(layer) * c.n_heads + head) * decode_shape_.cols();
    const int block = decode_shape_.col_block;
    const bool max = options_.pooling == Pooling::Max;
    double keys = 0.0;
    for (int j = 0; j < n_cols; ++j) {
      keys += probs[j];
      const int pos = cols.empty() ? j : cols[j];
      if (pos < 0 || pos >= max_positions_) continue;
      float& cell = out[pos / block];
      cell = max ? std::max(cell, probs[j]) : cell + probs[j];
    }
    // As for a prefill row: the sink took what the row's keys (every entry in the cache) leave of 1.
    if (c.attention_sinks)
      decode_sink_shares_[static_cast<std::size_t>(layer) * c.n_heads + head] = static_cast<float>(std::max(0.0, 1.0 - keys));
    return;
  }

  if (prefill_adopted_) return;  // rows another observer asked for; the adopted maps stand
  const std::pair<int, int> key{layer, head};
  MapBuild* build = nullptr;
  analysis::AttentionStatsAccumulator* acc = nullptr;
  {
    std::lock_guard<std::mutex> lock(head_state_mutex_);
    if (options_.attention) build = map_build(layer, head);
    if (options_.stats) {
      auto it = stats_acc_.find(key);
      if (it == stats_acc_.end())
        it = stats_acc_.emplace(key, std::make_unique<analysis::AttentionStatsAccumulator>(prompt_length_)).first;
      acc = it->second.get();
    }
  }
  for (int r = 0; r < n_rows; ++r) {
    const int query = prev_seq_len_ + first_row + r;
    const std::span<const float> row(probs + static_cast<std::size_t>(r) * n_cols, static_cast<std::size_t>(n_cols));
    if (build) build->pooler.add_row(query, row, cols);
    if (acc) acc->add_row(query, row, cols);
    if (c.attention_sinks && query < prompt_length_) {
      // The sink attends to no value: its share is what the row's key probabilities leave of 1 (each row
      // arrives whole, over every key it saw).
      double keys = 0.0;
      for (float p : row) keys += p;
      const double share = std::max(0.0, 1.0 - keys);
      if (build) build->sink_share[static_cast<std::size_t>(query)] = share;
      if (acc) acc->add_sink(query, share);
    }
  }
}

Recorder::MapBuild* Recorder::map_build(int layer, int head) {
  const std::pair<int, int> key{layer, head};
  if (auto it = maps_.find(key); it != maps_.end()) return it->second.get();
  const bool full = options_.full_resolution(layer, head);
  const int edge = full ? 0 : options_.max_map_size;
  const auto shape = analysis::PoolShape::fit(prompt_length_, prompt_length_, edge, edge, options_.pooling);
  auto b = std::make_unique<MapBuild>(shape, MapSlot{MapKind::Attention, layer, head});
  if (run_.config.attention_sinks) b->sink_share.assign(static_cast<std::size_t>(prompt_length_), 0.0);
  MapBuild* raw = b.get();
  b->pooler = analysis::RowPooler(shape, [this, raw](int, std::span<const float> values) {
    raw->pending.insert(raw->pending.end(), values.begin(), values.end());
    ++raw->pending_rows;
    flush_map_rows(*raw, false);
  });
  for (std::size_t i = 0; i < sinks_.size(); ++i)
    sinks_[i]->create_map(run_ids_[i], b->slot, shape.empty_map(), map_units(MapKind::Attention),
                          map_definition(MapKind::Attention));
  return maps_.emplace(key, std::move(b)).first->second.get();
}

void Recorder::on_observation(const observation::AttentionObservation& obs) {
  BusyTimer busy(busy_ms_);
  if (qk_ && !obs.query_positions.empty() && !(obs.phase == Phase::Prefill && prefill_adopted_)) {
    qk_->begin_step(prev_seq_len_, obs.query_positions.back() + 1);
    qk_->add_observation(obs);
  }
  if (prefill_finished_ || obs.phase != Phase::Prefill || obs.query_positions.empty()) return;
  if (obs.query_positions.back() == prompt_length_ - 1) finish_prefill_layer(obs.layer);
}

void Recorder::finish_prefill_layer(int layer) {
  if (layer_done_[layer]) return;
  layer_done_[layer] = true;
  const auto& c = run_.config;
  for (int h = 0; h < c.n_heads; ++h) {
    const std::pair<int, int> key{layer, h};
    if (auto it = maps_.find(key); it != maps_.end()) {
      MapBuild& b = *it->second;
      b.pooler.finish();
      flush_map_rows(b, true);
      if (!b.sink_share.empty()) write_sink_column(b);
      maps_.erase(it);
    }
    if (auto it = stats_acc_.find(key); it != stats_acc_.end()) {
      stats_[layer][h] = it->second->finish();
      const auto& sums = it->second->column_sums();
      auto& mean = layer_colsum_[layer];
      mean.resize(sums.size(), 0.0);
      for (std::size_t j = 0; j < sums.size(); ++j) mean[j] += sums[j] / c.n_heads;
      stats_acc_.erase(it);
    }
  }
  flush_sinks();  // a run killed later in a long prefill keeps this layer's maps; a viewer shows them
}

void Recorder::write_sink_column(const MapBuild& b) {
  const analysis::PoolShape& shape = b.pool_shape;
  Map2D column;
  column.rows = shape.rows();
  column.cols = column.source_cols = 1;
  column.source_rows = shape.source_rows;
  column.row_block = shape.row_block;
  column.pooling = shape.mode;
  column.values.assign(static_cast<std::size_t>(column.rows), 0.0f);
  for (int r = 0; r < shape.source_rows; ++r) {
    float& cell = column.values[static_cast<std::size_t>(r / shape.row_block)];
    const auto share = static_cast<float>(b.sink_share[static_cast<std::size_t>(r)]);
    cell = shape.mode == Pooling::Max ? std::max(cell, share) : cell + share;
  }
  if (shape.mode == Pooling::Mean)
    for (int R = 0; R < column.rows; ++R)
      column.values[static_cast<std::size_t>(R)] /=
          static_cast<float>(std::min(shape.source_rows, (R + 1) * shape.row_block) - R * shape.row_block);
  const MapSlot slot{MapKind::AttentionSink, b.slot.layer, b.slot.index};
  for (std::size_t i = 0; i < sinks_.size(); ++i)
    sinks_[i]->write_map(run_ids_[i], slot, column, map_units(MapKind::AttentionSink),
                         map_definition(MapKind::AttentionSink));
}

void Recorder::finish_prefill() {
  const auto& c = run_.config;
  for (int l = 0; l < c.n_layers; ++l) finish_prefill_layer(l);
  if (!options_.stats || prefill_adopted_) return;
  struct Named {
    const char* name;
    double analysis::AttentionStats::*field;
    const char* description;
  };
  static const Named per_head[] = {
      {"cake_window_entropy", &analysis::AttentionStats::cake_window_entropy,
       "CAKE Eq. 4 on Obs = A[S-S_w:S, 0:S-S_w], S_w = 32: -sum Obs ln(Obs + 1e-10), per query head"},
      {"cake_column_variance", &analysis::AttentionStats::cake_column_variance,
       "CAKE Eq. 5 on Obs: sum over keys of the unbiased variance over the window's queries, per query head"},
      {"d2o_colsum_variance", &analysis::AttentionStats::d2o_colsum_variance,
       "D2O Eq. 4 per head: population variance over keys j of s[j] = sum_i A[i,j]"},
      {"mean_row_entropy", &analysis::AttentionStats::mean_row_entropy,
       "D2O App. A.9 Eq. 21 (a): (1/S) sum_i H(A[i,:]), H(p) = -sum p ln p (nats)"},
      {"mean_row_entropy_normalized", &analysis::AttentionStats::mean_row_entropy_normalized,
       "mean over rows i >= 1 of H(A[i,:]) / ln(i+1): row entropy relative to the uniform causal row"},
      {"colsum_entropy", &analysis::AttentionStats::colsum_entropy,
       "D2O App. A.9 (b): H(s / S) of the normalised cumulative attention s[j] = sum_i A[i,j]"},
  };
  for (const auto& n : per_head) {
    LayerHeadStat s;
    s.description = n.description;
    for (int l = 0; l < c.n_layers; ++l) {
      std::vector<double> row;
      for (int h = 0; h < c.n_heads; ++h) row.push_back(stats_[l][h].*(n.field));
      s.values.push_back(std::move(row));
    }
    for (std::size_t i = 0; i < sinks_.size(); ++i) sinks_[i]->write_stat(run_ids_[i], n.name, s);
  }
  LayerStat entropy{{}, "CAKE H_l (Eq. 4): cake_window_entropy summed over the layer's query heads (reference code)"};
  LayerStat variance{{}, "CAKE V_l (Eq. 5): cake_column_variance summed over the layer's query heads (reference code)"};
  LayerStat d2o{{}, "D2O F_v^l (Eq. 4): population variance of the head-mean column sums s^l[j] (digest A6-1)"};
  for (int l = 0; l < c.n_layers; ++l) {
    double h = 0.0, v = 0.0;
    for (int k = 0; k < c.n_heads; ++k) {
      h += stats_[l][k].cake_window_entropy;
      v += stats_[l][k].cake_column_variance;
    }
    entropy.values.push_back(h);
    variance.values.push_back(v);
    d2o.values.push_back(analysis::population_variance(layer_colsum_[l]));
  }
  for (auto* s : {&entropy, &variance, &d2o}) {
    const char* name = s == &entropy ? "cake_layer_entropy" : s == &variance ? "cake_layer_variance" : "d2o_layer_variance";
    for (std::size_t i = 0; i < sinks_.size(); ++i) sinks_[i]->write_layer_stat(run_ids_[i], name, *s);
  }
}

void Recorder::record_similarity(int layer, const cache::KVCache& cache) {
  if (similarity_done_[layer]) return;
  similarity_done_[layer] = true;
  const auto& c = run_.config;
  const int group = c.n_heads / c.n_kv_heads;
  // The layer's maps (keys and values of every KV head) are independent BLAS products, each then
  // packed for the file; doing them side by side keeps every core busy, where one at a time would use one.
  const int n_maps = 2 * c.n_kv_heads;
  std::vector<std::shared_ptr<Map2D>> maps(static_cast<std::size_t>(n_maps));
  std::exception_ptr failed;
#pragma omp parallel for schedule(dynamic, 1)
  for (int i = 0; i < n_maps; ++i) {
    try {
      const int g = i / 2;
      const bool keys = i % 2 == 0;
      bool full = false;
      for (int h = g * group; h < (g + 1) * group; ++h) full = full || options_.full_resolution(layer, h);
      maps[i] = std::make_shared<Map2D>(analysis::cache_similarity_map(
          cache, layer, g, keys ? analysis::CachedVectors::Keys : analysis::CachedVectors::Values,
          full ? 0 : options_.max_map_size, options_.pooling));
      // Sinks are fed from the engine thread below: a live sink is not made for concurrent calls.
    } catch (...) {
#pragma omp critical(kvscope_similarity_error)
      if (!failed) failed = std::current_exception();
    }
  }
  if (failed) std::rethrow_exception(failed);
  for (int m = 0; m < n_maps; ++m) {
    const bool keys = m % 2 == 0;
    const MapSlot slot{keys ? MapKind::KeySimilarity : MapKind::ValueSimilarity, layer, m / 2};
    for (std::size_t i = 0; i < sinks_.size(); ++i)
      sinks_[i]->write_map(run_ids_[i], slot, *maps[m], map_units(slot.kind), map_definition(slot.kind), true);
  }
}

void Recorder::on_edit(const cache::CacheEdit& edit, const cache::KVCache& before, const observation::StepInfo& step) {
  BusyTimer busy(busy_ms_);
  const auto& c = run_.config;
  // The cache as the edit finds it in the last prefill step is the fullest prompt cache there will be.
  if (options_.similarity && !prefill_finished_ && step.phase == Phase::Prefill && step.prefill_done)
    for (const auto& he : edit.heads)
      if (he.layer >= 0 && he.layer < c.n_layers) record_similarity(he.layer, before);

  for (const auto& he : edit.heads) {
    if (he.layer < 0 || he.layer >= c.n_layers || he.kv_head < 0 || he.kv_head >= c.n_kv_heads) continue;
    if (qk_ && !(step.phase == Phase::Prefill && prefill_adopted_)) {
      qk_->begin_step(prev_seq_len_, step.seq_len);
      qk_->before_edit(before, he.layer, he.kv_head);
    }
    const std::size_t idx = static_cast<std::size_t>(he.layer) * c.n_kv_heads + he.kv_head;
    const auto positions = before.positions(he.layer, he.kv_head);
    const int n = static_cast<int>(positions.size());
    // 1 kept, 2 merged away, 0 evicted; merge target and weight for the merged.
    std::vector<uint8_t> fate(n, kEvicted);
    std::vector<int32_t> target(n, -1);
    std::vector<float> weight(n, 0.0f);
    std::vector<int32_t> kept;
    for (int32_t k : he.keep)
      if (k >= 0 && k < n) {
        fate[k] = kKept;
        kept.push_back(positions[k]);
      }
    for (const auto& mg : he.merges)
      for (std::size_t i = 0; i < mg.sources.size(); ++i) {
        const int32_t src = mg.sources[i];
        if (src < 0 || src >= n || fate[src] == kKept) continue;
        fate[src] = kMergedAway;
        target[src] = mg.target >= 0 && mg.target < n ? positions[mg.target] : -1;
        weight[src] = i + 1 < mg.weights.size() ? mg.weights[i + 1] : 0.0f;
      }
    // A value-only merge (CaM) records its first target; the others follow it in position order.
    for (const auto& vm : he.value_merges) {
      if (vm.source < 0 || vm.source >= n || fate[vm.source] == kKept || vm.targets.empty()) continue;
      fate[vm.source] = kMergedAway;
      target[vm.source] = vm.targets[0] >= 0 && vm.targets[0] < n ? positions[vm.targets[0]] : -1;
      weight[vm.source] = vm.weight;
    }
    const bool has_scores = static_cast<int>(he.scores.size()) == n;
    const bool has_secondary = static_cast<int>(he.secondary_scores.size()) == n;
    for (int i = 0; i < n; ++i) {
      if (fate[i] == kKept) continue;
      Event e;
      e.step = step.step;
      e.phase = step.phase == Phase::Prefill ? 0 : 1;
      e.layer = static_cast<int16_t>(he.layer);
      e.kv_head = static_cast<int16_t>(he.kv_head);
      e.position = positions[i];
      e.score = has_scores ? he.scores[i] : kNoScore;
      e.secondary_score = has_secondary ? he.secondary_scores[i] : kNoScore;
      e.action = fate[i] == kMergedAway ? EventAction::Merged : EventAction::Evicted;
      e.merge_target = target[i];
      e.merge_weight = weight[i];
      step_events_.push_back(e);
      if (positions[i] >= 0 && positions[i] < max_positions_) state_[idx][positions[i]] = fate[i];
    }
    mirror_[idx] = std::move(kept);
  }
}

void Recorder::on_routing(int layer, const observation::StepInfo&, int first_position, int n_tokens, int k,
                          const engine::ExpertChoice* choices) {
  const auto& c = run_.config;
  if (layer < 0 || layer >= c.n_layers || k != c.n_experts_used) return;
  const std::size_t width = static_cast<std::size_t>(c.n_layers) * k;
  for (int t = 0; t < n_tokens; ++t) {
    TokenRouting& row = step_routing_[first_position + t];
    row.experts.resize(width, -1);
    row.weights.resize(width, 0.0f);
    for (int j = 0; j < k; ++j) {
      const engine::ExpertChoice& choice = choices[static_cast<std::size_t>(t) * k + j];
      row.experts[static_cast<std::size_t>(layer) * k + j] = static_cast<int16_t>(choice.expert);
      row.weights[static_cast<std::size_t>(layer) * k + j] = choice.weight;
    }
  }
}

void Recorder::on_full_cache_output(int layer, const observation::StepInfo& step, int n_queries, int width,
                                    const float* compressed, const float* full) {
  if (!options_.nmse || step.phase != Phase::Decode || layer < 0 || layer >= run_.config.n_layers) return;
  nmse_row_[layer] = static_cast<float>(analysis::output_nmse(compressed, full, static_cast<std::size_t>(n_queries) * width));
  nmse_seen_ = true;
}

void Recorder::on_step_end(const observation::StepInfo& step, const cache::KVCache& cache, int token, float logprob) {
  BusyTimer busy(busy_ms_);
  const auto& c = run_.config;
  const auto now = std::chrono::steady_clock::now();
  const bool final_prefill = step.phase == Phase::Prefill && step.prefill_done;
  if (final_prefill) {
    if (options_.similarity)
      for (int l = 0; l < c.n_layers; ++l) record_similarity(l, cache);
    finish_prefill();
  }

  for (int l = 0; l < c.n_layers; ++l)
    for (int g = 0; g < c.n_kv_heads; ++g) {
      const std::size_t idx = static_cast<std::size_t>(l) * c.n_kv_heads + g;
      const auto positions = cache.positions(l, g);
      for (int32_t p : positions)
        if (p >= 0 && p < max_positions_) state_[idx][p] = kKept;
      mirror_[idx].assign(positions.begin(), positions.end());
    }

  if (qk_) {
    if (step.phase == Phase::Prefill && prefill_adopted_) {
      if (final_prefill)
        for (const QKSpanRef& span : adopted_qk_) send_qk(span);
    } else {
      qk_->begin_step(prev_seq_len_, step.seq_len);
      send_qk(qk_->finish_step(cache));
    }
  }

  StepRecord rec;
  rec.stats.phase = step.phase == Phase::Prefill ? 0 : 1;
  rec.stats.step = step.step;
  rec.stats.seq_len = step.seq_len;
  rec.stats.cache_bytes = cache.bytes();
  rec.stats.cache_entries = cache.total_entries();
  rec.stats.ms = std::chrono::duration<double, std::milli>(now - last_step_end_).count();
  rec.stats.token = token;
  rec.events = std::move(step_events_);
  step_events_.clear();
  rec.kept.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    auto& k = rec.kept[l];
    k.reserve(static_cast<std::size_t>(c.n_kv_heads) * max_positions_);
    for (int g = 0; g < c.n_kv_heads; ++g) {
      const auto& s = state_[static_cast<std::size_t>(l) * c.n_kv_heads + g];
      k.insert(k.end(), s.begin(), s.end());
    }
  }
  // The engine samples one token more than it keeps when max_new_tokens is 0.
  if (token >= 0 && n_generated_ < run_.max_new_tokens) {
    rec.has_token = true;
    rec.token = token;
    rec.token_string = run_.tokenizer ? run_.tokenizer->token_text(token) : std::to_string(token);
    rec.logprob = logprob;
    ++n_generated_;
  }
  if (step.phase == Phase::Decode && options_.decode_attention) {
    if (options_.pooling == Pooling::Mean) {
      const int cols = decode_shape_.cols(), block = decode_shape_.col_block;
      for (std::size_t i = 0; i < decode_rows_.size(); ++i) {
        const int col = static_cast<int>(i % cols);
        decode_rows_[i] /= static_cast<float>(std::min(block, max_positions_ - col * block));
      }
    }
    rec.decode_attention = decode_rows_;
    std::fill(decode_rows_.begin(), decode_rows_.end(), 0.0f);
    rec.decode_attention_sink = decode_sink_shares_;
    std::fill(decode_sink_shares_.begin(), decode_sink_shares_.end(), 0.0f);
  }
  for (auto& [position, routing] : step_routing_) rec.routing.push_back(std::move(routing));
  step_routing_.clear();
  if (step.phase == Phase::Decode && options_.nmse && nmse_seen_) {
    rec.nmse = nmse_row_;
    std::fill(nmse_row_.begin(), nmse_row_.end(), 0.0f);
    nmse_seen_ = false;
  }

  // Every sink but the last gets a copy; the last takes the record.
  for (std::size_t i = 0; i + 1 < sinks_.size(); ++i) sinks_[i]->append_step(run_ids_[i], rec);
  if (!sinks_.empty()) sinks_.back()->append_step(run_ids_.back(), std::move(rec));

  prev_seq_len_ = step.seq_len;
  ++n_steps_;
  if (final_prefill) prefill_finished_ = true;
  last_step_end_ = std::chrono::steady_clock::now();
  // The decision (what prefill kept) is worth showing before the first decode step finishes.
  if (final_prefill) flush_sinks();
}

void Recorder::finish(const engine::RunResult& result) {
  if (finished_) return;
  finished_ = true;
  if (!prefill_finished_) finish_prefill();
  if (run_.policy)
    for (const auto& [name, series] : run_.policy->diagnostics().all())
      for (std::size_t i = 0; i < sinks_.size(); ++i) sinks_[i]->write_series(run_ids_[i], name, series);
  if (!result.layer_budgets.empty())
    for (std::size_t i = 0; i < sinks_.size(); ++i) sinks_[i]->write_layer_budgets(run_ids_[i], result.layer_budgets);
  double writer_wait_ms = 0.0;
  for (TraceSink* sink : sinks_)
    if (auto* writer = dynamic_cast<Hdf5Writer*>(sink)) writer_wait_ms += writer->blocked_ms();
  std::map<std::string, std::string> final_meta = {
      {"recorder_ms", std::to_string(busy_ms_.load())},
      {"writer_wait_ms", std::to_string(writer_wait_ms)},
      {"stop_reason", result.stop_reason},
      {"generated_text", result.text},
      {"prefill_ms", std::to_string(result.prefill_ms)},
      {"decode_ms", std::to_string(result.decode_ms)},
      {"cache_peak_bytes", std::to_string(result.cache_peak_bytes)},
      {"full_cache_bytes", std::to_string(result.full_cache_bytes)},
      {"cache_entry_bytes", std::to_string(result.cache_entry_bytes)},
      {"layer_entry_bytes", comma_list(result.layer_entry_bytes)},
  };
  // --cache-page N: the same entries in pages of N tokens per (layer, KV head), beside the logical bytes.
  if (result.cache_page_tokens > 0) {
    final_meta["cache_page_tokens"] = std::to_string(result.cache_page_tokens);
    final_meta["cache_paged_bytes"] = std::to_string(result.cache_paged_bytes);
    final_meta["layer_paged_bytes"] = comma_list(result.layer_paged_bytes);
    final_meta["cache_paged_peak_bytes"] = std::to_string(result.cache_paged_peak_bytes);
    final_meta["layer_paged_peak_bytes"] = comma_list(result.layer_paged_peak_bytes);
  }
  // How far the stored rows are from float32, per layer (a quantized or half cache; issue 37).
  if (const auto type = run_.metadata.find("cache_type"); type != run_.metadata.end() && type->second != "f32") {
    auto per_layer = [](const std::vector<double>& values) {
      std::string text;
      char buf[32];
      for (double v : values) {
        std::snprintf(buf, sizeof buf, "%.6g", v);
        text += (text.empty() ? "" : ",") + std::string(buf);
      }
      return text;
    };
    final_meta["storage_nmse_keys"] = per_layer(result.key_storage_nmse);
    final_meta["storage_nmse_values"] = per_layer(result.value_storage_nmse);
    if (result.merges_stored) {
      final_meta["merge_storage_nmse_keys"] = per_layer(result.key_merge_nmse);
      final_meta["merge_storage_nmse_values"] = per_layer(result.value_merge_nmse);
    }
  }
  if (result.prefill_share_from_blocks > 0.0)
    final_meta["prefill"] = "computed, " + std::to_string(result.prefill_percent_from_blocks()) +
                            " % of its layers (rows x layers) finished from a capture of the same prompt's "
                            "blocks before any edit";
  if (run_.policy)
    for (auto& [k, v] : policy_outcome_metadata(run_.metadata, run_.policy->diagnostics())) final_meta[k] = std::move(v);
  for (std::size_t i = 0; i < sinks_.size(); ++i) sinks_[i]->end_run(run_ids_[i], final_meta);
}

}  // namespace kvscope::trace
