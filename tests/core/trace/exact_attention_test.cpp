// Exact attention rebuilt from recorded q/k/lse (core/trace/exact_attention.h) on the real model, against
// (a) the recorder's own full-resolution maps (prefill and decode rows; a short prompt is below the 512 map
// edge, so nothing is pooled) and (b) softmax(q k^T / sqrt(d)) computed here in double from the engine's float32
// queries and cached keys. Tolerances follow from float16 storage: q and k are each rounded to 11 significant
// bits, so a score s = scale * q.k moves by at most delta = scale * sum_t |q_t k_t| * 2 * 2^-11 (+ the float32
// kernel's own rounding of the log-sum-exp), and p = exp(s - lse) by a factor within exp(+-delta). The recorded
// maps are float16 too: a further 2^-11 relative, and 6e-8 absolute below float16's normal range.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/common/error.h"
#include "core/trace/exact_attention.h"
#include "core/trace/emit_run.h"
#include "core/trace/float16.h"
#include "core/trace/hdf5_reader.h"
#include "core/trace/hdf5_writer.h"
#include "core/trace/live_trace.h"
#include "core/trace/recorder.h"
#include "tests/support/default_model.h"
#include "tests/support/recorder_run.h"
#include "tests/support/temp_file.h"

using namespace kvscope;

namespace {

constexpr int kNewTokens = 6;
constexpr double kHalfUlp = 1.0 / 2048.0;  // float16's relative rounding bound (11 significant bits)

// The engine's own float32 prefill queries (observation) and keys (the cache at the end of the one-pass
// prefill), kept by an observer that knows nothing of the recorder.
class QueryKeyTap : public engine::RunObserver {
 public:
  explicit QueryKeyTap(const model::ModelConfig& c) : c_(c), queries_(c.n_layers), keys_(c.n_layers) {}
  observation::ObservationRequest request(int, observation::Phase phase) const override {
    observation::ObservationRequest r;
    r.queries = phase == observation::Phase::Prefill;
    return r;
  }
  void on_observation(const observation::AttentionObservation& obs) override {
    if (obs.phase == observation::Phase::Prefill) queries_[obs.layer] = obs.queries;
  }
  void on_step_end(const observation::StepInfo& step, const cache::KVCache& cache, int, float) override {
    if (step.phase != observation::Phase::Prefill || !step.prefill_done) return;
    for (int l = 0; l < c_.n_layers; ++l)
      for (int g = 0; g < c_.n_kv_heads; ++g) {
        const auto k = cache.keys(l, g);
        keys_[l].emplace_back(k.begin(), k.end());
      }
  }
  const float* query(int layer, int position, int head) const {
    return queries_[layer].data() + (static_cast<std::size_t>(position) * c_.n_heads + head) * c_.head_dim;
  }
  const float* key(int layer, int kv_head, int position) const {
    return keys_[layer][kv_head].data() + static_cast<std::size_t>(position) * c_.head_dim;
  }

