// The live trace a window draws from: snapshots are immutable and publishing copies only what is new
// (the kept mask and decode attention are shared, append-only rows; events, step rows and NMSE rows are
// append-only logs), checked by counting the bytes a publish copies and by comparing every snapshot with an
// independent record of what was appended.
#include <catch2/catch.hpp>

#include <random>
#include <thread>

#include "core/trace/emit_run.h"
#include "core/trace/live_trace.h"

using namespace kvscope::trace;

namespace {

RunLayout layout(int layers, int kv_heads, int heads, int positions, int decode_cols) {
  RunLayout l;
  l.name = "live";
  l.n_layers = layers;
  l.n_heads = heads;
  l.n_kv_heads = kv_heads;
  l.head_dim = 4;
  l.prompt_length = positions / 2;
  l.max_positions = positions;
  l.decode_cols = decode_cols;
  return l;
}

}  // namespace

TEST_CASE("publishing a live run copies what the step added, not the history", "[trace][live]") {
  const int layers = 3, kv = 2, heads = 4, positions = 500, cols = 50, steps = 300;
  LiveTrace live(std::chrono::milliseconds(0));  // publish at every step
  const int id = live.begin_run(layout(layers, kv, heads, positions, cols));
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> state(0, 2);
  std::uniform_real_distribution<float> prob(0.0f, 1.0f);
  // Independent record: what each step appended.
  std::vector<std::vector<std::vector<uint8_t>>> kept_record;  // [step][layer][kv * positions]
  std::vector<std::vector<float>> decode_record;               // [decode step][layers * heads * cols]
  std::vector<Event> event_record;                             // every event, in order
  std::vector<int> seq_len_record;                             // [step]
  std::vector<std::vector<float>> nmse_record;                 // [decode step][layers]
  std::uniform_int_distribution<int> events_per_step(0, 20);
  std::vector<std::shared_ptr<const RunTrace>> snapshots;
  std::size_t copied = 0, appended = 0, largest = 0;
  int publishes_that_copied = 0;
  const std::size_t step_bytes = layers * static_cast<std::size_t>(kv) * positions + layers * heads * cols * sizeof(float);
  for (int s = 0; s < steps; ++s) {
    StepRecord rec;
    rec.stats.phase = s == 0 ? 0 : 1;
    rec.stats.step = s == 0 ? 0 : s - 1;
    rec.stats.seq_len = positions / 2 + s;
    rec.kept.assign(layers, std::vector<uint8_t>(static_cast<std::size_t>(kv) * positions));
    for (auto& l : rec.kept)
      for (auto& v : l) v = static_cast<uint8_t>(state(rng));
    kept_record.push_back(rec.kept);
    if (s > 0) {
      rec.decode_attention.resize(static_cast<std::size_t>(layers) * heads * cols);
      for (auto& v : rec.decode_attention) v = prob(rng);
      decode_record.push_back(rec.decode_attention);
      rec.nmse.resize(layers);
      for (auto& v : rec.nmse) v = prob(rng);
      nmse_record.push_back(rec.nmse);
    }
    const int n_events = events_per_step(rng);
    for (int e = 0; e < n_events; ++e) {
      Event ev;
      ev.phase = rec.stats.phase;
      ev.step = rec.stats.step;
      ev.layer = e % layers;
      ev.position = static_cast<int32_t>(positions / 4 + e);
      rec.events.push_back(ev);
      event_record.push_back(ev);
    }
    seq_len_record.push_back(rec.stats.seq_len);
    appended += n_events * sizeof(Event) + sizeof(StepStats) + (s > 0 ? sizeof(std::vector<float>) : 0);
    live.append_step(id, std::move(rec));
    copied += live.history_bytes_copied_by_last_publish();
    largest = std::max(largest, live.history_bytes_copied_by_last_publish());
    publishes_that_copied += live.history_bytes_copied_by_last_publish() > 0;
    appended += step_bytes;
    if (s % 37 == 0) snapshots.push_back(live.snapshot());
  }
  // Amortised: storage doubles, so all moves together copy a geometric series of the final size, less
  // than twice what was appended.
  CHECK(copied <= 2 * appended);
  // Most publishes copy nothing of the history at all: only the steps where storage grows do.
  int growths = 0;  // storage starts at 16 rows and doubles
  for (int capacity = 16; capacity < steps; capacity *= 2) ++growths;
  int event_growths = 0;
  for (std::size_t capacity = 16; capacity < event_record.size(); capacity *= 2) ++event_growths;
  // Kept-mask rows, step rows and NMSE rows grow at nearly the same steps, decode rows one step later,
  // events on their own schedule.
  CHECK(publishes_that_copied <= 4 * growths + event_growths);
  INFO("bytes copied by publishing " << copied << ", appended " << appended << ", largest single copy " << largest);
  CHECK(largest <= static_cast<std::size_t>(steps) * step_bytes);

  // Every snapshot still shows exactly what was appended up to its step, although later steps followed.
  snapshots.push_back(live.snapshot());
  for (const auto& snap : snapshots) {
    REQUIRE(snap->kept_mask.size() == static_cast<std::size_t>(layers));
    const int n = snap->kept_mask[0].n_steps;
    REQUIRE(n == snap->n_steps());
    int bad = 0;
    for (int s = 0; s < n; ++s) bad += snap->steps[s].seq_len != seq_len_record[s];
    REQUIRE(snap->nmse.size() == static_cast<std::size_t>(std::max(0, n - 1)));
    for (std::size_t s = 0; s < snap->nmse.size(); ++s) bad += snap->nmse[s] != nmse_record[s];
    std::size_t events_seen = 0;  // events of the snapshot's steps: a prefix of the record
    while (events_seen < event_record.size() && snap->step_row(event_record[events_seen]) < n) ++events_seen;
    REQUIRE(snap->events.size() == events_seen);
    for (std::size_t e = 0; e < events_seen; ++e)
      bad += snap->events[e].step != event_record[e].step || snap->events[e].position != event_record[e].position ||
             snap->events[e].layer != event_record[e].layer;
    for (int l = 0; l < layers; ++l)
      for (int s = 0; s < n; ++s)
        for (int g = 0; g < kv; ++g)
          for (int p = 0; p < positions; ++p)
            bad += snap->kept_mask[l].at(g, p, s) != kept_record[s][l][static_cast<std::size_t>(g) * positions + p];
    CHECK(bad == 0);
    const int decode_steps = std::max(0, n - 1);
    for (int l = 0; l < layers; ++l)
      for (int h = 0; h < heads; ++h) {
        const Map2D* m = snap->decode_attention_map(l, h);
        if (decode_steps == 0) {
          CHECK(m == nullptr);
          continue;
        }
        REQUIRE(m != nullptr);
        REQUIRE(m->rows == decode_steps);
        for (int s = 0; s < decode_steps; ++s)
          for (int c = 0; c < cols; ++c)
            bad += m->at(s, c) != decode_record[s][(static_cast<std::size_t>(l) * heads + h) * cols + c];
      }
    CHECK(bad == 0);
  }
}

