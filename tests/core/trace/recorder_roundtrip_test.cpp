// Recorder -> HDF5 -> reader: the file gives back what the live view holds (float16 tolerance for maps),
// and both agree with what the fake engine fed in.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>

#include "core/analysis/attention_stats.h"
#include "core/analysis/pooling.h"
#include "core/common/error.h"
#include "core/trace/hdf5_reader.h"
#include "core/trace/hdf5_writer.h"
#include "core/trace/live_trace.h"
#include "fake_run.h"
#include "tests/support/temp_file.h"

using namespace kvscope;
using namespace kvscope::trace;
namespace fs = std::filesystem;

namespace {

using test::temp_file;

// Half precision keeps 11 significant bits.
bool close_half(float a, float b) { return std::fabs(a - b) <= 1e-3f * std::max(std::fabs(a), std::fabs(b)) + 1e-7f; }

void check_map(const Map2D& got, const Map2D& want) {
  REQUIRE(got.rows == want.rows);
  REQUIRE(got.cols == want.cols);
  CHECK(got.source_rows == want.source_rows);
  CHECK(got.source_cols == want.source_cols);
  CHECK(got.row_block == want.row_block);
  CHECK(got.col_block == want.col_block);
  CHECK(got.pooling == want.pooling);
  CHECK(got.source_positions == want.source_positions);
  REQUIRE(got.values.size() == want.values.size());
  int bad = 0;
  for (std::size_t i = 0; i < want.values.size(); ++i) bad += !close_half(got.values[i], want.values[i]);
  CHECK(bad == 0);
}

bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

}  // namespace

