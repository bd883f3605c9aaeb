#pragma once
// The Recorder watches one run (engine::RunObserver) and turns what it sees into a trace: pooled
// attention maps and statistics from the streamed probability rows, key/value similarity maps from the
// cache at the end of prefill, one event per entry an edit removes, the kept mask and per-step numbers.
// It computes; its sinks receive (trace_sink.h): an Hdf5Writer, a LiveTrace a viewer draws from, or both.
//
// Everything runs on the engine thread (attention rows on the attention threads). Heavy HDF5 work happens
// on the writer's thread.
#include <chrono>
#include <map>
#include <memory>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "core/analysis/attention_stats.h"
#include "core/analysis/pooling.h"
#include "core/engine/engine.h"
#include "core/engine/run_observer.h"
#include "core/model/config.h"
#include "core/model/tokenizer.h"
#include "core/policy/policy.h"
#include "core/trace/qk_recording.h"
#include "core/trace/trace_sink.h"
#include "core/trace/trace_view.h"

namespace kvscope::trace {

struct RecordOptions {
  std::vector<int> full_layers;  // layers whose prefill attention is stored at full resolution
  std::vector<int> full_heads;   // query heads of those layers at full resolution (empty: all heads)
  int max_map_size = 512;        // edge of pooled maps
  Pooling pooling = Pooling::Max;
  bool attention = true;         // prefill attention maps
  bool stats = true;             // entropy / variance statistics of prefill attention
  bool similarity = true;        // key and value cosine-similarity maps at the end of prefill
  bool decode_attention = true;  // one pooled row per decode step, layer and head
  bool nmse = false;             // CAOTE Fig. 3 output error against a shadow full cache (costs a second attention)
  bool qk = false;               // post-RoPE queries, keys and row log-sum-exp: exact attention at any zoom (qk_span.h)
  std::vector<int> qk_layers;    // with qk: the layers whose q/k are kept (`qk=layers:0-3,14`); empty: every layer

  // "layers=0,3;heads=0;pooling=max;size=512;similarity=on;nmse=off;decode=on;attention=on;stats=on;qk=off"
  // (keys are separated by ';', list items by ','); qk also takes "layers:0-3,14". Throws UsageError naming the key.
  static RecordOptions parse(const std::string& spec);
  std::string to_json() const;
  bool full_resolution(int layer, int head) const;
  // Whether layer's q/k are recorded.
  bool records_qk(int layer) const;
};

// What the recorder needs to know before the run.
struct RecordedRun {
  std::string name;                              // run name in the file
  std::map<std::string, std::string> metadata;   // model, policy, budget, prompt ... (see docs/trace-format.md)
  model::ModelConfig config;
  const model::Tokenizer* tokenizer = nullptr;   // for token strings (nullptr: ids as text)
  std::vector<int> prompt;
  int max_new_tokens = 0;
  const policy::Policy* policy = nullptr;        // diagnostics and budgets are read from it at finish()
};

class Recorder : public engine::RunObserver {
 public:
  // Begins the run in every sink (none is allowed: a recorder that only computes, for tests).
  Recorder(RecordOptions options, std::vector<TraceSink*> sinks, RecordedRun run);
  ~Recorder() override;

  // Before the run: take the prefill products (attention maps, statistics, similarity maps) from a run of
  // the same prompt whose prefill was identical, instead of computing them from attention rows. For an
  // engine run that replays a captured prefill (engine/prefill_capture.h), where no rows stream.
  void adopt_prefill(const RunTrace& source);

  // After Engine::generate: budgets, policy diagnostics, final attributes, complete = 1.
  void finish(const engine::RunResult& result);