TEST_CASE("a live trace shows a map once all its rows are in", "[trace][live]") {
  LiveTrace live(std::chrono::milliseconds(0));
  const int id = live.begin_run(layout(1, 1, 1, 8, 0));
  Map2D shape;
  shape.rows = shape.source_rows = 4;
  shape.cols = shape.source_cols = 4;
  live.create_map(id, {MapKind::Attention, 0, 0}, shape, "probability", "");
  const std::vector<float> rows(8, 0.25f);
  live.write_map_rows(id, {MapKind::Attention, 0, 0}, 0, 2, rows);
  live.flush();
  CHECK(live.snapshot()->attention_map(0, 0) == nullptr);
  live.write_map_rows(id, {MapKind::Attention, 0, 0}, 2, 2, rows);
  live.flush();
  const Map2D* m = live.snapshot()->attention_map(0, 0);
  REQUIRE(m != nullptr);
  CHECK(m->at(3, 3) == 0.25f);
  CHECK_THROWS(live.write_map_rows(id, {MapKind::Attention, 0, 1}, 0, 1, rows));  // never created
  CHECK_THROWS(live.begin_run(layout(1, 1, 1, 8, 0)));                           // one run per live trace
}

TEST_CASE("consecutive snapshots of a live run share its events and step rows", "[trace][live]") {
  LiveTrace live(std::chrono::milliseconds(0));
  const int id = live.begin_run(layout(1, 1, 1, 8, 0));
  StepRecord first;
  first.events.resize(3);
  live.append_step(id, first);
  const auto before = live.snapshot();
  live.append_step(id, StepRecord{});  // one more step row, no events; both logs have room left
  const auto after = live.snapshot();
  REQUIRE(before->n_steps() == 1);
  REQUIRE(after->n_steps() == 2);
  // Same storage, not a copy of it: the newer snapshot only sees one more row.
  CHECK(after->steps.data() == before->steps.data());
  CHECK(after->events.data() == before->events.data());
  CHECK(after->events.size() == 3);
}