TEST_CASE("a recorded run reads back equal to the live view", "[trace][roundtrip]") {
  const fs::path path = temp_file("roundtrip");
  test::FakeRun fake;
  RecordOptions options;
  options.full_layers = {0};
  options.full_heads = {1};
  options.max_map_size = 16;  // forces pooling of the 40 x 40 maps (block 3)
  options.pooling = Pooling::Mean;
  std::shared_ptr<const RunTrace> live;
  {
    Hdf5Writer writer(path);
    LiveTrace live_trace(std::chrono::milliseconds(0));
    Recorder rec(options, {&writer, &live_trace}, fake.recorded_run("fake_b30"));
    fake.run_all(rec);
    live = live_trace.snapshot();
    writer.close();
  }
  REQUIRE(live);
  CHECK(live->complete);

  const TraceView view = read_trace(path);
  CHECK(view.warnings.empty());
  REQUIRE(view.runs.size() == 1);
  const RunTrace& got = *view.runs[0];
  CHECK(got.name == "fake_b30");
  CHECK(got.complete);
  CHECK(got.n_layers == 2);
  CHECK(got.n_heads == 4);
  CHECK(got.n_kv_heads == 2);
  CHECK(got.prompt_length == 40);
  CHECK(got.meta("policy") == "fake");
  CHECK(got.meta("stop_reason") == "max_new_tokens");
  CHECK(!got.meta("record_options").empty());
  CHECK(got.prompt_ids == live->prompt_ids);
  CHECK(got.prompt_strings == live->prompt_strings);
  CHECK(got.generated_ids == live->generated_ids);
  CHECK(got.generated_ids == std::vector<int32_t>{7, 200, 201, 202, 203});
  CHECK(got.generated_strings == live->generated_strings);
  CHECK(got.logprobs == live->logprobs);

  SECTION("maps") {
    REQUIRE(got.attention.size() == 8);
    REQUIRE(live->attention.size() == 8);
    for (const auto& [key, map] : live->attention) check_map(*got.attention.at(key), *map);
    REQUIRE(got.key_similarity.size() == 4);
    for (const auto& [key, map] : live->key_similarity) check_map(*got.key_similarity.at(key), *map);
    for (const auto& [key, map] : live->value_similarity) check_map(*got.value_similarity.at(key), *map);
    REQUIRE(got.decode_attention.size() == 8);
    for (const auto& [key, map] : got.decode_attention) {
      const Map2D* from_live = live->decode_attention_map(key.first, key.second);
      REQUIRE(from_live != nullptr);
      check_map(*map, *from_live);
    }
  }
  SECTION("attention maps are the fed probabilities, pooled") {
    // (0, 1) is at full resolution; the others pooled by mean in 3 x 3 blocks.
    const Map2D& full = *live->attention_map(0, 1);
    CHECK(full.full_resolution());
    const auto& dense01 = fake.prefill.at({0, 1});
    for (std::size_t i = 0; i < dense01.size(); ++i) CHECK(full.values[i] == Approx(dense01[i]).margin(1e-7));
    const Map2D& pooled = *live->attention_map(1, 2);
    CHECK(pooled.row_block == 3);
    const Map2D want = analysis::pool_matrix(fake.prefill.at({1, 2}).data(), 40, 40, analysis::PoolShape{40, 40, 3, 3, Pooling::Mean});
    for (std::size_t i = 0; i < want.values.size(); ++i) CHECK(pooled.values[i] == Approx(want.values[i]).margin(1e-6));
  }
  SECTION("decode rows are in position space: evicted entries are gone") {
    // Decode step 2 (index 2): layer 1 head 0 (kv 0) lost position 0 at decode step 1.
    REQUIRE(fake.decode.size() == 4);
    const Map2D& m = *live->decode_attention_map(1, 0);
    CHECK(m.rows == 4);
    CHECK(m.source_cols == 45);
    CHECK(m.col_block == 3);  // 45 positions into at most 16 columns, mean pooled
    REQUIRE(m.cols == 15);
    const auto& want = fake.decode[2].at({1, 0});
    CHECK(want[0] == 0.0f);
    for (int c = 0; c < 15; ++c) CHECK(m.at(2, c) == Approx((want[3 * c] + want[3 * c + 1] + want[3 * c + 2]) / 3.0).margin(1e-7));
    const auto& before = fake.decode[0].at({1, 0});
    CHECK(before[0] > 0.0f);
    CHECK(m.at(0, 0) == Approx((before[0] + before[1] + before[2]) / 3.0).margin(1e-7));
  }
  SECTION("statistics equal the direct computation on the fed matrices") {
    for (int l = 0; l < 2; ++l)
      for (int h = 0; h < 4; ++h) {
        const auto st = analysis::attention_stats(fake.prefill.at({l, h}).data(), 40, 32);
        CHECK(got.stat("cake_window_entropy")->values[l][h] == Approx(st.cake_window_entropy).epsilon(1e-6));
        CHECK(got.stat("cake_column_variance")->values[l][h] == Approx(st.cake_column_variance).epsilon(1e-6));
        CHECK(got.stat("d2o_colsum_variance")->values[l][h] == Approx(st.d2o_colsum_variance).epsilon(1e-6));
        CHECK(got.stat("mean_row_entropy")->values[l][h] == Approx(st.mean_row_entropy).epsilon(1e-5));
      }
    for (const auto& [name, stat] : live->stats) CHECK(got.stat(name)->values == stat.values);
    for (const auto& [name, stat] : live->layer_stats) CHECK(got.layer_stat(name)->values == stat.values);
    CHECK(got.layer_stat("cake_layer_entropy")->values.size() == 2);
    CHECK(got.layer_budgets == std::vector<int>{30, 30});
  }
  SECTION("events and kept mask") {
    REQUIRE(got.events.size() == live->events.size());
    CHECK(static_cast<int>(got.events.size()) == fake.expected_evicted + fake.expected_merged);
    for (std::size_t i = 0; i < got.events.size(); ++i) {
      const Event &a = got.events[i], &b = live->events[i];
      CHECK(a.step == b.step);
      CHECK(a.phase == b.phase);
      CHECK(a.layer == b.layer);
      CHECK(a.kv_head == b.kv_head);
      CHECK(a.position == b.position);
      CHECK(same_float(a.score, b.score));
      CHECK(same_float(a.secondary_score, b.secondary_score));
      CHECK(a.action == b.action);
      CHECK(a.merge_target == b.merge_target);
      CHECK(a.merge_weight == b.merge_weight);
    }
    int merged = 0;
    for (const auto& e : got.events)
      if (e.action == EventAction::Merged) {
        ++merged;
        CHECK(e.position == 9);
        CHECK(e.merge_target == 8);
        CHECK(e.merge_weight == 0.25f);
        CHECK(e.score == 9.0f);
      }
    CHECK(merged == 1);
    REQUIRE(got.kept_mask.size() == 2);
    const KeptMask& k0 = got.kept_mask[0];
    CHECK(k0.n_steps == 5);
    CHECK(k0.n_positions == 45);
    CHECK(k0.at(0, 5, 0) == kEvicted);
    CHECK(k0.at(0, 9, 0) == kMergedAway);
    CHECK(k0.at(0, 8, 4) == kKept);
    CHECK(k0.at(1, 5, 0) == kKept);
    CHECK(k0.at(0, 43, 3) == kEvicted);  // not yet seen at step 3
    CHECK(k0.at(0, 43, 4) == kKept);
    CHECK(k0.at(0, 44, 4) == kEvicted);  // the last generated token is never fed back
    CHECK(got.kept_mask[1].at(0, 0, 1) == kKept);
    CHECK(got.kept_mask[1].at(0, 0, 2) == kEvicted);
    for (std::size_t l = 0; l < 2; ++l) CHECK(got.kept_mask[l] == live->kept_mask[l]);
    // Every event is a transition in the mask: present before its step, gone at it.
    for (const auto& e : got.events) {
      const KeptMask& m = got.kept_mask[e.layer];
      const int row = got.step_row(e);
      CHECK(m.at(e.kv_head, e.position, row) == (e.action == EventAction::Merged ? kMergedAway : kEvicted));
      if (row > 0) CHECK(m.at(e.kv_head, e.position, row - 1) == kKept);
    }
    // The decode eviction happened in decode step 1, row 2.
    CHECK(got.events.back().phase == 1);
    CHECK(got.events.back().step == 1);
    CHECK(got.step_row(got.events.back()) == 2);
  }
  SECTION("steps") {
    REQUIRE(got.steps.size() == 5);
    CHECK(got.first_decode_step() == 1);
    for (std::size_t i = 0; i < got.steps.size(); ++i) {
      CHECK(got.steps[i].phase == live->steps[i].phase);
      CHECK(got.steps[i].step == live->steps[i].step);
      CHECK(got.steps[i].seq_len == live->steps[i].seq_len);
      CHECK(got.steps[i].cache_bytes == live->steps[i].cache_bytes);
      CHECK(got.steps[i].cache_entries == live->steps[i].cache_entries);
      CHECK(got.steps[i].ms == live->steps[i].ms);
      CHECK(got.steps[i].token == live->steps[i].token);
    }
    CHECK(got.steps[0].cache_entries == 2 * 2 * 40 - 6);
  }
  fs::remove(path);
}

