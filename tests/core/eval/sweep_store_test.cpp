// The sweep folder: rows persisted at once and read back on resume, a different grid refused with the
// files untouched, a torn last CSV line dropped, bad grids rejected, policy lists with parameters.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/common/error.h"
#include "core/eval/sweep_store.h"
#include "tests/support/temp_file.h"

using namespace kvscope;
namespace fs = std::filesystem;

namespace {

eval::SweepGrid small_grid() {
  eval::SweepGrid g;
  g.eval_kind = "needle";
  g.prompts = {"a", "b"};
  g.prompt_digests = {"1", "2"};
  g.policies = {"snapkv:window=8,kernel=3", "h2o"};
  g.budgets = {"10%", "50%"};
  return g;
}

eval::SweepRow row_for(const eval::SweepGrid& g, std::size_t index, double match) {
  const auto cell = g.cell(index);
  eval::SweepRow r;
  r.cell = index;
  r.prompt = g.prompts[cell.prompt];
  r.policy = cell.policy.policy;
  r.budget = cell.policy.budget;
  for (const auto& name : eval::metric_names("needle"))
    r.metrics.emplace_back(name, name == "exact_match" ? match : 1.5);
  return r;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = test::temp_file(name, "");
  fs::remove_all(dir);
  return dir;
}

}  // namespace

TEST_CASE("grid cells run prompt by prompt, policies then budgets") {
  const auto g = small_grid();
  REQUIRE(g.size() == 8);
  CHECK(g.cell(0).prompt == 0);
  CHECK(g.cell(1).policy.budget == "50%");
  CHECK(g.cell(2).policy.policy == "h2o");
  CHECK(g.cell(4).prompt == 1);
  CHECK(g.cell(7).policy.policy == "h2o");
  CHECK(g.cell(7).policy.budget == "50%");
  CHECK_THROWS_AS(g.cell(8), Error);
}

TEST_CASE("cells run in prefill groups: a prompt's cells of one cache type one after another") {
  auto g = small_grid();
  g.cache_types = {"f16", "q8_0", "q4_0"};
  REQUIRE(g.size() == 24);
  std::vector<std::size_t> all(g.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = all.size() - 1 - i;  // any order in: a resumed sweep's
  const auto order = g.run_order(all);
  REQUIRE(order.size() == g.size());
  CHECK(std::set<std::size_t>(order.begin(), order.end()).size() == g.size());
  // Read back through cell(): the (prompt, cache type) changes only between groups, 2 x 3 groups in all.
  int changes = 0;
  for (std::size_t k = 1; k < order.size(); ++k) {
    const auto a = g.cell(order[k - 1]), b = g.cell(order[k]);
    CHECK(a.prompt <= b.prompt);
    if (a.prompt != b.prompt || a.cache_type != b.cache_type) ++changes;
    else CHECK(order[k - 1] < order[k]);  // policy, then budget, within a group
    CHECK((g.prefill_group(order[k - 1]) == g.prefill_group(order[k])) == (a.prompt == b.prompt && a.cache_type == b.cache_type));
    CHECK(g.prefill_group(order[k]) / g.cache_type_count() == b.prompt);  // what sweep workers' locality derives
  }
  CHECK(changes == 5);
  CHECK(g.cell(order[0]).prompt == 0);
  CHECK(g.cell(order[0]).cache_type == "f16");
}

TEST_CASE("policy lists keep parameters with their policy") {
  CHECK(eval::split_policy_list("snapkv:window=32,kernel=7,h2o") ==
        std::vector<std::string>{"snapkv:window=32,kernel=7", "h2o"});
  CHECK(eval::split_policy_list("full, tova") == std::vector<std::string>{"full", "tova"});
  CHECK_THROWS_AS(eval::split_policy_list(""), UsageError);
  CHECK_THROWS_AS(eval::split_list("5%,,10%", "budget"), UsageError);
}

TEST_CASE("bad grids are usage errors before anything is written") {
  const fs::path dir = fresh_dir("sweep_bad");
  auto g = small_grid();
  g.eval_kind = "bleu";
  CHECK_THROWS_AS(eval::SweepStore(dir, g), UsageError);
  g = small_grid();
  g.policies.clear();
  CHECK_THROWS_AS(eval::SweepStore(dir, g), UsageError);
  g = small_grid();
  g.budgets.clear();
  CHECK_THROWS_AS(eval::SweepStore(dir, g), UsageError);
  CHECK_FALSE(fs::exists(dir));
}

TEST_CASE("rows persist at once and a reopened sweep knows which cells are done") {
  const fs::path dir = fresh_dir("sweep_resume");
  const auto g = small_grid();
  {
    eval::SweepStore store(dir, g);
    CHECK(store.done_count() == 0);
    store.append(row_for(g, 0, 1.0));
    store.append(row_for(g, 5, 0.0));
    CHECK_THROWS_AS(store.append(row_for(g, 5, 0.0)), Error);  // no duplicates
    auto wrong = row_for(g, 3, 1.0);
    wrong.policy = "tova";
    CHECK_THROWS_AS(store.append(wrong), Error);  // a row must be the grid's cell
  }
  const std::string csv = slurp(dir / "rows.csv");
  // The header, then one line per row; the policy with a comma is quoted.
  CHECK(csv.rfind("cell,prompt,policy,budget,exact_match,", 0) == 0);
  CHECK(csv.find("0,a,\"snapkv:window=8,kernel=3\",10%,1,") != std::string::npos);
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 3);
  CHECK(fs::exists(dir / "eval.h5"));
  CHECK_FALSE(fs::exists(dir / "eval.h5.tmp"));

  eval::SweepStore again(dir, g);
  CHECK(again.done_count() == 2);
  CHECK(again.done(0));
  CHECK(again.done(5));
  CHECK_FALSE(again.done(1));
  REQUIRE(again.rows().size() == 2);
  CHECK(again.rows()[0].policy == "snapkv:window=8,kernel=3");
  CHECK(again.rows()[1].metrics[0].second == 0.0);
}

