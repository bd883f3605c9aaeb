// The Quality panel's model: a sweep file (rows.csv, eval.h5, the folder) read into curves (points per
// policy, budgets in axis order, means over prompts computed by hand here), malformed files refused with the
// file named, the live budget's place on the axis, and the click -> (policy, budget) mapping. Then the
// Summary's fidelity numbers for a live run against `kvscope eval fidelity` on the same run.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <thread>

#include <unistd.h>

#include "core/common/error.h"
#include "core/eval/sweep_file.h"
#include "core/model/model.h"
#include "core/trace/hdf5_util.h"
#include "tests/support/command_output.h"
#include "viewers/quality_model.h"
#include "viewers/quality_plot.h"
#include "viewers/session.h"
#include "viewers/summary.h"

using namespace kvscope;
using namespace kvscope::viewers;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("kvscope_quality_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

void write(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// Two prompts, two policies, budgets written out of order and in both units. A quoted policy spec carries
// commas, as `kvscope sweep` writes it.
const char* const kCsv =
    "cell,prompt,policy,budget,top1_agreement,kl_mean\n"
    "0,a.txt,h2o,50%,1,0.01\n"
    "1,a.txt,h2o,10%,0.5,0.4\n"
    "2,a.txt,\"snapkv:window=8,kernel=3\",128,0.75,0.2\n"
    "3,a.txt,h2o,128,0.25,0.3\n"
    "4,b.txt,h2o,50%,0.8,0.03\n"
    "5,b.txt,h2o,10%,0.7,0.6\n"
    "6,b.txt,\"snapkv:window=8,kernel=3\",25%,0.9,0.05\n";

// A sweep folder written by the sweep store: one prompt, every (policy, budget) cell, each metric of the
// kind set to value(cell).
void write_sweep(const fs::path& dir, const std::string& kind, const std::vector<std::string>& policies,
                 const std::vector<std::string>& budgets, double (*value)(std::size_t cell)) {
  fs::remove_all(dir);
  eval::SweepGrid grid;
  grid.eval_kind = kind;
  grid.prompts = {"case0"};
  grid.prompt_digests = {"x"};
  grid.policies = policies;
  grid.budgets = budgets;
  eval::SweepStore store(dir, grid);
  for (std::size_t cell = 0; cell < grid.size(); ++cell) {
    eval::SweepRow row;
    row.cell = cell;
    row.prompt = "case0";
    row.policy = grid.cell(cell).policy.policy;
    row.budget = grid.cell(cell).policy.budget;
    for (const auto& name : eval::metric_names(kind)) row.metrics.emplace_back(name, value(cell));
    store.append(row);
  }
}

std::string error_of(const fs::path& path) {
  try {
    eval::open_sweep_file(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a sweep CSV becomes one curve per policy over budgets in axis order") {
  const fs::path csv = scratch("rows.csv");
  write(csv, kCsv);
  const QualityCurves c = quality_curves(eval::open_sweep_file(csv));
  CHECK(c.eval_kind.empty());  // two metric columns: no kind's full set
  CHECK(c.metrics == std::vector<std::string>{"top1_agreement", "kl_mean"});
  CHECK(c.policies == std::vector<std::string>{"h2o", "snapkv:window=8,kernel=3"});
  CHECK(c.budgets == std::vector<std::string>{"10%", "25%", "50%", "128"});  // shares by size, then tokens
  CHECK(c.rows.size() == 7);
  // Means over the prompts that have the cell, by hand: h2o at 50%: (1 + 0.8) / 2; at 10%: (0.5 + 0.7) / 2.
  CHECK(c.mean("h2o", "50%", "top1_agreement") == Approx(0.9));
  CHECK(c.mean("h2o", "10%", "kl_mean") == Approx(0.5));
  CHECK(c.mean("h2o", "128", "top1_agreement") == Approx(0.25));
  CHECK(std::isnan(c.mean("h2o", "25%", "top1_agreement")));  // no such cell: no point
  CHECK(c.mean("snapkv:window=8,kernel=3", "25%", "kl_mean") == Approx(0.05));
  CHECK(default_metric(c) == "top1_agreement");
  // The folder stands for its rows.csv.
  CHECK(quality_curves(eval::open_sweep_file(csv.parent_path())).rows.size() == 7);

  // The panel's figure has one line per policy with a point per budget it covers.
  const Figure f = quality_figure(c, "top1_agreement");
  REQUIRE(f.parts.size() == 1);
  const auto& plot = std::get<LinePlot>(f.parts.front());
  REQUIRE(plot.series.size() == 2);
  CHECK(plot.series[0].x == std::vector<double>{0, 2, 3});
  CHECK(plot.series[1].x == std::vector<double>{1, 3});
  CHECK(plot.x_tick_labels == c.budgets);
}

TEST_CASE("the A - B view plots each policy's paired difference to the baseline with its interval") {
  // Two prompts: h2o beats snapkv by 0.1 on one and 0.3 on the other; the paired mean is 0.2 and the interval
  // lies between the two differences.
  std::vector<eval::SweepRow> rows;
  auto add = [&](std::size_t cell, const char* prompt, const char* policy, double kl) {
    eval::SweepRow r;
    r.cell = cell, r.prompt = prompt, r.policy = policy, r.budget = "10%";
    r.metrics = {{"kl_mean", kl}};
    rows.push_back(r);
  };
  add(0, "a", "snapkv", 0.5), add(1, "a", "h2o", 0.6), add(2, "b", "snapkv", 0.2), add(3, "b", "h2o", 0.5);
  const Figure f = quality_difference_vs_budget(rows, {"snapkv", "h2o"}, {"10%"}, "kl_mean", "snapkv", "t");
  const auto& plot = std::get<LinePlot>(f.parts.front());
  REQUIRE(plot.series.size() == 1);  // the baseline has no curve of its own
  const LineSeries& s = plot.series.front();
  CHECK(s.name == "h2o - snapkv");
  REQUIRE(s.y.size() == 1);
  CHECK(s.y[0] == Approx(0.2));
  CHECK(s.y_low[0] >= 0.1 - 1e-12);
  CHECK(s.y_high[0] <= 0.3 + 1e-12);
  CHECK(s.y_low[0] <= 0.2);
  CHECK_THROWS(quality_difference_vs_budget(rows, {"snapkv", "h2o"}, {"10%"}, "kl_mean", "tova", "t"));
}

TEST_CASE("budgets of one unit sit at their values on the x axis; mixed units stay categories") {
  // Shares of the prompt: 10%, 25%, 50% at x = 10, 25, 50 (not 0, 1, 2), unevenly spaced as the numbers are.
  QualityCurves c;
  std::size_t cell = 0;
  for (const char* budget : {"50%", "10%", "25%"})
    for (const char* policy : {"h2o", "snapkv"}) {
      eval::SweepRow r;
      r.cell = cell++, r.prompt = "a", r.policy = policy, r.budget = budget;
      r.metrics = {{"kl_mean", std::string(policy) == "h2o" ? 0.2 : 0.4}};
      c.add(r);
    }
  const BudgetAxis axis = budget_axis(c.budgets);
  CHECK_FALSE(axis.categorical);
  CHECK(axis.x == std::vector<double>{10, 25, 50});
  CHECK(axis.label == "budget (% of the prompt kept)");
  const Figure f = quality_figure(c, "kl_mean");
  const auto& plot = std::get<LinePlot>(f.parts.front());
  CHECK(plot.x_tick_labels.empty());  // numeric ticks
  CHECK(plot.series[0].x == std::vector<double>{10, 25, 50});
  // The live budget at its value; a click picks by the value too (1 unit per px, 0.01 per px up).
  CHECK(budget_position(c, "30%") == Approx(30.0));
  CHECK(budget_position(c, "25%") == 25.0);
  const auto p = point_near(c, "kl_mean", 25.0 + 3, 0.4, 1.0, 0.01);
  REQUIRE(p.has_value());
  CHECK(p->policy == "snapkv");
  CHECK(p->budget == "25%");
  CHECK(p->x == 25.0);
  // A compression ratio sits at the share it keeps: cr:0.75 keeps 25 %, beside 10 %.
  CHECK(budget_axis({"10%", "cr:0.75"}).x == std::vector<double>{10, 25});
  // Token budgets: numbers too; mixed with shares: categories in order.
  CHECK(budget_axis({"64", "128"}).x == std::vector<double>{64, 128});
  CHECK(budget_axis({"64", "128"}).label == "budget (tokens per layer and KV head)");
  const BudgetAxis mixed = budget_axis({"10%", "128"});
  CHECK(mixed.categorical);
  CHECK(mixed.x == std::vector<double>{0, 1});
}

TEST_CASE("a log y axis only where every value drawn is above zero") {
  QualityCurves c;
  auto add = [&](std::size_t cell, const char* prompt, const char* policy, const char* budget, double kl) {
    eval::SweepRow r;
    r.cell = cell, r.prompt = prompt, r.policy = policy, r.budget = budget;
    r.metrics = {{"kl_mean", kl}, {"top1_agreement", kl > 0.1 ? 0.5 : 0.0}};
    c.add(r);
  };
  // KL over two prompts, spanning two decades: positive everywhere.
  add(0, "a", "h2o", "10%", 0.9), add(1, "b", "h2o", "10%", 1.1), add(2, "a", "h2o", "50%", 0.01),
      add(3, "b", "h2o", "50%", 0.02);
  CHECK(log_scale_possible(c, "kl_mean", ""));
  CHECK(std::get<LinePlot>(quality_figure(c, "kl_mean", "", true).parts.front()).log_y);
  CHECK_FALSE(std::get<LinePlot>(quality_figure(c, "kl_mean", "", false).parts.front()).log_y);
  // A zero agreement (50%: both prompts 0) cannot sit on a log axis; the figure stays linear.
  CHECK_FALSE(log_scale_possible(c, "kl_mean", "h2o"));  // differences: never
  CHECK_FALSE(log_scale_possible(c, "top1_agreement", ""));
  CHECK_FALSE(std::get<LinePlot>(quality_figure(c, "top1_agreement", "", true).parts.front()).log_y);
  CHECK_FALSE(log_scale_possible(c, "no_such_metric", ""));
}

TEST_CASE("a sweep's eval.h5 reads back the rows its store wrote, in the store's column order") {
  const fs::path dir = scratch("h5sweep");
  write_sweep(dir, "needle", {"h2o", "tova"}, {"50%", "5%"}, [](std::size_t cell) { return cell == 1 ? 1.0 : 0.0; });
  fs::remove(dir / "rows.csv");  // the folder now stands for its eval.h5
  const eval::SweepTable t = eval::open_sweep_file(dir);
  CHECK(t.path.filename() == "eval.h5");
  CHECK(t.eval_kind == "needle");
  CHECK(t.metrics == eval::metric_names("needle"));
  const QualityCurves c = quality_curves(t);
  CHECK(c.policies == std::vector<std::string>{"h2o", "tova"});
  CHECK(c.budgets == std::vector<std::string>{"5%", "50%"});
  CHECK(default_metric(c) == "exact_match");
  CHECK(c.mean("h2o", "5%", "exact_match") == 1.0);  // cell 1 is h2o at 5%
  CHECK(c.mean("tova", "50%", "exact_match") == 0.0);
}

TEST_CASE("malformed sweep files are refused with the file and what was expected") {
  const fs::path bad = scratch("bad.csv");
  write(bad, "run,policy,value\nx,h2o,1\n");
  CHECK_THAT(error_of(bad),
             Catch::Contains("bad.csv") && Catch::Contains("should start with cell,prompt,policy,budget"));
  write(bad, "cell,prompt,policy,budget,kl_mean\n0,a,h2o,10%\n");
  CHECK_THAT(error_of(bad), Catch::Contains("line 2 has 4 fields; the header names 5"));
  write(bad, "cell,prompt,policy,budget,kl_mean\n0,a,h2o,10%,lots\n");
  CHECK_THAT(error_of(bad), Catch::Contains("line 2, column kl_mean: 'lots' is not a number"));
  write(bad, "cell,prompt,policy,budget,kl_mean\n0,a,,10%,0.1\n");
  CHECK_THAT(error_of(bad), Catch::Contains("line 2 has an empty policy"));
  write(bad, "");
  CHECK_THAT(error_of(bad), Catch::Contains("is empty"));
  // A header and no rows reads, but has nothing to plot.
  write(bad, "cell,prompt,policy,budget,kl_mean\n");
  CHECK_THROWS_WITH(quality_curves(eval::open_sweep_file(bad)), Catch::Contains("has no rows"));
  // A line cut off by a killed sweep (no newline) is dropped, as the sweep store drops it.
  write(bad, "cell,prompt,policy,budget,kl_mean\n0,a,h2o,10%,0.1\n1,a,h2o,2");
  CHECK(eval::open_sweep_file(bad).rows.size() == 1);
  CHECK_THAT(error_of(scratch("missing.csv")), Catch::Contains("does not exist"));
  const fs::path empty_dir = scratch("empty_dir");
  fs::create_directories(empty_dir);
  CHECK_THAT(error_of(empty_dir), Catch::Contains("holds no rows.csv or eval.h5"));

  // HDF5: a file that is not a sweep, and a sweep file cut short (checked in a child process first).
  const fs::path dir = scratch("h5bad");
  write_sweep(dir, "fidelity", {"h2o"}, {"10%"}, [](std::size_t) { return 0.5; });
  const fs::path h5 = dir / "eval.h5";
  const auto size = fs::file_size(h5);
  fs::resize_file(h5, size / 2);
  const std::string cut = error_of(h5);
  CHECK_THAT(cut, Catch::Contains("eval.h5"));
  CHECK_FALSE(cut.empty());
  const fs::path no_eval = scratch("no_eval.h5");
  {
    namespace h5 = trace::h5;
    h5::Handle file(H5Fcreate(no_eval.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    REQUIRE(file.valid());
    h5::ensure_group(file, "runs");
  }
  CHECK_THAT(error_of(no_eval), Catch::Contains("no_eval.h5' has no /eval group; expected a sweep's eval.h5"));
  const fs::path trace_like = scratch("other.h5");
  write(trace_like, std::string("\x89HDF\r\n\x1a\n", 8) + std::string(64, '\0'));
  CHECK_THAT(error_of(trace_like), Catch::Contains("sweep file") && Catch::Contains("other.h5"));
}

TEST_CASE("the live budget's place on the axis, and which point a click picks") {
  const fs::path csv = scratch("rows_click.csv");
  write(csv, kCsv);
  const QualityCurves c = quality_curves(eval::open_sweep_file(csv));
  CHECK(budget_position(c, "25%") == 1.0);
  CHECK(budget_position(c, "128") == 3.0);
  // 30% lies between 25% (index 1) and 50% (index 2): 1 + (0.30 - 0.25) / (0.50 - 0.25).
  REQUIRE(budget_position(c, "30%").has_value());
  CHECK(*budget_position(c, "30%") == Approx(1.2));
  CHECK_FALSE(budget_position(c, "5%").has_value());  // left of every share
  CHECK_FALSE(budget_position(c, "64").has_value());  // one token budget only: nothing brackets it
  CHECK_FALSE(budget_position(c, "").has_value());    // the full cache has no budget

  // A plot 100 px per budget step and 200 px per unit of the metric (0.005 units per px).
  const double ux = 0.01, uy = 0.005;
  // h2o at 50% (x 2, y 0.9): a click 3 px right and 4 px up is 5 px away.
  auto p = point_near(c, "top1_agreement", 2.0 + 3 * ux, 0.9 + 4 * uy, ux, uy);
  REQUIRE(p.has_value());
  CHECK(p->policy == "h2o");
  CHECK(p->budget == "50%");
  // Between h2o at 128 (x 3, y 0.25) and snapkv at 128 (x 3, y 0.75): nearer to snapkv.
  p = point_near(c, "top1_agreement", 3.0, 0.75 - 6 * uy, ux, uy);
  REQUIRE(p.has_value());
  CHECK(p->policy == "snapkv:window=8,kernel=3");
  CHECK(p->budget == "128");
  // 20 px from every point: no pick.
  CHECK_FALSE(point_near(c, "top1_agreement", 2.0 + 20 * ux, 0.9, ux, uy).has_value());
  // The other metric moves the points: h2o at 10% is at kl 0.5.
  p = point_near(c, "kl_mean", 0.0, 0.5, ux, uy);
  REQUIRE(p.has_value());
  CHECK(p->budget == "10%");
}

namespace {

std::string run_command(const std::string& command) {
  const test::CommandOutcome outcome = test::run_command(command);
  REQUIRE(outcome.exit_code == 0);
  return outcome.output;
}

// A live-slot request of H2O on `prompt`, recording little (the fidelity tests read no maps).
RunRequest h2o_request(const std::string& prompt, const std::string& budget, int new_tokens) {
  RunRequest r;
  r.prompt = prompt;
  r.policy_spec = "h2o";
  r.budget = budget;
  r.max_new_tokens = new_tokens;
  r.record = "similarity=off;decode=off";
  return r;
}

// Hands every update of the session to `take` until it returns true (at most ten minutes).
void poll_until(Session& s, const std::function<bool(const SessionUpdate&)>& take) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  while (std::chrono::steady_clock::now() < deadline) {
    for (auto& u : s.poll())
      if (take(u)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

TEST_CASE("the Summary's fidelity of a live run equals kvscope eval fidelity --stop-at-end on the same run",
          "[session][model]") {
  // `make test` fetches the default model, so its absence fails here rather than skipping.
  REQUIRE(fs::exists(model::default_model_path()));
  const std::string prompt =
      "The keeper hid the key under the seventh step of the lighthouse stairs, and every night he";
  const std::string other_prompt = "The baker lit the first oven at four and the rye went in at five, and then";
  Session s(1);
  // The live run's fidelity, waited for; the run it was measured for is checked to be the one published.
  auto live_fidelity = [&](const std::string& text, const std::string& budget) {
    RunRequest r = h2o_request(text, budget, 6);
    r.fidelity = true;
    s.submit(r);
    std::shared_ptr<const eval::FidelityResult> fidelity;
    std::shared_ptr<const trace::RunTrace> run;
    poll_until(s, [&](const SessionUpdate& u) {
      if (u.fidelity) {
        CHECK(u.run == run);
        fidelity = u.fidelity;
      } else if (u.final && u.slot == r.slot) {
        run = u.run;
      }
      return fidelity != nullptr;
    });
    REQUIRE(fidelity);
    REQUIRE(run);
    return fidelity;
  };
  auto cli_record = [](const std::string& text, const std::string& budget) {
    return nlohmann::json::parse(run_command(std::string(KVSCOPE_BINARY) +
                                             " eval fidelity --stop-at-end --threads 1 --policy h2o --budget " + budget +
                                             " --max-new-tokens 6 --json --prompt '" + text + "' 2>/dev/null"));
  };
  auto same = [](const eval::FidelityResult& f, const nlohmann::json& record) {
    const nlohmann::json& m = record.at("metrics");
    CHECK(f.score.steps == static_cast<int>(record.at("continuation_tokens").size()));
    CHECK(f.score.steps > 1);  // prompts that continue: more than an end token is compared
    CHECK(f.reference_stop_reason == record.at("reference_stop_reason").get<std::string>());
    CHECK(f.score.top1_agreement == m.at("top1_agreement").get<double>());
    CHECK(f.score.kl_mean == m.at("kl_mean").get<double>());
    CHECK(f.score.agreeing_prefix == m.at("agreeing_prefix").get<double>());
    CHECK(f.memory.saved() == m.at("memory_saved").get<double>());
  };

  const auto fidelity = live_fidelity(prompt, "50%");
  const auto record = cli_record(prompt, "50%");
  same(*fidelity, record);
  const nlohmann::json& m = record.at("metrics");
  // What the Summary prints is those numbers.
  const auto lines = fidelity_lines(*fidelity);
  REQUIRE(lines.size() == 6);
  char expected[64];
  std::snprintf(expected, sizeof expected, "%.3f", m.at("top1_agreement").get<double>());
  CHECK(lines[0].second == expected);
  std::snprintf(expected, sizeof expected, "%.4f nats", m.at("kl_mean").get<double>());
  CHECK(lines[1].second == expected);
  const int steps = static_cast<int>(record.at("continuation_tokens").size());
  std::snprintf(expected, sizeof expected, "%d of %d", static_cast<int>(m.at("agreeing_prefix").get<double>()), steps);
  CHECK(lines[2].second == expected);
  std::snprintf(expected, sizeof expected, "%.1f%%", 100.0 * m.at("memory_saved").get<double>());
  CHECK(lines[4].second == expected);
  // No second "cache at the end" from the teacher-forced runs: the Summary takes it from the table (cache_at_end_line).
  for (const auto& line : lines) CHECK(line.first.find("at the end") == std::string::npos);
  CHECK(lines[3].first == "tokens compared");
  CHECK(lines[3].second.rfind(std::to_string(steps) + ", ", 0) == 0);
  // The log-prob gap is the command's (issue 38: the Summary's "gap" was another number under the same name).
  std::snprintf(expected, sizeof expected, "%.4f nats per token", m.at("logprob_gap").get<double>());
  CHECK(lines[5].first == "log-prob gap (full minus policy)");
  CHECK(lines[5].second == expected);

  // A budget change reuses the full-cache reference of the prompt; another prompt must not.
  same(*live_fidelity(prompt, "25%"), cli_record(prompt, "25%"));
  same(*live_fidelity(other_prompt, "25%"), cli_record(other_prompt, "25%"));
}

TEST_CASE("the live run's fidelity compares the tokens the baseline shows, to its end of generation",
          "[session][model]") {
  REQUIRE(fs::exists(model::default_model_path()));
  Session s(1);
  // A chat question the model answers in a few tokens and then ends (<|im_end|>), well before 32.
  RunRequest live = h2o_request("Answer with one word. What colour is the sky on a clear day?", "50%", 32);
  live.chat = true;
  live.fidelity = true;
  RunRequest baseline = live;  // as the set-up form submits it
  baseline.slot = "baseline";
  baseline.policy_spec = "full";
  baseline.budget.clear();
  baseline.fidelity = false;
  s.submit(live);
  s.submit(baseline);
  std::shared_ptr<const eval::FidelityResult> fidelity;
  std::shared_ptr<const trace::RunTrace> baseline_run;
  poll_until(s, [&](const SessionUpdate& u) {
    if (u.fidelity) fidelity = u.fidelity;
    else if (u.final && u.slot == "baseline") baseline_run = u.run;
    return fidelity && baseline_run;
  });
  REQUIRE(fidelity);
  REQUIRE(baseline_run);
  // The baseline (full cache, greedy, stops at the end token) ended early: the case that went wrong.
  REQUIRE(baseline_run->n_generated() < 32);
  CHECK(baseline_run->meta("stop_reason") == "end_of_generation");
  // Fidelity scored exactly the baseline's tokens, the end token included, not 32.
  CHECK(fidelity->score.steps == baseline_run->n_generated());
  CHECK(fidelity->reference_stop_reason == "end_of_generation");
  const auto lines = fidelity_lines(*fidelity);
  REQUIRE(lines.size() == 6);
  CHECK(lines[3].first == "tokens compared");
  CHECK(lines[3].second ==
        std::to_string(baseline_run->n_generated()) + ", to the full cache's end of generation (where the baseline stops)");

  // The Quality panel's sweep on the same prompt ends its reference there too: its cell is the Summary's numbers
  // (before, it scored all 32 steps past the end token, and the two disagreed for the same run).
  SweepRequest sweep;
  sweep.prompt = live.prompt;
  sweep.chat = true;
  sweep.policies = {"h2o"};
  sweep.budgets = {"50%"};
  sweep.new_tokens = 32;
  const uint64_t id = s.submit_sweep(sweep);
  std::optional<eval::SweepRow> row;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  while (!row && std::chrono::steady_clock::now() < deadline) {
    s.poll();
    for (auto& u : s.take_sweep_rows())
      if (u.sweep == id) row = u.row;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE(row);
  const std::map<std::string, double> metrics(row->metrics.begin(), row->metrics.end());
  CHECK(metrics.at("steps") == fidelity->score.steps);
  CHECK(metrics.at("top1_agreement") == fidelity->score.top1_agreement);
  CHECK(metrics.at("kl_mean") == fidelity->score.kl_mean);
  CHECK(metrics.at("agreeing_prefix") == fidelity->score.agreeing_prefix);
}

TEST_CASE("a run kept without its fidelity gets it measured for that run, as the live run's would be",
          "[session][model]") {
  REQUIRE(fs::exists(model::default_model_path()));
  Session s(1);
  RunRequest r =
      h2o_request("The keeper hid the key under the seventh step of the lighthouse stairs, and every night he", "50%", 6);
  r.fidelity = false;  // as if its measurement had been superseded by the next live run
  s.submit(r);
  std::shared_ptr<const trace::RunTrace> run;
  poll_until(s, [&](const SessionUpdate& u) {
    if (u.final && !u.fidelity) run = u.run;
    return run != nullptr;
  });
  REQUIRE(run);
  r.fidelity = true;
  s.measure_fidelity(run, r);
  std::shared_ptr<const eval::FidelityResult> fidelity;
  poll_until(s, [&](const SessionUpdate& u) {
    if (!u.fidelity) return false;
    CHECK(u.run == run);  // the window matches it to the entries that show this run
    fidelity = u.fidelity;
    return true;
  });
  REQUIRE(fidelity);
  // The same measurement made directly on the run's prompt tokens.
  const auto record = nlohmann::json::parse(run_command(
      std::string(KVSCOPE_BINARY) + " eval fidelity --stop-at-end --threads 1 --policy h2o --budget 50%" +
      " --max-new-tokens 6 --json --prompt '" + r.prompt + "' 2>/dev/null"));
  CHECK(fidelity->score.steps == static_cast<int>(record.at("continuation_tokens").size()));
  CHECK(fidelity->score.top1_agreement == record.at("metrics").at("top1_agreement").get<double>());
  CHECK(fidelity->score.kl_mean == record.at("metrics").at("kl_mean").get<double>());
}