TEST_CASE("several runs share one file", "[trace][roundtrip]") {
  const fs::path path = temp_file("multi");
  {
    Hdf5Writer writer(path);
    for (const char* name : {"a_b10", "b_b20pct"}) {
      test::FakeRun fake;
      RecordOptions options;
      options.similarity = false;
      Recorder rec(options, {&writer}, fake.recorded_run(name));
      fake.run_all(rec);
    }
    CHECK_THROWS_AS(writer.begin_run(RunLayout{"a_b10", {}, 1, 1, 1, 1, 1, 1, {}, {}, 0, 1, Pooling::Max, false}), UsageError);
    CHECK_THROWS_AS(writer.begin_run(RunLayout{"bad/name", {}, 1, 1, 1, 1, 1, 1, {}, {}, 0, 1, Pooling::Max, false}), UsageError);
    writer.close();
  }
  const TraceView view = read_trace(path);
  REQUIRE(view.runs.size() == 2);
  CHECK(view.find("a_b10") != nullptr);
  CHECK(view.find("b_b20pct") != nullptr);
  CHECK(view.find("a_b10")->key_similarity.empty());
  const TraceView one = read_trace(path, ReadOptions{false, false, {"b_b20pct"}});
  REQUIRE(one.runs.size() == 1);
  CHECK(one.runs[0]->attention.empty());
  CHECK(one.runs[0]->kept_mask.empty());
  CHECK(one.runs[0]->events.size() == 7);
  CHECK_THROWS_AS(read_trace(path, ReadOptions{true, true, {"nope"}}), UsageError);
  const TraceSummary s = summarize_trace(path);
  REQUIRE(s.runs.size() == 2);
  CHECK(s.runs[0].n_evicted == 6);
  CHECK(s.runs[0].n_merged == 1);
  CHECK(s.runs[0].n_steps == 5);
  fs::remove(path);
}

