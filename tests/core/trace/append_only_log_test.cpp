// The shared, append-only list behind a live run's events and step rows: a copy is O(1), and no copy's
// items change when another copy (or the original) appends.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/trace/append_only_log.h"

using kvscope::trace::AppendOnlyLog;

TEST_CASE("copies of an append-only log share storage and never see each other's appends", "[trace][log]") {
  AppendOnlyLog<std::string> log;
  std::vector<std::string> record;  // what the writer appended, kept independently
  std::vector<AppendOnlyLog<std::string>> snapshots;
  std::vector<std::size_t> lengths;
  for (int i = 0; i < 200; ++i) {
    log.push_back("item " + std::to_string(i));
    record.push_back("item " + std::to_string(i));
    if (i % 13 == 0) {
      snapshots.push_back(log);  // the window's snapshot of a live run
      lengths.push_back(record.size());
    }
  }
  // A snapshot appending its own item moves to storage of its own instead of writing the writer's slot.
  AppendOnlyLog<std::string> forked = snapshots[3];
  forked.push_back("forked");
  CHECK(forked.moved_by_last_append() == lengths[3]);
  log.push_back("after the fork");
  record.push_back("after the fork");

  REQUIRE(log.size() == record.size());
  CHECK(std::vector<std::string>(log.begin(), log.end()) == record);
  for (std::size_t s = 0; s < snapshots.size(); ++s) {
    REQUIRE(snapshots[s].size() == lengths[s]);
    CHECK(std::vector<std::string>(snapshots[s].begin(), snapshots[s].end()) ==
          std::vector<std::string>(record.begin(), record.begin() + static_cast<std::ptrdiff_t>(lengths[s])));
  }
  REQUIRE(forked.size() == lengths[3] + 1);
  CHECK(forked.back() == "forked");
  CHECK(forked[lengths[3] - 1] == record[lengths[3] - 1]);
}

TEST_CASE("appending in place copies nothing; growth copies a geometric series", "[trace][log]") {
  AppendOnlyLog<int> log;
  std::size_t moved = 0, moves = 0;
  const int n = 10000;
  for (int i = 0; i < n; ++i) {
    log.push_back(i);
    moved += log.moved_by_last_append();
    moves += log.moved_by_last_append() > 0;
  }
  CHECK(moved < 2u * n);  // 16 + 32 + ... < the final size
  CHECK(moves <= 10);     // 16 -> 16384 doubles ten times
  const std::vector<int> batch = {1, 2, 3};
  log.append(batch.begin(), batch.end());
  CHECK(log.size() == n + 3u);
  CHECK(log.back() == 3);
  const AppendOnlyLog<int> braced = {4, 5};
  CHECK(braced.size() == 2);
  CHECK(braced.front() == 4);
  CHECK_THROWS_AS(braced.at(2), std::out_of_range);
}