TEST_CASE("a resumed sweep with another grid is refused and nothing changes") {
  const fs::path dir = fresh_dir("sweep_mismatch");
  const auto g = small_grid();
  {
    eval::SweepStore store(dir, g);
    store.append(row_for(g, 0, 1.0));
  }
  const std::string grid_before = slurp(dir / "grid.json"), csv_before = slurp(dir / "rows.csv");
  auto other = g;
  other.budgets = {"10%", "25%"};
  try {
    eval::SweepStore store(dir, other);
    FAIL("a different grid was accepted");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()).find("budgets") != std::string::npos);
    CHECK(std::string(e.what()).find("25%") != std::string::npos);
  }
  auto edited = g;
  edited.prompt_digests[1] = "changed";
  CHECK_THROWS_AS(eval::SweepStore(dir, edited), UsageError);
  CHECK(slurp(dir / "grid.json") == grid_before);
  CHECK(slurp(dir / "rows.csv") == csv_before);

  // A folder with other files is not taken over.
  const fs::path busy = fresh_dir("sweep_busy");
  fs::create_directories(busy);
  std::ofstream(busy / "notes.txt") << "mine";
  CHECK_THROWS_AS(eval::SweepStore(busy, g), UsageError);
  CHECK(slurp(busy / "notes.txt") == "mine");
}

TEST_CASE("a torn last CSV line is dropped and its cell runs again") {
  const fs::path dir = fresh_dir("sweep_torn");
  const auto g = small_grid();
  {
    eval::SweepStore store(dir, g);
    store.append(row_for(g, 0, 1.0));
  }
  std::ofstream(dir / "rows.csv", std::ios::app) << "1,a,\"snapkv:window=8,kernel=3\",50%,1,12";  // no newline
  eval::SweepStore store(dir, g);
  CHECK(store.done_count() == 1);
  CHECK_FALSE(store.done(1));
  store.append(row_for(g, 1, 0.0));
  eval::SweepStore again(dir, g);
  CHECK(again.done_count() == 2);
}

TEST_CASE("a folder written with fewer metric columns is refused with the missing ones named, untouched") {
  const fs::path dir = fresh_dir("sweep_older_columns");
  const auto g = small_grid();
  {
    eval::SweepStore store(dir, g);
    store.append(row_for(g, 0, 1.0));
  }
  // What an earlier kvscope wrote: the same grid with one metric column fewer.
  std::string csv = slurp(dir / "rows.csv");
  const std::string last_metric = eval::metric_names("needle").back();
  const std::string header = csv.substr(0, csv.find('\n'));
  const std::string older_header = header.substr(0, header.rfind(',' + last_metric));
  std::string older_row = csv.substr(csv.find('\n') + 1);
  older_row = older_row.substr(0, older_row.rfind(',')) + "\n";
  std::ofstream(dir / "rows.csv", std::ios::trunc) << older_header << "\n" << older_row;
  const std::string csv_before = slurp(dir / "rows.csv");
  try {
    eval::SweepStore store(dir, g);
    FAIL("a folder with fewer columns was resumed");
  } catch (const UsageError& e) {
    const std::string what = e.what();
    CHECK(what.find("lacks " + last_metric) != std::string::npos);
    CHECK(what.find("new --out folder") != std::string::npos);
  }
  CHECK(slurp(dir / "rows.csv") == csv_before);
}

TEST_CASE("sweep files are never written through a link: eval.h5's is replaced, rows.csv's refused") {
  const fs::path dir = fresh_dir("sweep_links");
  const auto g = small_grid();
  const fs::path victim = fresh_dir("sweep_links_victim");
  { std::ofstream(victim) << "the victim"; }
  {
    eval::SweepStore store(dir, g);
    store.append(row_for(g, 0, 1.0));
  }
  fs::remove(dir / "eval.h5");
  fs::create_symlink(victim, dir / "eval.h5");
  {
    eval::SweepStore store(dir, g);
    store.append(row_for(g, 1, 1.0));  // rewrites eval.h5
  }
  CHECK_FALSE(fs::is_symlink(dir / "eval.h5"));
  CHECK(slurp(victim) == "the victim");

  // rows.csv grows in place: a link there is refused, and what it points to keeps its bytes.
  const std::string rows = slurp(dir / "rows.csv");
  { std::ofstream(victim, std::ios::trunc) << rows; }
  fs::remove(dir / "rows.csv");
  fs::create_symlink(victim, dir / "rows.csv");
  eval::SweepStore store(dir, g);
  CHECK_THROWS_WITH(store.append(row_for(g, 2, 1.0)), Catch::Contains("is a link"));
  CHECK(slurp(victim) == rows);
  fs::remove_all(dir);
  fs::remove(victim);
}