TEST_CASE("run names follow policy and budget", "[trace]") {
  CHECK(run_name("h2o", "128") == "h2o_b128");
  CHECK(run_name("snapkv:window=32", "20%") == "snapkv_window_32_b20pct");
  CHECK(run_name("full", "") == "full");
}

TEST_CASE("record options parse and reject bad keys", "[trace]") {
  const auto o = RecordOptions::parse("layers=0,3;heads=1;pooling=mean;size=256;similarity=off;nmse=on;decode=off");
  CHECK(o.full_layers == std::vector<int>{0, 3});
  CHECK(o.full_heads == std::vector<int>{1});
  CHECK(o.pooling == Pooling::Mean);
  CHECK(o.max_map_size == 256);
  CHECK_FALSE(o.similarity);
  CHECK(o.nmse);
  CHECK_FALSE(o.decode_attention);
  CHECK(o.full_resolution(3, 1));
  CHECK_FALSE(o.full_resolution(3, 0));
  CHECK_FALSE(o.full_resolution(1, 1));
  CHECK_THROWS_AS(RecordOptions::parse("layer=0"), UsageError);
  CHECK_THROWS_AS(RecordOptions::parse("pooling=median"), UsageError);
  CHECK_THROWS_AS(RecordOptions::parse("layers=a"), UsageError);
  CHECK_THROWS_AS(RecordOptions::parse("nmse=maybe"), UsageError);
  CHECK_THROWS_AS(RecordOptions::parse("size=3"), UsageError);
}

TEST_CASE("qk=layers: records q/k of the layers listed, as ranges", "[trace]") {
  const auto some = RecordOptions::parse("qk=layers:0-3,14;size=64");
  CHECK(some.qk);
  CHECK(some.qk_layers == std::vector<int>{0, 1, 2, 3, 14});
  CHECK(some.records_qk(2));
  CHECK(some.records_qk(14));
  CHECK_FALSE(some.records_qk(4));
  CHECK(some.max_map_size == 64);
  CHECK(RecordOptions::parse("qk=layers:5,1-2,2").qk_layers == std::vector<int>{1, 2, 5});  // sorted, once each
  const auto all = RecordOptions::parse("qk=on");
  CHECK(all.qk_layers.empty());
  CHECK(all.records_qk(29));
  CHECK_FALSE(RecordOptions::parse("qk=off").records_qk(0));
  // A capture recorded for other layers is not reused: the options' JSON differs.
  CHECK(some.to_json() != all.to_json());
  CHECK(format_layer_list(some.qk_layers) == "0-3,14");
  CHECK(format_layer_list({7}) == "7");
  for (const char* bad : {"qk=layers:", "qk=layers:3-1", "qk=layers:a", "qk=layers:-2", "qk=layers:1,,2", "qk=layers:1-"})
    CHECK_THROWS_WITH(RecordOptions::parse(bad), Catch::Contains("layers") && Catch::Contains("0-3,14"));
  CHECK_THROWS_WITH(RecordOptions::parse("qk=maybe"), Catch::Contains("on, off or layers:"));
}
