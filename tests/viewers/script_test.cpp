#include <catch2/catch.hpp>

#include <cmath>

#include "core/common/error.h"
#include "viewers/budget_plot.h"
#include "viewers/script.h"
#include "viewers/summary.h"
#include "viewers/token_strip.h"

using namespace kvscope;
using namespace kvscope::viewers;

TEST_CASE("scripts parse into steps with their arguments", "[script]") {
  const auto steps = parse_script(
      "# demo\n"
      "load-default\n"
      "  policy snapkv:window=16\n"
      "budget 25%\n"
      "prompt The cat sat on   the mat.  \n"
      "wait 120\n"
      "\n"
      "export attention out/fig.png 800x600\n"
      "screenshot shot.png\r\n"
      "quit\n");
  REQUIRE(steps.size() == 8);
  CHECK(steps[0].command == "load-default");
  CHECK(steps[1].args == std::vector<std::string>{"snapkv:window=16"});
  CHECK(steps[1].line == 3);
  CHECK(steps[3].args == std::vector<std::string>{"The cat sat on   the mat."});
  CHECK(steps[5].args.size() == 3);
  CHECK(steps[6].args[0] == "shot.png");
}

TEST_CASE("script errors name the line and what was expected", "[script]") {
  auto message = [](const std::string& text) {
    try {
      parse_script(text, "demo.kvs");
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message("run\nfly away\n").find("demo.kvs:2: unknown command 'fly'") != std::string::npos);
  CHECK(message("tokens many\n").find("needs an integer") != std::string::npos);
  CHECK(message("quit now\n").find("takes 0 argument(s), got 1") != std::string::npos);
  CHECK(message("view heatmap\n").find("unknown view 'heatmap'") != std::string::npos);
  CHECK(message("export attention a.png 12x\n").find("WIDTHxHEIGHT") != std::string::npos);
  CHECK(message("wait 1.5\n").find("whole seconds") != std::string::npos);
  CHECK(message("mouse 10\n").find("takes 2 argument(s)") != std::string::npos);
  CHECK(message("mouse 10 y\n").find("two integer pixel coordinates") != std::string::npos);
  CHECK(parse_script("mouse 640 260\nclick\n").size() == 2);
  CHECK(parse_script("zoom 2640 2700 2660 2700\nshow 1\n").size() == 2);
  CHECK(message("zoom 2700 2640 2660 2700\n").find("KEY0 < KEY1") != std::string::npos);
  CHECK(message("zoom 1 2 3\n").find("takes 4 argument(s)") != std::string::npos);
  CHECK(message("show first\n").find("needs an integer") != std::string::npos);
  CHECK(parse_script("lock-range on\nlock-range off\n").size() == 2);
  CHECK(message("lock-range maybe\n").find("'lock-range' takes on") != std::string::npos);
  // A page size for live runs (issue 37), and the commands a real-pointer test waits and reads with (issue 38).
  CHECK(parse_script("cache-page 16\npoints p.tsv\nwait-file clicked 30\nstatus s.txt\n").size() == 4);
  CHECK(message("cache-page sixteen\n").find("'cache-page' needs an integer") != std::string::npos);
  CHECK(message("wait-file clicked soon\n").find("'wait-file' takes whole seconds") != std::string::npos);
  CHECK(message("points\n").find("takes 1 argument(s), got 0") != std::string::npos);
  int w = 0, h = 0;
  parse_size("640x480", w, h);
  CHECK(w == 640);
  CHECK(h == 480);
  CHECK_THROWS_AS(parse_size("10x10", w, h), UsageError);
}

TEST_CASE("token boxes wrap at the available width", "[tokens]") {
  const TokenLayout lay = layout_tokens({30, 30, 30, 50, 10}, 100.0f, 2.0f);
  CHECK(lay.x == std::vector<float>{0, 32, 64, 0, 52});
  CHECK(lay.line == std::vector<int>{0, 0, 0, 1, 1});
  CHECK(lay.n_lines == 2);
  // A box wider than the line still gets a line of its own instead of looping.
  const TokenLayout wide = layout_tokens({500, 10}, 100.0f, 0.0f);
  CHECK(wide.line == std::vector<int>{0, 1});
}

TEST_CASE("run numbers: kept share, log-prob gap and divergence against the baseline", "[summary]") {
  trace::RunTrace full, run;
  full.name = "full";
  full.metadata = {{"policy", "full"}, {"full_cache_bytes", "4000"}};
  full.complete = true;
  full.prompt_ids = run.prompt_ids = {1, 2, 3};
  full.generated_ids = {5, 6, 7, 8};
  full.logprobs = {-0.5f, -1.0f, -1.5f, -1.0f};
  full.n_layers = run.n_layers = 2;
  full.n_kv_heads = run.n_kv_heads = 1;
  full.steps.push_back({0, 0, 7, 4000, 14, 0.0, 5});
  run.name = "h2o";
  run.metadata = {{"policy", "h2o"}, {"full_cache_bytes", "4000"}, {"prefill_ms", "12.5"}, {"decode_ms", "30"}};
  run.complete = true;
  run.generated_ids = {5, 6, 9, 8};
  run.logprobs = {-0.5f, -1.0f, -3.5f, -1.0f};
  run.steps.push_back({0, 0, 7, 1000, 3, 0.0, 5});  // 3 of 2 x 1 x 7 entries kept
  const std::vector<const trace::RunTrace*> runs = {&full, &run};
  CHECK(find_baseline(runs, run) == &full);
  CHECK(find_baseline(runs, full) == nullptr);
  const RunNumbers n = run_numbers(run, find_baseline(runs, run));
  CHECK(n.kept_share == Approx(3.0 / 14.0));
  CHECK(n.bytes_share == Approx(1000.0 / 4000.0));  // bytes and entries are different shares: both are shown
  CHECK(run_numbers(full, nullptr).bytes_share == Approx(1.0));
  // Before the baseline finished there is no share of its bytes: no guess from the payload that changes later.
  CHECK(std::isnan(run_numbers(run, nullptr).bytes_share));
  CHECK_FALSE(n.prefill_replayed);
  run.metadata["prefill"] = "replayed from a capture of the same prompt's one-pass prefill";
  CHECK(run_numbers(run, &full).prefill_replayed);
  CHECK(run_numbers(full, nullptr).kept_share == Approx(1.0));
  CHECK(n.mean_logprob == Approx(-1.5));
  CHECK(n.logprob_gap == Approx(-1.5 - (-1.0)));
  CHECK(n.first_divergence == 2);
  CHECK(n.prefill_ms == Approx(12.5));
  CHECK(n.decode_ms_per_token == Approx(10.0));

  // The fidelity block's cache line is the table's two columns, to the digit (issue 38: it said "saved 73.7 %"
  // beside "bytes of full 40 %", from another run).
  const auto [label, value] = cache_at_end_line(n);
  CHECK(label == "cache at the end, of the full cache's");
  CHECK(value == "25% of its bytes, 21% of its entries (the table's columns)");  // 1000 / 4000, 3 / 14
  CHECK(cache_at_end_line(run_numbers(run, nullptr)).second.rfind("- of its bytes, 21% of its entries", 0) == 0);
  CHECK(std::string(kCacheColumnsLegend).find("bytes of full") != std::string::npos);
  CHECK(std::string(kCacheColumnsLegend).find("entries of full") != std::string::npos);
}

TEST_CASE("the Summary's logical and physical bytes come from the run's attributes", "[summary]") {
  trace::RunTrace run;
  run.name = "q8_0";
  run.complete = true;
  // Traces made before the entries' bytes were recorded: no line rather than a made-up number.
  CHECK(stored_bytes_line(run_numbers(run, nullptr)).first.empty());
  run.metadata = {{"policy", "full"}, {"cache_entry_bytes", "2048"}};
  RunNumbers n = run_numbers(run, nullptr);
  CHECK(n.entry_bytes == 2048.0);
  CHECK(n.page_tokens == 0);
  CHECK(stored_bytes_line(n).first == "cache bytes at the end, logical and physical");
  CHECK(stored_bytes_line(n).second == "entries as stored 2.0 KiB (no --cache-page)");
  run.metadata["cache_page_tokens"] = "16";
  run.metadata["cache_paged_bytes"] = "2560";
  n = run_numbers(run, nullptr);
  CHECK(n.page_tokens == 16);
  CHECK(n.paged_bytes == 2560.0);
  CHECK(stored_bytes_line(n).second == "entries as stored 2.0 KiB; in pages of 16 tokens 2.5 KiB (+25.0 %)");
}

TEST_CASE("diagnostic series become one line per stage over layers", "[budget]") {
  policy::Series s;
  s.shape = {3, 4};
  s.dims = {"stage", "layer"};
  s.values = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const auto lines = series_lines(s);
  REQUIRE(lines.size() == 3);
  CHECK(lines[1].name == "stage 1");
  CHECK(lines[1].y == std::vector<double>{5, 6, 7, 8});
  CHECK(lines[2].x == std::vector<double>{0, 1, 2, 3});
  policy::Series t;
  t.shape = {4, 2};
  t.dims = {"layer", "part"};
  t.values = {1, 2, 3, 4, 5, 6, 7, 8};
  const auto parts = series_lines(t);
  REQUIRE(parts.size() == 2);
  CHECK(parts[1].y == std::vector<double>{2, 4, 6, 8});
  policy::Series many;
  many.shape = {100, 2};
  many.dims = {"step", "layer"};
  many.values.assign(200, 1.0);
  const auto picked = series_lines(many, 5);
  REQUIRE(picked.size() == 5);
  CHECK(picked.front().name == "step 0");
  CHECK(picked.back().name == "step 99");
}
