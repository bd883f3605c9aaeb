#pragma once
// The read-only model of recorded runs that viewers draw from. It is the same whether it was filled by a
// live Recorder or read back from an HDF5 trace, so a panel never needs to know where its data came from.
// Plain data plus small accessors; shapes are written the way the papers write them.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/analysis/map2d.h"
#include "core/policy/diagnostics.h"
#include "core/trace/append_only_log.h"
#include "core/trace/append_only_rows.h"
#include "core/trace/qk_span.h"

namespace kvscope::trace {

// Maps are the analysis layer's (core/analysis/map2d.h); traces store and show them.
using analysis::Map2D;
using analysis::Pooling;
using analysis::pooling_name;

// A per-(layer, head) statistic: values[layer][head].
struct LayerHeadStat {
  std::vector<std::vector<double>> values;  // [layers][heads]
  std::string description;                  // definition, citing the paper's equation
};

// A per-layer statistic (heads already combined the way the paper does): values[layer].
struct LayerStat {
  std::vector<double> values;  // [layers]
  std::string description;
};

enum class EventAction : uint8_t { Evicted = 0, Merged = 1 };

inline const char* event_action_name(EventAction a) { return a == EventAction::Evicted ? "evicted" : "merged"; }

// One cache entry leaving the cache (evicted, or merged into another entry).
struct Event {
  int32_t step = 0;                 // prefill block or decode step index; (phase, step) names a row of steps
  uint8_t phase = 0;                // 0 prefill, 1 decode (observation::Phase)
  int16_t layer = 0;
  int16_t kv_head = 0;
  int32_t position = 0;             // original token position of the entry
  float score = 0.0f;               // the policy's score of the entry (NaN when it has none)
  float secondary_score = 0.0f;     // second score (CAOTE: the base policy's), NaN when none
  EventAction action = EventAction::Evicted;
  int32_t merge_target = -1;        // original position of the entry it was merged into, -1 if evicted
  float merge_weight = 0.0f;        // the entry's weight in the merge, 0 if evicted
};

// Kept-mask values: what became of position p at the end of step s.
enum KeptState : uint8_t { kEvicted = 0, kKept = 1, kMergedAway = 2 };

// Per layer: what became of each (kv head, position) at the end of each step, where step indexes
// RunTrace::steps (prefill blocks first, then decode steps). Positions not yet seen at a step read kEvicted
// (never held). Stored step-major, one row of [kv_heads][positions] per step, so a live run appends a step
// without touching the ones before and its snapshots share the rows (append_only_rows.h).
struct KeptMask {
  int n_kv_heads = 0, n_positions = 0, n_steps = 0;
  RowsView<uint8_t> rows;  // [steps][kv_heads * positions]

  uint8_t at(int kv_head, int position, int step) const {
    return rows.row(static_cast<std::size_t>(step))[static_cast<std::size_t>(kv_head) * n_positions + position];
  }
  // From the file's order, values[kv_head][position][step].
  static KeptMask from_head_position_step(int n_kv_heads, int n_positions, int n_steps, const std::vector<uint8_t>& values);
  bool operator==(const KeptMask& other) const;
};

// Decode attention of a live run: one row [layers][heads][cols] per decode step, appended as the run goes, and
// on a model with sink logits the rows' sink shares [layers][heads] after it. RunTrace::decode_attention_map and
// decode_attention_sink_map assemble a (layer, head)'s map from it when a viewer first asks.
struct DecodeRows {
  RowsView<float> rows;  // [decode steps][layers * heads * cols (+ layers * heads sink shares)]
  int n_layers = 0, n_heads = 0, cols = 0, col_block = 1, source_cols = 0;
  Pooling pooling = Pooling::Max;
  bool sink = false;     // each row ends with its sink shares
};

// One row per recorded step (prefill blocks first, then decode steps).
struct StepStats {
  uint8_t phase = 0;             // 0 prefill, 1 decode
  int32_t step = 0;
  int32_t seq_len = 0;           // tokens processed so far
  uint64_t cache_bytes = 0;
  int64_t cache_entries = 0;     // over all (layer, kv head)
  double ms = 0.0;               // wall time of the step
  int32_t token = -1;            // token sampled at the end of the step
};

// Mixture-of-experts runs: what each layer's router chose for one token fed to the model (a prompt token or a
// generated one fed back), most probable first.
struct TokenRouting {
  std::vector<int16_t> experts;  // [layers][k]
  std::vector<float> weights;    // [layers][k], the factors on the experts' outputs
  bool operator==(const TokenRouting&) const = default;
};

struct RunTrace {
  std::string name;                                // e.g. "h2o_b128"
  // model, model_sha256, policy, policy_params (JSON), budget, allocation, prompt, kvscope_version,
  // git_commit, start_time, host, stop_reason ...
  std::map<std::string, std::string> metadata;

  std::vector<int32_t> prompt_ids, generated_ids;
  std::vector<std::string> prompt_strings, generated_strings;  // one decoded piece per token
  std::vector<float> logprobs;                                 // per generated token

  int n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, prompt_length = 0;

  // Maps are shared and immutable once published, so a snapshot of a live run copies pointers, not pixels.
  using MapRef = std::shared_ptr<const Map2D>;
  using MapTable = std::map<std::pair<int, int>, MapRef>;
  // Prefill attention [queries][keys] in position space, key {layer, query head}.
  MapTable attention;
  // Decode attention: one row per decode step over key positions, [decode steps][pooled keys]. A file's
  // maps are here; a live run's are assembled from decode_rows on first use (decode_attention_map).
  MapTable decode_attention;
  DecodeRows decode_rows;
  // Cosine similarity of post-RoPE keys / values over the prompt, key {layer, kv head}.
  MapTable key_similarity, value_similarity;
  // Models with sink logits (gpt-oss): per (layer, query head), the sink's share of each prefill row, a
  // rows x 1 map beside `attention` (MapKind::AttentionSink). Empty for other models.
  MapTable attention_sink;
  // The same for each decode row: per (layer, query head), a [decode steps] x 1 map beside decode_attention (a
  // live run's assembled from decode_rows, decode_attention_sink_map). Empty for other models.
  MapTable decode_attention_sink;

