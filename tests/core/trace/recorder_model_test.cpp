// The Recorder on the real model: recording never changes what the model generates, the recorded maps are
// attention (causal rows summing to 1), the events and kept mask agree with the final cache, and the
// shadow-cache NMSE is 0 when nothing is evicted and positive when something is.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/common/error.h"
#include "core/engine/engine.h"
#include "core/model/model.h"
#include "tests/support/default_model.h"
#include "tests/support/recorder_run.h"
#include "core/policy/registry.h"
#include "core/trace/live_trace.h"
#include "core/trace/recorder.h"

using namespace kvscope;

namespace {

constexpr int kNewTokens = 6;

struct Recorded {
  engine::RunResult result;
  std::shared_ptr<const trace::RunTrace> trace;
};

Recorded run(const model::Model& model, const std::vector<int>& prompt, const std::string& policy_name,
             const std::string& budget, bool record) {
  trace::LiveTrace live(std::chrono::milliseconds(0));
  trace::RecordOptions ro;
  ro.nmse = true;
  Recorded out;
  out.result = test::run_with_recorder(model, prompt, policy_name, budget, kNewTokens, record ? &ro : nullptr, {&live});
  if (record) out.trace = live.snapshot();
  return out;
}

}  // namespace

TEST_CASE("recording a real run: same tokens, attention maps, events, NMSE", "[trace][model]") {
  const model::Model* model = test::default_model();
  const auto prompt = test::sample_prompt_tokens(*model, "lighthouse_story.txt");
  const int S = static_cast<int>(prompt.size());
  REQUIRE(S > 64);

  const Recorded plain = run(*model, prompt, "h2o", "32", false);
  const Recorded rec = run(*model, prompt, "h2o", "32", true);
  CHECK(rec.result.generated_tokens == plain.result.generated_tokens);
  REQUIRE(rec.trace);
  const trace::RunTrace& t = *rec.trace;
  CHECK(t.complete);
  CHECK(t.generated_ids == std::vector<int32_t>(plain.result.generated_tokens.begin(), plain.result.generated_tokens.end()));

  // Prefill maps at full resolution (S < 512): causal rows of probabilities.
  const trace::Map2D* m = t.attention_map(7, 4);
  REQUIRE(m);
  CHECK(m->full_resolution());
  CHECK(m->rows == S);
  double worst = 0;
  for (int i = 0; i < S; ++i) {
    double sum = 0;
    for (int j = 0; j < S; ++j) {
      sum += m->at(i, j);
      if (j > i) CHECK(m->at(i, j) == 0.0f);
    }
    worst = std::max(worst, std::fabs(sum - 1.0));
  }
  CHECK(worst < 1e-4);
  // Key self-similarity is 1 on the diagonal.
  const trace::Map2D* ks = t.key_similarity_map(3, 1);
  REQUIRE(ks);
  CHECK(ks->at(10, 10) == Approx(1.0f).margin(1e-4));
  CHECK(t.stat("cake_window_entropy")->values[0][0] > 0.0);

  // Events against the final state: every (layer, kv head) ends with the cache length the engine reports,
  // and the kept mask at the last step counts exactly those entries.
  REQUIRE(t.kept_mask.size() == 30);
  for (int l = 0; l < 30; ++l)
    for (int g = 0; g < 3; ++g) {
      const auto& k = t.kept_mask[l];
      int kept = 0;
      for (int p = 0; p < k.n_positions; ++p) kept += k.at(g, p, k.n_steps - 1) == trace::kKept;
      CHECK(kept == rec.result.kept[l][g]);
    }
  long evictions = 0;
  for (const auto& e : t.events) evictions += e.action == trace::EventAction::Evicted;
  // The cache holds prompt + fed tokens minus what left: every departure is an event.
  long expected = 0;
  for (int l = 0; l < 30; ++l)
    for (int g = 0; g < 3; ++g) expected += (S + kNewTokens - 1) - rec.result.kept[l][g];
  CHECK(evictions == expected);

  // NMSE: one row per decode step, positive somewhere once the cache is compressed.
  REQUIRE(t.nmse.size() == static_cast<std::size_t>(kNewTokens - 1));
  double max_nmse = 0;
  for (const auto& row : t.nmse)
    for (float v : row) {
      CHECK(std::isfinite(v));
      max_nmse = std::max(max_nmse, static_cast<double>(v));
    }
  CHECK(max_nmse > 1e-6);

  // A budget that holds the whole run evicts nothing: the compressed cache is the full cache.
  const Recorded roomy = run(*model, prompt, "h2o", std::to_string(S + kNewTokens), true);
  CHECK(roomy.trace->events.empty());
  for (const auto& row : roomy.trace->nmse)
    for (float v : row) CHECK(v == 0.0f);
}
