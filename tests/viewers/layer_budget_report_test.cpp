// Budgets reported the same way for every policy (viewers/layer_budget_report.h, issue 25): SnapKV (appends decode
// tokens behind a fixed prompt budget) and KVMerger (merges the prompt, appends decode tokens) on the same prompt
// and budget. The reported prompt budget per layer must equal the prompt entries the layer's most-filled KV head
// held at the end of prefill, and the decode growth the generated entries held at the end, both counted here
// from the recorded events alone (start with every processed position, remove what each event names).
#include <catch2/catch.hpp>

#include <algorithm>

#include "tests/support/lighthouse_trace.h"
#include "viewers/layer_budget_report.h"

using namespace kvscope;
using namespace kvscope::viewers;

namespace {

struct Counted {
  int prompt_after_prefill = 0;  // the layer's most prompt entries in one KV head at the end of prefill
  int generated_at_end = 0;      // the layer's most generated entries in one KV head at the end
};

Counted count_from_events(const trace::RunTrace& run, int layer) {
  Counted out;
  const int processed = run.steps.back().seq_len;
  for (int g = 0; g < run.n_kv_heads; ++g) {
    int prompt_removed_in_prefill = 0, generated_removed = 0;
    for (const auto& e : run.events) {
      if (e.layer != layer || e.kv_head != g) continue;
      if (e.phase == 0 && e.position < run.prompt_length) ++prompt_removed_in_prefill;
      if (e.position >= run.prompt_length) ++generated_removed;
    }
    out.prompt_after_prefill = std::max(out.prompt_after_prefill, run.prompt_length - prompt_removed_in_prefill);
    out.generated_at_end = std::max(out.generated_at_end, processed - run.prompt_length - generated_removed);
  }
  return out;
}

}  // namespace

TEST_CASE("SnapKV and KVMerger report prompt budgets and decode growth the same way", "[model]") {
  for (const std::string policy : {"snapkv", "kvmerger"}) {
    const auto run = test::record_lighthouse_run(policy, "25%");
    INFO(policy << ": prompt " << run->prompt_length << " tokens, " << run->n_generated() << " generated, "
                << run->events.size() << " events");
    REQUIRE(run->n_generated() == 8);
    const LayerBudgetReport report = layer_budget_report(*run);
    REQUIRE(static_cast<int>(report.prompt.size()) == run->n_layers);
    REQUIRE(static_cast<int>(report.decode_held.size()) == run->n_layers);
    for (int l = 0; l < run->n_layers; ++l) {
      const Counted c = count_from_events(*run, l);
      CHECK(report.prompt[l] == c.prompt_after_prefill);
      CHECK(report.decode_held[l] == c.generated_at_end);
      CHECK(report.prompt[l] < run->prompt_length);  // the policy compressed the prompt
    }
    // Both append the decode tokens they were fed (7: the last generated token is never fed back).
    CHECK(decode_growth_text(report) == "+7 in every layer");
  }
}