 private:
  model::ModelConfig c_;
  std::vector<std::vector<float>> queries_;             // [layer][position][head][dim]
  std::vector<std::vector<std::vector<float>>> keys_;   // [layer][kv_head][position][dim]
};

struct Recorded {
  std::shared_ptr<const trace::RunTrace> trace;
  std::unique_ptr<QueryKeyTap> tap;
};

Recorded record(const model::Model& model, const std::vector<int>& prompt, const std::string& policy,
                const std::string& budget, const std::filesystem::path& file = {}, const std::string& spec = "qk=on") {
  const trace::RecordOptions options = trace::RecordOptions::parse(spec);
  trace::LiveTrace live(std::chrono::milliseconds(0));
  std::unique_ptr<trace::Hdf5Writer> writer;
  std::vector<trace::TraceSink*> sinks{&live};
  if (!file.empty()) sinks.push_back((writer = std::make_unique<trace::Hdf5Writer>(file)).get());
  Recorded out;
  out.tap = std::make_unique<QueryKeyTap>(model.config);
  test::run_with_recorder(model, prompt, policy, budget, kNewTokens, &options, sinks, {out.tap.get()});
  if (writer) writer->close();
  out.trace = live.snapshot();
  return out;
}

// delta of the cell (see the file comment) from the stored (float16) query and key.
double score_error_bound(const trace::RunTrace& t, int layer, int head, int q, int k) {
  // Find the spans holding q and k (a live run has one per step).
  auto row_of = [&](int position, bool keys) -> const uint16_t* {
    for (const auto& span : t.qk)
      if (position >= span->first_position && position < span->first_position + span->n_positions) {
        const auto& l = span->layers[layer];
        const std::size_t row = static_cast<std::size_t>(position - span->first_position);
        return keys ? l.keys.data() + (row * t.n_kv_heads + head / (t.n_heads / t.n_kv_heads)) * t.head_dim
                    : l.queries.data() + (row * t.n_heads + head) * t.head_dim;
      }
    FAIL("position " << position << " has no q/k");
    return nullptr;
  };
  const uint16_t* qh = row_of(q, false);
  const uint16_t* kh = row_of(k, true);
  double sum = 0.0;
  for (int d = 0; d < t.head_dim; ++d) sum += std::fabs(trace::half_to_float(qh[d]) * trace::half_to_float(kh[d]));
  return t.qk_scale * sum * 2.0 * kHalfUlp + 1e-5;
}

struct Agreement {
  long compared = 0, absent = 0, exact_zero = 0;
  double worst_excess = 0.0;  // max over cells of |difference| - tolerance (<= 0 when all agree)
};

// Rebuilt cells against a recorded full-resolution map whose row r is query position first_query + r.
Agreement compare_with_map(const trace::RunTrace& t, int layer, int head, const trace::Map2D& recorded, int first_query) {
  REQUIRE(recorded.full_resolution());
  const trace::ExactAttention exact(t, layer, head);
  const int n_cols = std::min(recorded.cols, exact.n_keys());
  const auto region = exact.region(first_query, first_query + recorded.rows, 0, n_cols, recorded.rows, n_cols, trace::Pooling::Max);
  REQUIRE(region.map.full_resolution());
  Agreement a;
  for (int r = 0; r < recorded.rows; ++r)
    for (int c = 0; c < n_cols; ++c) {
      const float rebuilt = region.map.at(r, c), rec = recorded.at(r, c);
      if (std::isnan(rebuilt)) {
        ++a.absent;
        continue;
      }
      ++a.compared;
      if (rebuilt == 0.0f) {
        ++a.exact_zero;
        a.worst_excess = std::max(a.worst_excess, static_cast<double>(rec));  // a 0 must be a recorded 0
        continue;
      }
      const double p = std::max(rebuilt, rec);
      const double tol = p * (std::expm1(score_error_bound(t, layer, head, first_query + r, c)) + kHalfUlp) + 6e-8;
      a.worst_excess = std::max(a.worst_excess, std::fabs(rebuilt - rec) - tol);
    }
  return a;
}

Agreement compare_run(const trace::RunTrace& t, const std::vector<int>& layers) {
  Agreement total;
  for (int l : layers)
    for (int h = 0; h < t.n_heads; ++h) {
      for (const auto& [map, first] : {std::pair{t.attention_map(l, h), 0}, std::pair{t.decode_attention_map(l, h), t.prompt_length}}) {
        REQUIRE(map);
        const Agreement a = compare_with_map(t, l, h, *map, first);
        total.compared += a.compared;
        total.absent += a.absent;
        total.exact_zero += a.exact_zero;
        total.worst_excess = std::max(total.worst_excess, a.worst_excess);
      }
    }
  return total;
}

}  // namespace

