#pragma once
// The sink a window draws from: it builds one run's RunTrace in memory as the Recorder produces it and
// publishes immutable snapshots (Tracy's worker/view split). Publishing is cheap by construction: maps are
// shared pointers, the kept mask and decode attention are append-only rows that every snapshot shares
// (append_only_rows.h), and events, step rows and NMSE rows are append-only logs (append_only_log.h), so a
// snapshot after step s copies what step s added, never the history before it. (The generated tokens'
// ids, strings and log-probs are still plain vectors: one entry per decode step, copied per publish.)
#include <chrono>
#include <map>
#include <memory>
#include <mutex>

#include "core/trace/append_only_rows.h"
#include "core/trace/trace_sink.h"

namespace kvscope::trace {

class LiveTrace final : public TraceSink {
 public:
  // min_publish_interval: a step publishes only when this much time passed since the last publish (flush
  // and end_run always publish). 0 publishes every step.
  explicit LiveTrace(std::chrono::milliseconds min_publish_interval = std::chrono::milliseconds(200));

  // The latest published state (thread-safe); null before begin_run.
  std::shared_ptr<const RunTrace> snapshot() const;
  // Bytes of kept-mask, decode-attention, event, step and NMSE history that the latest publish copied
  // (storage moves included): bounded by what was appended since the previous publish, plus amortised growth.
  std::size_t history_bytes_copied_by_last_publish() const { return last_publish_bytes_; }

  int begin_run(RunLayout layout) override;
  void create_map(int run, const MapSlot& slot, const Map2D& shape, const std::string& units,
                  const std::string& definition) override;
  void write_map_rows(int run, const MapSlot& slot, int first_row, int n_rows, std::span<const float> values) override;
  void write_map(int run, const MapSlot& slot, const Map2D& map, const std::string& units, const std::string& definition,
                 bool lower_triangle) override;
  void share_map(int run, const MapSlot& slot, const std::shared_ptr<const Map2D>& map, const std::string& units,
                 const std::string& definition, bool lower_triangle) override;
  void write_stat(int run, const std::string& name, const LayerHeadStat& stat) override;
  void write_layer_stat(int run, const std::string& name, const LayerStat& stat) override;
  void write_series(int run, const std::string& name, const policy::Series& series) override;
  void write_layer_budgets(int run, const std::vector<int>& budgets) override;
  void append_step(int run, StepRecord record) override;
  void append_qk(int run, const QKSpanRef& span) override;
  void end_run(int run, const std::map<std::string, std::string>& final_metadata) override;
  void flush() override { publish(); }

 private:
  void check_run(int run) const;
  RunTrace::MapTable& table(MapKind kind);
  void publish();

  std::chrono::milliseconds min_interval_;
  bool begun_ = false;
  RunLayout layout_;
  RunTrace trace_;  // everything but the kept mask and decode rows, which live below
  std::map<MapSlot, std::shared_ptr<Map2D>> building_;  // maps still receiving rows
  std::vector<AppendOnlyRows<uint8_t>> kept_;           // per layer: [steps][kv_heads * positions]
  AppendOnlyRows<float> decode_;                        // [decode steps][layers * heads * cols]
  std::size_t bytes_since_publish_ = 0, last_publish_bytes_ = 0;
  std::chrono::steady_clock::time_point last_publish_{};

  // The recorder's attention threads create and fill their heads' maps at once (Recorder::on_rows): the map
  // tables and building_ are shared between them and with publish().
  std::mutex maps_mutex_;
  mutable std::mutex mutex_;
  std::shared_ptr<const RunTrace> published_;
};

}  // namespace kvscope::trace
