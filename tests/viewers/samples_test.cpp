// The Samples panel's model (viewers/samples_model.h): the table's order and filters on hand-made rows, and the
// rows read from a real evaluation folder (`kvscope eval needle --traces DIR`) against what the evaluation's own
// JSON and `kvscope explain --json` report for the same files, with a damaged trace and a file that is not HDF5
// in the folder.
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/support/command_output.h"
#include "tests/support/temp_file.h"
#include "viewers/samples_model.h"

using namespace kvscope;
using namespace kvscope::viewers;

namespace {

SampleRow row(const std::string& file, std::optional<double> score, std::optional<double> kept, bool lost,
              std::optional<double> blame) {
  SampleRow r;
  r.file = file;
  r.path = "/x/" + file;
  r.task = "niah";
  r.score = score;
  r.full_score = 1.0;
  if (kept) r.evidence = std::vector<eval::EvidenceSpan>{{1, 2, "needle"}};
  r.evidence_kept = kept;
  r.evidence_mostly_lost = lost;
  r.blame_mass = blame;
  return r;
}

std::vector<std::string> files(const std::vector<SampleRow>& rows, const std::vector<int>& order) {
  std::vector<std::string> out;
  for (int i : order) out.push_back(rows[static_cast<std::size_t>(i)].file);
  return out;
}

using Names = std::vector<std::string>;

}  // namespace

TEST_CASE("the samples table sorts by any column with missing values last and filters the failures", "[samples]") {
  SampleRow damaged;
  damaged.file = "d.h5";
  damaged.error = "trace file 'd.h5' is damaged";
  const std::vector<SampleRow> rows = {
      row("a.h5", 0.0, 0.9, false, 0.5),                     // wrong, the evidence kept: the interesting failure
      row("b.h5", 1.0, 1.0, false, 0.0),                     // right
      row("c.h5", 0.0, 0.1, true, 0.9),                      // wrong, the evidence lost
      damaged,                                               // unreadable
      row("e.h5", 0.25, std::nullopt, false, std::nullopt),  // wrong, no evidence known, no blame
  };
  CHECK(files(rows, sample_order(rows, SampleFilter::All, SampleColumn::File, true)) ==
        Names{"a.h5", "b.h5", "c.h5", "d.h5", "e.h5"});
  CHECK(files(rows, sample_order(rows, SampleFilter::All, SampleColumn::File, false)) ==
        Names{"e.h5", "d.h5", "c.h5", "b.h5", "a.h5"});
  // Wrong: score below one half; a damaged file is neither right nor wrong.
  CHECK(files(rows, sample_order(rows, SampleFilter::Wrong, SampleColumn::File, true)) ==
        Names{"a.h5", "c.h5", "e.h5"});
  // Wrong with the evidence kept: only a sample whose evidence is known and was not mostly lost.
  CHECK(files(rows, sample_order(rows, SampleFilter::WrongEvidenceKept, SampleColumn::File, true)) == Names{"a.h5"});
  // Ties keep the folder's order (a before c); the damaged file is last either way.
  CHECK(files(rows, sample_order(rows, SampleFilter::All, SampleColumn::Score, true)) ==
        Names{"a.h5", "c.h5", "e.h5", "b.h5", "d.h5"});
  CHECK(files(rows, sample_order(rows, SampleFilter::All, SampleColumn::Score, false)) ==
        Names{"b.h5", "e.h5", "a.h5", "c.h5", "d.h5"});
  // Missing values (no blame, no evidence) last in both directions.
  CHECK(files(rows, sample_order(rows, SampleFilter::All, SampleColumn::Blame, false)) ==
        Names{"c.h5", "a.h5", "b.h5", "d.h5", "e.h5"});
  CHECK(files(rows, sample_order(rows, SampleFilter::All, SampleColumn::Blame, true)) ==
        Names{"b.h5", "a.h5", "c.h5", "d.h5", "e.h5"});
  CHECK(files(rows, sample_order(rows, SampleFilter::Wrong, SampleColumn::EvidenceKept, true)) ==
        Names{"c.h5", "a.h5", "e.h5"});
}