TEST_CASE("a map adopted from a captured prefill is shared by the live trace, not copied", "[trace][live]") {
  LiveTrace live(std::chrono::milliseconds(0));
  const int id = live.begin_run(layout(1, 1, 1, 8, 0));
  auto map = std::make_shared<Map2D>();
  map->rows = map->source_rows = 512;
  map->cols = map->source_cols = 512;
  map->values.assign(512 * 512, 0.5f);
  const std::shared_ptr<const Map2D> shared = map;
  live.share_map(id, {MapKind::KeySimilarity, 0, 0}, shared, "cosine", "", true);
  live.flush();
  // The snapshot holds the very map (no 1 MB copy per map and run), and it reads as the map given.
  CHECK(live.snapshot()->key_similarity.at({0, 0}).get() == shared.get());
  CHECK(live.snapshot()->key_similarity.at({0, 0})->at(511, 511) == 0.5f);
}

TEST_CASE("the step that ends the prompt is published at once, other steps at most every interval", "[trace][live]") {
  LiveTrace live(std::chrono::hours(1));
  const int id = live.begin_run(layout(1, 1, 1, 8, 0));  // a prompt of 4 tokens
  auto step = [&](int phase, int seq_len) {
    StepRecord rec;
    rec.stats.phase = static_cast<uint8_t>(phase);
    rec.stats.seq_len = seq_len;
    live.append_step(id, rec);
    return live.snapshot()->n_steps();
  };
  CHECK(step(0, 2) == 0);  // a first prefill block: within the interval, not yet shown
  CHECK(step(0, 4) == 2);  // the prompt's last block: shown with everything before it
  CHECK(step(1, 5) == 2);  // decode steps wait for the interval again
  live.flush();
  CHECK(live.snapshot()->n_steps() == 3);
}

