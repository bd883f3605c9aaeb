#pragma once
// The Samples panel (issue 35): an evaluation's trace folder (`eval ruler|longbench|needle --traces DIR`) as a
// sortable, filterable table, one row per sample (samples_model.h). Selecting a row reads that sample's trace
// through the Session like File > Open trace, and once its runs arrive puts the policy's run beside the full
// cache's in Compare, moves the step to the one that sampled the first answer token, selects the (layer, head)
// whose lost attention was largest, marks the evidence spans on the token axes (AppState::evidence) and frames
// them in the attention map.
#include <optional>
#include <string>
#include <vector>

#include "viewers/panel.h"
#include "viewers/samples_model.h"
#include "viewers/session.h"

namespace kvscope::viewers {

class SamplesPanel final : public Panel {
 public:
  explicit SamplesPanel(Session& session) : Panel("samples", "Samples"), session_(session) {}
  void draw(AppState& state) override;

  // Starts reading the folder's sample traces in the background (rows appear as they are read). Throws Error
  // when `dir` is not a folder.
  void open_folder(const std::string& dir);
  // Takes the rows read since the last frame; puts a selected sample on screen once its runs arrived.
  void poll(AppState& state);
  // Selects the `shown`-th row as the table shows it (filter and sort applied, from 0) and loads its runs. Throws
  // UsageError for a row that is not there or a damaged file.
  void select(int shown, AppState& state);
  // Reading the folder, or a selected sample's runs not on screen yet.
  bool busy();
  // What the *show* combo and a header click choose, for scripts; the header shows the sort from the next frame.
  void set_filter(SampleFilter filter) { filter_ = filter; }
  void sort_by(SampleColumn column, bool ascending);

  const std::vector<SampleRow>& rows() const { return rows_; }
  std::vector<int> shown() const { return sample_order(rows_, filter_, column_, ascending_); }

 private:
  // Puts row `index`'s runs (loaded) on screen; false while they are not all in state.runs yet.
  bool show_sample(int index, AppState& state);
  void table(AppState& state);

  Session& session_;
  SampleFolderReader reader_;
  std::string folder_ = "traces";
  std::vector<SampleRow> rows_;
  std::size_t expected_ = 0;  // files in the folder
  SampleFilter filter_ = SampleFilter::All;
  SampleColumn column_ = SampleColumn::File;
  bool ascending_ = true;
  bool sort_from_script_ = false;  // sort_by was called: the table's header takes column_/ascending_ next frame
  int selected_ = -1;            // index into rows_
  std::optional<int> pending_;   // index into rows_ whose runs are being read
  int pending_idle_frames_ = 0;  // frames the Session was idle with the pending runs missing (a failed read)
};

}  // namespace kvscope::viewers