  std::map<std::string, LayerHeadStat> stats;         // "cake_window_entropy", "mean_row_entropy", ...
  std::map<std::string, LayerStat> layer_stats;       // "cake_layer_entropy", "d2o_layer_variance", ...
  std::vector<int> layer_budgets;                     // final, per layer
  std::map<std::string, policy::Series> policy_series;  // the policy's diagnostics

  // Growing histories are shared between a live run's snapshots (append_only_log.h), not copied.
  AppendOnlyLog<Event> events;
  std::vector<KeptMask> kept_mask;                    // per layer
  AppendOnlyLog<StepStats> steps;
  // CAOTE Fig. 3 output error per decode step and layer; empty when not recorded.
  AppendOnlyLog<std::vector<float>> nmse;             // [decode steps][layers]
  // Exact attention's inputs (qk_span.h), spans of consecutive positions from 0 (a live run appends one
  // per step; a file holds one). Empty when not recorded (`--record qk=off`, traces before it).
  AppendOnlyLog<QKSpanRef> qk;
  double qk_scale = 0.0;                              // the score scale attention used (1 / sqrt(head_dim))
  // Router choices, one per fed position from 0 (router_k experts per layer); empty for dense models.
  int router_k = 0;
  AppendOnlyLog<TokenRouting> routing;
  // The layers whose q/k the spans hold (`--record qk=layers:0-3,14`; the others' span layers are empty), sorted;
  // empty: every layer (files written before the option).
  std::vector<int> qk_layers;
  bool holds_qk(int layer) const {
    return !qk.empty() && layer >= 0 && layer < n_layers &&
           (qk_layers.empty() || std::binary_search(qk_layers.begin(), qk_layers.end(), layer));
  }
  // "0-3,14" or "all": what holds_qk answers, for messages.
  std::string qk_layers_text() const;
  double qk_softcap = 0.0;                            // scores capped as c * tanh(s / c) (Gemma 2; 0: none)
  // Per layer, the sliding window of a local layer, 0 for a global one; empty: every layer global (a model
  // without local layers, or a trace from before layer types were recorded).
  std::vector<int> layer_windows;
  int layer_window(int layer) const {
    return layer >= 0 && layer < static_cast<int>(layer_windows.size()) ? layer_windows[layer] : 0;
  }

  bool complete = false;

  std::string meta(const std::string& key, const std::string& fallback = "") const {
    auto it = metadata.find(key);
    return it == metadata.end() ? fallback : it->second;
  }
  const Map2D* attention_map(int layer, int head) const { return find(attention, layer, head); }
  const Map2D* decode_attention_map(int layer, int head) const;
  const Map2D* attention_sink_map(int layer, int head) const { return find(attention_sink, layer, head); }
  const Map2D* decode_attention_sink_map(int layer, int head) const;
  const Map2D* key_similarity_map(int layer, int kv_head) const { return find(key_similarity, layer, kv_head); }
  const Map2D* value_similarity_map(int layer, int kv_head) const { return find(value_similarity, layer, kv_head); }
  const LayerHeadStat* stat(const std::string& stat_name) const {
    auto it = stats.find(stat_name);
    return it == stats.end() ? nullptr : &it->second;
  }
  const LayerStat* layer_stat(const std::string& stat_name) const {
    auto it = layer_stats.find(stat_name);
    return it == layer_stats.end() ? nullptr : &it->second;
  }
  // Row of `steps` (and of the kept-mask step axis) of an event: prefill blocks first, then decode steps.
  int step_row(const Event& e) const { return e.phase == 0 ? e.step : first_decode_step() + e.step; }
  // Index into `steps` of the first decode step (== number of prefill blocks), or n_steps() if none.
  int first_decode_step() const {
    for (int i = 0; i < n_steps(); ++i)
      if (steps[i].phase == 1) return i;
    return n_steps();
  }
  int n_generated() const { return static_cast<int>(generated_ids.size()); }
  int n_steps() const { return static_cast<int>(steps.size()); }

 private:
  // Decode maps assembled from decode_rows on first use. A copy starts empty: it may be a newer snapshot
  // with more rows.
  struct AssembledMaps {
    AssembledMaps() = default;
    AssembledMaps(const AssembledMaps&) {}
    AssembledMaps& operator=(const AssembledMaps&) {
      std::lock_guard<std::mutex> lock(mutex);
      maps.clear();
      sink_maps.clear();
      return *this;
    }
    std::mutex mutex;
    MapTable maps, sink_maps;
  };
  mutable AssembledMaps assembled_;

  static const Map2D* find(const MapTable& m, int a, int b) {
    auto it = m.find({a, b});
    return it == m.end() ? nullptr : it->second.get();
  }
};

// Layers as ranges, "0-3,14" (sorted input; empty: "none"): how a trace names the layers holding q/k.
std::string format_layer_list(const std::vector<int>& layers);

struct TraceView {
  std::vector<std::shared_ptr<const RunTrace>> runs;
  std::vector<std::string> warnings;  // e.g. "run 'h2o_b128' is incomplete (complete=false): the writer stopped early"

  const RunTrace* find(const std::string& name) const {
    for (const auto& r : runs)
      if (r->name == name) return r.get();
    return nullptr;
  }
};

}  // namespace kvscope::trace