TEST_CASE("a live run with sink logits shows each decode row's sink share, and passes it on", "[trace][live]") {
  // 2 layers x 3 heads, 4 key columns per decode row; the sink shares ride after the rows (DecodeRows::sink).
  const int layers = 2, heads = 3, cols = 4, decode_steps = 3;
  RunLayout l = layout(layers, 1, heads, 8, cols);
  l.decode_sink = true;
  LiveTrace live(std::chrono::milliseconds(0));
  const int id = live.begin_run(l);
  const auto prob = [](int s, int layer, int h, int c) { return 0.01f * static_cast<float>(s + 10 * layer + 3 * h + c); };
  const auto share = [](int s, int layer, int h) { return 0.1f * static_cast<float>(s + 1) + 0.02f * (layer * 3 + h); };
  for (int s = 0; s <= decode_steps; ++s) {
    StepRecord rec;
    rec.stats.phase = s == 0 ? 0 : 1;
    rec.stats.step = s == 0 ? 0 : s - 1;
    rec.stats.seq_len = 4 + s;
    if (s > 0) {
      for (int layer = 0; layer < layers; ++layer)
        for (int h = 0; h < heads; ++h) {
          for (int c = 0; c < cols; ++c) rec.decode_attention.push_back(prob(s - 1, layer, h, c));
          rec.decode_attention_sink.push_back(share(s - 1, layer, h));
        }
    }
    live.append_step(id, std::move(rec));
  }
  live.end_run(id, {});
  const auto check_run = [&](const RunTrace& run) {
    for (int layer = 0; layer < layers; ++layer)
      for (int h = 0; h < heads; ++h) {
        INFO("layer " << layer << ", head " << h);
        const Map2D* m = run.decode_attention_map(layer, h);
        const Map2D* sink = run.decode_attention_sink_map(layer, h);
        REQUIRE(m);
        REQUIRE(sink);
        REQUIRE(m->rows == decode_steps);
        REQUIRE(sink->rows == decode_steps);
        REQUIRE(sink->cols == 1);
        for (int s = 0; s < decode_steps; ++s) {
          CHECK(sink->at(s, 0) == share(s, layer, h));
          for (int c = 0; c < cols; ++c) CHECK(m->at(s, c) == prob(s, layer, h, c));
        }
      }
  };
  const auto snap = live.snapshot();
  check_run(*snap);
  LiveTrace copy(std::chrono::milliseconds(0));  // what saving a live run sends on (emit_run)
  emit_run(*snap, copy);
  check_run(*copy.snapshot());

  LiveTrace without(std::chrono::milliseconds(0));  // a model without sinks has none
  const int other = without.begin_run(layout(layers, 1, heads, 8, cols));
  StepRecord rec;
  rec.stats.phase = 1;
  rec.decode_attention.assign(static_cast<std::size_t>(layers) * heads * cols, 0.25f);
  without.append_step(other, std::move(rec));
  CHECK(without.snapshot()->decode_attention_map(0, 0) != nullptr);
  CHECK(without.snapshot()->decode_attention_sink_map(0, 0) == nullptr);
}

TEST_CASE("a live trace takes maps from several attention threads at once", "[trace][live]") {
  // As Recorder::on_rows does: each thread creates and fills its own heads' maps while the others do theirs,
  // and a publish may come between. Unguarded, the shared table of maps being built loses or corrupts entries.
  constexpr int kThreads = 8, kHeadsPerThread = 2000, kRows = 4;
  LiveTrace live(std::chrono::milliseconds(0));
  const int id = live.begin_run(layout(1, 1, kThreads * kHeadsPerThread, 16, 0));
  Map2D shape;
  shape.rows = shape.source_rows = kRows;
  shape.cols = shape.source_cols = 4;
  std::mutex create_mutex;  // the recorder creates maps under its own lock (head_state_mutex_)
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        for (int h = t * kHeadsPerThread; h < (t + 1) * kHeadsPerThread; ++h) {
          const MapSlot slot{MapKind::Attention, 0, h};
          {
            std::lock_guard<std::mutex> lock(create_mutex);
            live.create_map(id, slot, shape, "probability", "");
          }
          const std::vector<float> row(4, static_cast<float>(h));
          for (int r = 0; r < kRows; ++r) live.write_map_rows(id, slot, r, 1, row);
        }
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  for (int i = 0; i < 50; ++i) live.flush();
  for (auto& th : threads) th.join();
  for (const std::string& e : errors) CHECK(e.empty());
  live.flush();
  const auto snap = live.snapshot();
  for (int h = 0; h < kThreads * kHeadsPerThread; ++h) {
    const Map2D* m = snap->attention_map(0, h);
    REQUIRE(m != nullptr);
    CHECK(m->at(kRows - 1, 3) == static_cast<float>(h));
  }
}