TEST_CASE("a folder of sample traces reads into rows that agree with the evaluation and kvscope explain",
          "[samples][model]") {
  const std::filesystem::path dir = test::temp_file("samples_folder", "");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string bin = KVSCOPE_BINARY;
  // A StreamingLLM sample whose needle (a quarter of the way in) lies far outside its 32-token window, and the
  // full cache on another depth: one run in its file, everything kept, nothing to blame.
  auto eval = [&](const std::string& policy, const std::string& depth) {
    const auto out =
        test::run_command(bin + " eval needle --lengths 256 --depths " + depth + " --policy " + policy +
                          " --threads 1 --json --traces-for all --traces " + dir.string() + " 2>/dev/null");
    REQUIRE(out.exit_code == 0);
    const nlohmann::json j = nlohmann::json::parse(out.output);
    REQUIRE(j.at("cases").size() == 1);
    return j.at("cases").at(0);
  };
  const nlohmann::json streaming = eval("streaming_llm --budget 32", "25");
  const nlohmann::json full = eval("full", "75");
  const std::filesystem::path streaming_file = streaming.at("trace").get<std::string>();
  const std::filesystem::path full_file = full.at("trace").get<std::string>();
  // A trace cut short (its metadata points past the end) and a text file that only looks like one by its name.
  {
    std::ifstream in(streaming_file, std::ios::binary);
    std::string head(8192, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    std::ofstream(dir / "broken.h5", std::ios::binary) << head;
    std::ofstream(dir / "notes.h5") << "not a trace\n";
    std::ofstream(dir / "readme.txt") << "ignored: not .h5\n";
  }

  SampleFolderReader reader;
  REQUIRE(reader.open(dir) == 4);
  std::vector<SampleRow> rows;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  while (reader.busy() && std::chrono::steady_clock::now() < deadline) {
    for (auto& r : reader.take()) rows.push_back(std::move(r));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& r : reader.take()) rows.push_back(std::move(r));
  REQUIRE(rows.size() == 4);
  const std::vector<int> order = sample_order(rows, SampleFilter::All, SampleColumn::File, true);
  REQUIRE(files(rows, order) ==
          Names{"broken.h5", streaming_file.filename().string(), full_file.filename().string(), "notes.h5"});
  const SampleRow &broken = rows[static_cast<std::size_t>(order[0])], &s = rows[static_cast<std::size_t>(order[1])],
                  &f = rows[static_cast<std::size_t>(order[2])], &notes = rows[static_cast<std::size_t>(order[3])];

  // Unreadable files are rows holding an error that names them; nothing else is made up for them.
  CHECK(broken.damaged());
  CHECK_THAT(broken.error, Catch::Contains("broken.h5"));
  CHECK(notes.damaged());
  CHECK_THAT(notes.error, Catch::Contains("notes.h5"));
  CHECK(!broken.score);

  // The StreamingLLM sample: as the evaluation scored it and measured its evidence while it ran.
  CHECK(s.error.empty());
  CHECK(s.task == "needle");
  CHECK(s.policy_run == "streaming_llm_b32");
  CHECK(s.full_run == "full");
  CHECK(*s.score == (streaming.at("match").get<bool>() ? 1.0 : 0.0));
  REQUIRE(s.evidence);
  REQUIRE(s.evidence->size() == streaming.at("evidence").size());
  CHECK(s.evidence->at(0).first == streaming.at("evidence")[0][0].get<int>());
  CHECK(s.evidence->at(0).last == streaming.at("evidence")[0][1].get<int>());
  CHECK(s.evidence->at(0).kind == streaming.at("evidence")[0][2].get<std::string>());
  CHECK(*s.evidence_kept == Approx(streaming.at("evidence_kept").get<double>()).margin(1e-12));
  CHECK(s.evidence_mostly_lost == streaming.at("evidence_mostly_lost").get<bool>());
  CHECK(s.evidence_mostly_lost);  // the needle lies far outside the window
  // Blame and the full cache's score: what `kvscope explain --json` prints for the same file.
  const auto explained = test::run_command(bin + " explain --json " + streaming_file.string() + " 2>/dev/null");
  REQUIRE(explained.exit_code == 0);
  const nlohmann::json x = nlohmann::json::parse(explained.output);
  CHECK(*s.full_score == x.at("full_score").get<double>());
  REQUIRE(s.blame_mass);
  CHECK(*s.blame_mass == Approx(x.at("blame").at("max_lost_mass").get<double>()).margin(1e-12));
  CHECK(s.blame_layer == x.at("blame").at("largest")[0].at("layer").get<int>());
  CHECK(s.blame_head == x.at("blame").at("largest")[0].at("head").get<int>());
  CHECK(s.first_answer_step == x.at("first_answer_step").get<int>());
  CHECK(s.prediction == x.at("prediction").get<std::string>());

  // The full cache's own sample: one run, everything kept, nothing lost.
  CHECK(f.policy_run == "full");
  CHECK(f.full_run == "full");
  CHECK(*f.evidence_kept == 1.0);
  CHECK(!f.evidence_mostly_lost);
  REQUIRE(f.blame_mass);
  CHECK(*f.blame_mass == 0.0);

  // The filters on real rows: wrong is the evaluation's own verdict, damaged files are never in it.
  std::vector<std::string> wrong;
  if (!streaming.at("match").get<bool>()) wrong.push_back(s.file);
  if (!full.at("match").get<bool>()) wrong.push_back(f.file);
  CHECK(files(rows, sample_order(rows, SampleFilter::Wrong, SampleColumn::File, true)) == wrong);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a samples folder that is not a folder is an error naming it", "[samples]") {
  CHECK_THROWS_WITH(sample_trace_files("/nonexistent/kvscope/traces"), Catch::Contains("/nonexistent/kvscope/traces"));
}

TEST_CASE("the script's samples-filter and samples-sort names", "[samples]") {
  CHECK(parse_sample_filter("wrong-kept") == SampleFilter::WrongEvidenceKept);
  CHECK(parse_sample_filter("wrong with the evidence kept") == SampleFilter::WrongEvidenceKept);
  CHECK(parse_sample_filter("all") == SampleFilter::All);
  CHECK_THROWS_WITH(parse_sample_filter("kept"), Catch::Contains("all, wrong or wrong-kept"));
  CHECK(parse_sample_column("blame") == SampleColumn::Blame);
  CHECK(parse_sample_column("#") == SampleColumn::Sample);
  CHECK(parse_sample_column("sample") == SampleColumn::Sample);
  CHECK_THROWS_WITH(parse_sample_column("size"), Catch::Contains("file, score, full, kept"));
}
