#pragma once
// Two to four runs side by side (Tracy's compare view): the same attention map of each run in columns
// whose layer/head selections are linked, a difference map of any two columns, and which
// cache entries each run kept that the first did not.
#include "viewers/panel.h"

namespace kvscope::viewers {

class CompareView final : public Panel {
 public:
  CompareView() : Panel("compare", "Compare") {}
  void draw(AppState& state) override;
  Figure figure(const AppState& state) override;
  void sync(AppState& state) override;  // the columns (automatic choice) and their selections

  bool decode = false;
  bool show_difference = true;
  // The difference map shows column `diff_minuend` minus column `diff_subtrahend` (indices into the columns).
  int diff_minuend = 1, diff_subtrahend = 0;

 private:
  struct Column {
    std::string signature, why;
    HeatmapPlot plot;
    ColorScale fitted;  // the map's own range, before the columns share one
    bool ok = false;
  };
  void refresh(const AppState& state);
  void share_color_range(const AppState& state);
  // The plot whose scale every shown run column uses, when two or more do (one colour bar for them); else null.
  const HeatmapPlot* shared_colour_bar() const;
  // The difference cell's title: the pair chooser (three or more columns), what it shows, where tokens diverge.
  struct DiffHeader {
    bool choosers = false;     // the two run menus (three or more columns)
    std::string pair;          // "B minus A; red: the first attends more"
    std::string diverge_text;  // where the pair's generated tokens part, or that they agree
    int diverge = -1;          // the first diverging generated token (first_divergent_token), -1 for none
    std::string note;          // "decode steps: the prefill maps are identical", "identical here: ..."
  };
  // The header's text, which the grid measures before the header is drawn (draw_difference_header).
  DiffHeader difference_text(const AppState& state) const;
  void draw_difference_header(AppState& state, const DiffHeader& header, float width);
  std::vector<Column> columns_;
  Column diff_;
  // The difference map shows the decode steps although 'decode' is off: the prefill maps were identical (a policy
  // that compresses after prefill).
  bool diff_decode_ = false;
  std::string diff_signature_;
};

// The automatic column choice: runs of the active run's prompt, full-cache runs first, at most four.
std::vector<int> auto_compare(const AppState& state);

// With 'linked' on, every column shows the shared selection's layer and query head (the status bar's, clamped to
// each run's shape); a column's own step stays. Sizes state.compare_sel to the columns, a new column starting at the
// shared selection. Unlinked, columns keep their own.
void follow_shared_selection(AppState& state);

// What the kept-set line compares, for its label: "prompt positions 0..N-1" and, with generated
// positions, how many generated tokens the two runs agree on.
std::string compared_positions(const ComparableSpan& span, bool with_generated);

// A strip of one cell per position coloured by KeptDiff state, with a hover read-out.
void kept_diff_strip(const KeptDiff& d, float width, float height, const trace::RunTrace& a, const trace::RunTrace& b);


}  // namespace kvscope::viewers
