// Saving what is on screen writes what is in memory: a live run emitted into a writer (trace::emit_run)
// must give the file the recording itself wrote into another writer during the same run — every map,
// statistic, series, event, kept-mask cell, step row, token and attribute.
#include <catch2/catch.hpp>

#include "core/run/execute.h"
#include "core/trace/emit_run.h"
#include "core/trace/hdf5_reader.h"
#include "core/trace/hdf5_writer.h"
#include "core/trace/live_trace.h"
#include "tests/support/default_model.h"
#include "tests/support/temp_file.h"
#include "tests/support/trace_compare.h"

using namespace kvscope;
using trace::Map2D;
using trace::RunTrace;

namespace {

void check_maps(const RunTrace::MapTable& got, const RunTrace::MapTable& want, const char* what) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  for (const auto& [key, map] : want) {
    INFO("layer " << key.first << ", head " << key.second);
    const Map2D& g = *got.at(key);
    CHECK(g.rows == map->rows);
    CHECK(g.cols == map->cols);
    CHECK(g.row_block == map->row_block);
    CHECK(g.col_block == map->col_block);
    CHECK(g.source_rows == map->source_rows);
    CHECK(g.source_cols == map->source_cols);
    CHECK(g.values == map->values);  // both went through the same float16 conversion
  }
}

void check_same_file_content(const RunTrace& got, const RunTrace& want) {
  CHECK(got.name == want.name);
  for (const auto& [key, value] : want.metadata) {
    INFO("attribute " << key);
    CHECK(got.meta(key, "(missing)") == value);
  }
  for (const auto& [key, value] : got.metadata) {
    INFO("attribute " << key);
    CHECK(want.metadata.count(key) == 1);
  }
  CHECK(got.complete == want.complete);
  CHECK(got.prompt_ids == want.prompt_ids);
  CHECK(got.prompt_strings == want.prompt_strings);
  CHECK(got.generated_ids == want.generated_ids);
  CHECK(got.generated_strings == want.generated_strings);
  CHECK(got.logprobs == want.logprobs);
  check_maps(got.attention, want.attention, "prefill attention");
  check_maps(got.decode_attention, want.decode_attention, "decode attention");
  check_maps(got.key_similarity, want.key_similarity, "key similarity");
  check_maps(got.value_similarity, want.value_similarity, "value similarity");
  REQUIRE(got.stats.size() == want.stats.size());
  for (const auto& [name, stat] : want.stats) {
    CHECK(got.stats.at(name).values == stat.values);
    CHECK(got.stats.at(name).description == stat.description);
  }
  REQUIRE(got.layer_stats.size() == want.layer_stats.size());
  for (const auto& [name, stat] : want.layer_stats) CHECK(got.layer_stats.at(name).values == stat.values);
  REQUIRE(got.policy_series.size() == want.policy_series.size());
  for (const auto& [name, series] : want.policy_series) {
    CHECK(got.policy_series.at(name).values == series.values);
    CHECK(got.policy_series.at(name).dims == series.dims);
  }
  CHECK(got.layer_budgets == want.layer_budgets);
  test::check_same_events_and_masks(got, want);
  test::check_same_qk(got, want);
  int bad = 0;
  REQUIRE(got.steps.size() == want.steps.size());
  for (std::size_t s = 0; s < want.steps.size(); ++s) {
    const auto& a = got.steps[s];
    const auto& b = want.steps[s];
    bad += a.phase != b.phase || a.step != b.step || a.seq_len != b.seq_len || a.cache_bytes != b.cache_bytes ||
           a.cache_entries != b.cache_entries || a.ms != b.ms || a.token != b.token;
  }
  CHECK(bad == 0);
  CHECK(got.nmse == want.nmse);
}

}  // namespace

TEST_CASE("a live run saved from memory equals the file its recording wrote", "[run][model][trace]") {
  const model::Model& model = *test::default_model();
  for (const char* policy : {"kvmerger", "h2o:block=32", "full"}) {
    INFO("policy " << policy);
    const auto recorded_path = test::temp_file("save_recorded");
    const auto saved_path = test::temp_file("save_from_memory");
    run::RunSpec spec;
    spec.policy = policy;
    spec.budget = std::string(policy) == "full" ? "" : "40%";
    spec.prompt = "The keeper hid the key under the seventh step of the lighthouse stairs, and wrote it down in his log.";
    spec.generation.max_new_tokens = 5;
    spec.generation.stop_at_end_of_generation = false;
    spec.record = "layers=1;heads=0;size=32;nmse=on;qk=on";
    trace::LiveTrace live(std::chrono::milliseconds(0));
    {
      trace::Hdf5Writer writer(recorded_path);
      run::RunSinks sinks;
      sinks.traces = {&writer, &live};
      run::execute(spec, model, sinks);
      writer.close();
    }
    {
      trace::Hdf5Writer writer(saved_path);
      trace::emit_run(*live.snapshot(), writer);
      writer.close();
    }
    const trace::TraceView recorded = trace::read_trace(recorded_path);
    const trace::TraceView saved = trace::read_trace(saved_path);
    CHECK(saved.warnings.empty());
    REQUIRE(recorded.runs.size() == 1);
    REQUIRE(saved.runs.size() == 1);
    check_same_file_content(*saved.runs[0], *recorded.runs[0]);
    CHECK(recorded.runs[0]->events.empty() == (std::string(policy) == "full"));
    CHECK_FALSE(recorded.runs[0]->qk.empty());
    std::filesystem::remove(recorded_path);
    std::filesystem::remove(saved_path);
  }
}

TEST_CASE("a run read from a file saves to an equal file", "[run][model][trace]") {
  const model::Model& model = *test::default_model();
  const auto first = test::temp_file("save_source");
  const auto copy = test::temp_file("save_copy");
  run::RunSpec spec;
  spec.policy = "snapkv";
  spec.budget = "50%";
  spec.prompt = "A short prompt about a lighthouse keeper and the key under the seventh step.";
  spec.generation.max_new_tokens = 4;
  {
    trace::Hdf5Writer writer(first);
    run::RunSinks sinks;
    sinks.traces = {&writer};
    run::execute(spec, model, sinks);
    writer.close();
  }
  const trace::TraceView source = trace::read_trace(first);
  REQUIRE(source.runs.size() == 1);
  {
    trace::Hdf5Writer writer(copy);
    trace::emit_run(*source.runs[0], writer, "renamed");
    writer.close();
  }
  const trace::TraceView again = trace::read_trace(copy);
  REQUIRE(again.runs.size() == 1);
  CHECK(again.runs[0]->name == "renamed");
  RunTrace want = *source.runs[0];
  want.name = "renamed";
  if (want.metadata.count("name")) want.metadata["name"] = "renamed";  // the run group's own name attribute
  check_same_file_content(*again.runs[0], want);
  std::filesystem::remove(first);
  std::filesystem::remove(copy);
}