  // engine::RunObserver
  observation::ObservationRequest request(int layer, observation::Phase phase) const override;
  void on_rows(int layer, int head, int first_row, int n_rows, int n_cols, const float* probs) override;
  void on_observation(const observation::AttentionObservation& obs) override;
  void on_edit(const cache::CacheEdit& edit, const cache::KVCache& before, const observation::StepInfo& step) override;
  void on_step_end(const observation::StepInfo& step, const cache::KVCache& cache, int token, float logprob) override;
  bool rows_concurrent_across_heads() const override { return true; }
  bool wants_full_cache_output() const override { return options_.nmse; }
  void on_full_cache_output(int layer, const observation::StepInfo& step, int n_queries, int width, const float* compressed,
                            const float* full) override;
  void on_routing(int layer, const observation::StepInfo& step, int first_position, int n_tokens, int k,
                  const engine::ExpertChoice* choices) override;

 private:
  struct MapBuild;
  struct HeadStats;

  int kv_of(int head) const { return head / (run_.config.n_heads / run_.config.n_kv_heads); }
  // Column j of (layer, kv head)'s attention row -> original key position, for the cache as attention saw it.
  void key_positions(int layer, int kv_head, int n_cols, std::vector<int32_t>& out) const;
  void finish_prefill_layer(int layer);
  void finish_prefill();
  void record_similarity(int layer, const cache::KVCache& cache);
  MapBuild* map_build(int layer, int head);  // the head's prefill map, created on first use
  void flush_map_rows(MapBuild& build, bool all);
  void write_sink_column(const MapBuild& build);  // the sink's share of each prefill row (MapKind::AttentionSink)
  void flush_sinks();
  void send_qk(const QKSpanRef& span);

  RecordOptions options_;
  std::vector<TraceSink*> sinks_;
  std::vector<int> run_ids_;  // per sink
  RecordedRun run_;
  bool prefill_adopted_ = false;
  int prompt_length_ = 0, max_positions_ = 0;

  // Where the run is.
  bool prefill_finished_ = false;
  int prev_seq_len_ = 0;
  int n_steps_ = 0, n_generated_ = 0;
  std::chrono::steady_clock::time_point last_step_end_;

  // Positions of each (layer, kv head)'s entries: the cache at the last step end, updated by edits.
  std::vector<std::vector<int32_t>> mirror_;
  // What became of every position: KeptState per (layer, kv head) x max_positions.
  std::vector<std::vector<uint8_t>> state_;
  std::vector<Event> step_events_;

  // Prefill maps and statistics, per (layer, head), alive until the layer's last prefill block.
  std::map<std::pair<int, int>, std::unique_ptr<MapBuild>> maps_;
  std::map<std::pair<int, int>, std::unique_ptr<analysis::AttentionStatsAccumulator>> stats_acc_;
  std::vector<bool> layer_done_, similarity_done_;
  std::vector<std::vector<analysis::AttentionStats>> stats_;  // [layers][heads]
  std::vector<std::vector<double>> layer_colsum_;              // head-mean column sums per layer (D2O)

  // Decode rows of the current step: [layers][heads][decode_cols], their sink shares (models with sink logits):
  // [layers][heads], and NMSE: [layers].
  analysis::PoolShape decode_shape_;
  std::vector<float> decode_rows_;
  std::vector<float> decode_sink_shares_;
  std::vector<float> nmse_row_;
  bool nmse_seen_ = false;
  // Router choices of the tokens this step fed, by position (mixture-of-experts models).
  std::map<int, TokenRouting> step_routing_;

  // Exact attention's inputs of the current step (null without `qk=on`), and those of an adopted prefill.
  std::unique_ptr<QKRecording> qk_;
  std::vector<QKSpanRef> adopted_qk_;

  // Prefill products, sent to the sinks as they complete; kept for adopt_prefill's users and finish().
  std::map<std::string, std::string> metadata_;
  bool finished_ = false;
  // Compute-thread time spent inside this recorder, summed over threads (its whole cost to the run, queue
  // waits included).
  std::atomic<double> busy_ms_{0.0};
  // Guards the creation and lookup of per-head state in maps_ and stats_acc_: on_rows runs for several
  // heads at once; each head's own state is then touched by one thread only.
  std::mutex head_state_mutex_;
};

// Run names: "<policy>_b<budget>" with characters outside [A-Za-z0-9_.-] replaced ("20%" -> "20pct").
std::string run_name(const std::string& policy, const std::string& budget);

}  // namespace kvscope::trace