TEST_CASE("exact attention from q/k/lse equals the recorded full-resolution maps and a direct softmax", "[trace][model][exact]") {
  const model::Model* model = test::default_model();
  const auto prompt = test::sample_prompt_tokens(*model, "lighthouse_story.txt");
  const int S = static_cast<int>(prompt.size());
  REQUIRE(S > 96);
  REQUIRE(S + kNewTokens <= 512);  // the recorded maps are then at full resolution
  const std::vector<int> layers{0, 7, 29};

  SECTION("full cache: every cell, prefill and decode, and the direct O(n^2) softmax") {
    const Recorded rec = record(*model, prompt, "full", "");
    const trace::RunTrace& t = *rec.trace;
    REQUIRE(trace::ExactAttention::available(t));
    const Agreement a = compare_run(t, layers);
    CHECK(a.absent == 0);
    CHECK(a.compared > 3L * 9 * S * S);
    CHECK(a.worst_excess <= 0.0);

    // (b) softmax(q k^T * scale) in double from the engine's float32 q and k, over the causal prefix.
    const double scale = 1.0 / std::sqrt(static_cast<double>(model->config.head_dim));
    CHECK(t.qk_scale == Approx(scale).epsilon(1e-7));
    double worst_excess = 0.0, worst_relative = 0.0;
    for (int l : layers)
      for (int h = 0; h < t.n_heads; ++h) {
        const int g = h / (t.n_heads / t.n_kv_heads);
        const trace::ExactAttention exact(t, l, h);
        const auto region = exact.region(0, S, 0, S, S, S, trace::Pooling::Max);
        std::vector<double> s(S);
        for (int i = 0; i < S; ++i) {
          double mx = -1e300, sum = 0.0;
          for (int j = 0; j <= i; ++j) {
            double dot = 0.0;
            for (int d = 0; d < t.head_dim; ++d) dot += double(rec.tap->query(l, i, h)[d]) * rec.tap->key(l, g, j)[d];
            s[j] = dot * scale;
            mx = std::max(mx, s[j]);
          }
          for (int j = 0; j <= i; ++j) sum += std::exp(s[j] - mx);
          for (int j = 0; j < S; ++j) {
            const double direct = j <= i ? std::exp(s[j] - mx) / sum : 0.0;
            const double rebuilt = region.map.at(i, j);
            if (j > i) {
              CHECK(rebuilt == 0.0);
              continue;
            }
            const double tol = direct * std::expm1(score_error_bound(t, l, h, i, j)) + 1e-9;
            worst_excess = std::max(worst_excess, std::fabs(rebuilt - direct) - tol);
            if (direct > 1e-3) worst_relative = std::max(worst_relative, std::fabs(rebuilt - direct) / direct);
          }
        }
      }
    CHECK(worst_excess <= 0.0);
    INFO("largest relative error over cells above 1e-3: " << worst_relative);
    CHECK(worst_relative < 0.02);  // float16 q and k: the bound is rarely approached

    // A rebuilt prompt row sums to 1 like any softmax row, pooled or not; a pooled region keeps the max.
    const trace::ExactAttention e(t, 7, 4);
    const auto full = e.region(0, S, 0, S, S, S, trace::Pooling::Max);
    for (int i = 0; i < S; i += 17) {
      double sum = 0.0;
      for (int j = 0; j <= i; ++j) sum += full.map.at(i, j);
      CHECK(sum == Approx(1.0).margin(2e-2));
    }
    const auto pooled = e.region(0, S, 0, S, 10, 10, trace::Pooling::Max);
    CHECK(pooled.map.row_block == (S + 9) / 10);
    float block_max = 0.0f;
    for (int i = 0; i < pooled.map.row_block; ++i)
      for (int j = 0; j < pooled.map.col_block; ++j) block_max = std::max(block_max, full.map.at(i, j));
    CHECK(pooled.map.at(0, 0) == block_max);
    CHECK(e.probability(40, 3) == full.map.at(40, 3));
  }

  SECTION("block-wise prefill that evicts between blocks: evicted keys are 0 in later blocks, every cell rebuilt") {
    const Recorded rec = record(*model, prompt, "h2o:block=32", "48");
    const trace::RunTrace& t = *rec.trace;
    REQUIRE(!t.events.empty());
    const Agreement a = compare_run(t, layers);
    CHECK(a.absent == 0);
    CHECK(a.worst_excess <= 0.0);
    // Evicted keys read 0 although causally visible: more zeros than the causal triangle alone.
    const long causal_zeros = 3L * 9 * (static_cast<long>(S) * (S - 1) / 2);
    CHECK(a.exact_zero > causal_zeros);
  }

  SECTION("trimming before the output: those rows are absent, the rest equal the maps") {
    const Recorded rec = record(*model, prompt, "caote:block=32", "48");
    const Agreement a = compare_run(*rec.trace, layers);
    CHECK(a.absent > 0);
    CHECK(a.compared > 0);
    CHECK(a.worst_excess <= 0.0);
  }

  SECTION("merged keys: cells of a key after a merge changed it are absent, the rest equal the maps") {
    const Recorded rec = record(*model, prompt, "kvmerger", "50%");
    const trace::RunTrace& t = *rec.trace;
    bool merged = false;
    for (const auto& e : t.events) merged = merged || e.action == trace::EventAction::Merged;
    REQUIRE(merged);
    const Agreement a = compare_run(t, layers);
    CHECK(a.absent > 0);
    CHECK(a.worst_excess <= 0.0);
  }
}

TEST_CASE("q/k written to HDF5 read back bit for bit; traces without them say so", "[trace][model][exact]") {
  const model::Model* model = test::default_model();
  const auto prompt = test::sample_prompt_tokens(*model, "lighthouse_story.txt");
  const auto path = test::temp_file("exact_attention_qk");
  const Recorded rec = record(*model, prompt, "h2o:block=32", "48", path);
  const trace::TraceView view = trace::read_trace(path);
  REQUIRE(view.runs.size() == 1);
  const trace::RunTrace& file = *view.runs[0];
  const trace::RunTrace& live = *rec.trace;
  REQUIRE(file.qk.size() == 1);  // one span from the file, one per step live
  CHECK(file.qk.front()->n_positions == static_cast<int>(prompt.size()) + kNewTokens - 1);
  CHECK(file.qk_scale == live.qk_scale);
  for (int l : {0, 29})
    for (int h : {0, 8}) {
      const trace::ExactAttention a(file, l, h), b(live, l, h);
      const int n = a.n_queries();
      REQUIRE(n == b.n_queries());
      const auto ra = a.region(0, n, 0, n, n, n, trace::Pooling::Max), rb = b.region(0, n, 0, n, n, n, trace::Pooling::Max);
      CHECK(std::memcmp(ra.map.values.data(), rb.map.values.data(), ra.map.values.size() * sizeof(float)) == 0);
    }

  // Ranges outside the run, reversed or empty are refused with their numbers.
  const trace::ExactAttention e(file, 0, 0);
  const int n = e.n_queries();
  CHECK_THROWS_WITH(e.region(0, n + 1, 0, 4, 8, 8, trace::Pooling::Max), Catch::Contains("has q/k for positions 0:" + std::to_string(n)));
  CHECK_THROWS_WITH(e.region(9, 3, 0, 4, 8, 8, trace::Pooling::Max), Catch::Contains("9:3 is empty or reversed"));

  // Without q/k: no exact attention, and the error names the record option.
  trace::RunTrace without = file;
  without.qk.clear();
  CHECK_FALSE(trace::ExactAttention::available(without));
  CHECK_THROWS_WITH(trace::ExactAttention(without, 0, 0), Catch::Contains("--record qk=on"));
}

TEST_CASE("qk=layers: keeps the q/k of the layers asked for, says which, and refuses the others by name", "[trace][model][exact]") {
  const model::Model* model = test::default_model();
  const auto prompt = test::sample_prompt_tokens(*model, "lighthouse_story.txt");
  const auto all_path = test::temp_file("exact_attention_qk_all"), some_path = test::temp_file("exact_attention_qk_some");
  const Recorded all = record(*model, prompt, "h2o:block=32", "48", all_path);
  const Recorded some = record(*model, prompt, "h2o:block=32", "48", some_path, "qk=layers:0-3,14");
  const trace::TraceView all_view = trace::read_trace(all_path), some_view = trace::read_trace(some_path);
  const trace::RunTrace &file = *some_view.runs.at(0), &live = *some.trace, &full = *all_view.runs.at(0);
  const std::vector<int> asked{0, 1, 2, 3, 14};

  for (const trace::RunTrace* t : {&file, &live}) {
    CHECK(t->qk_layers == asked);
    CHECK(t->qk_layers_text() == "0-3,14");
    for (int l = 0; l < t->n_layers; ++l) {
      const bool want = std::find(asked.begin(), asked.end(), l) != asked.end();
      CHECK(t->holds_qk(l) == want);
      CHECK(trace::ExactAttention::available(*t, l) == want);
      for (const auto& span : t->qk) CHECK(span->layers.at(static_cast<std::size_t>(l)).queries.empty() == !want);
    }
    // A layer not recorded is refused, naming it and the layers that were.
    CHECK_THROWS_WITH(trace::ExactAttention(*t, 5, 0), Catch::Contains("layer 5") && Catch::Contains("0-3,14"));
    CHECK(trace::ExactAttention::unavailable_reason(*t, 5).find("layer 5's queries and keys were not recorded") != std::string::npos);
    CHECK(trace::ExactAttention::unavailable_reason(*t, 14).empty());
  }
  // A file of every layer (the attribute lists them all) reads as every layer.
  CHECK(full.qk_layers.empty());
  CHECK(full.holds_qk(29));
  CHECK(full.qk_layers_text() == "all");

  // The layers kept hold what a recording of every layer holds, bit for bit.
  for (int l : {0, 14})
    for (int h : {0, 8}) {
      const trace::ExactAttention a(file, l, h), b(full, l, h);
      const int n = a.n_queries();
      REQUIRE(n == b.n_queries());
      const auto ra = a.region(0, n, 0, n, n, n, trace::Pooling::Max), rb = b.region(0, n, 0, n, n, n, trace::Pooling::Max);
      CHECK(std::memcmp(ra.map.values.data(), rb.map.values.data(), ra.map.values.size() * sizeof(float)) == 0);
    }
  // And the file is smaller by about the 25 layers left out (q/k dominate neither file at this length, so only less).
  CHECK(std::filesystem::file_size(some_path) < std::filesystem::file_size(all_path));

  // Written again from memory (saving from the window), the layers stay the ones recorded.
  const auto again = test::temp_file("exact_attention_qk_again");
  {
    trace::Hdf5Writer writer(again);
    trace::emit_run(file, writer);
    writer.close();
  }
  CHECK(trace::read_trace(again).runs.at(0)->qk_layers == asked);

  // A layer the model does not have is refused before the run.
  CHECK_THROWS_WITH(record(*model, prompt, "full", "", {}, "qk=layers:2,40"),
                    Catch::Contains("layer 40") && Catch::Contains("0..29"));
}
