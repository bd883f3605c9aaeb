#pragma once
// Quality against budget, one curve per policy (the papers' budget plots), from a sweep's rows.csv or
// eval.h5 or from a small fidelity sweep run on the Session's worker (policies x budgets on the live run's
// prompt, cancellable, plotted as rows land). The live run's budget is marked; clicking a point asks for
// that (policy, budget) as the live run (AppState::run_choice, which the window hands to the set-up form).
// Its x axis may instead be the cache's real bytes: the Pareto view of `kvscope figure --view pareto`
// (pareto_plot.h), one curve per (policy, cache type), the front marked; clicking a point there asks for its
// (policy, budget, cache type).
#include <future>
#include <optional>
#include <string>
#include <vector>

#include "viewers/panel.h"
#include "viewers/pareto_plot.h"
#include "viewers/quality_model.h"
#include "viewers/session.h"

namespace kvscope::viewers {

class QualityPanel final : public Panel {
 public:
  explicit QualityPanel(Session& session) : Panel("quality", "Quality"), session_(session) {}
  void draw(AppState& state) override;
  Figure figure(const AppState& state) override;

  // Reads a sweep file (csv, eval.h5 or a sweep folder) on a background thread; an HDF5 file is checked in a
  // child process first. A bad file goes to the log as an error and the curves on screen stay.
  void open_file(const std::string& path);
  // Starts a fidelity sweep on the live run's prompt (or the set-up's request when given) on the worker.
  void start_sweep(const AppState& state, const std::string& policies, const std::string& budgets, int new_tokens);
  // Takes a finished file read or sweep rows into the curves, and their errors into the log.
  void poll(AppState& state);

  const QualityCurves& curves() const { return curves_; }
  bool busy() const { return loading_.has_value() || sweep_running_; }
  const std::string& metric() const { return metric_; }
  void set_metric(const std::string& metric);
  // Shows each policy minus `policy` (paired by prompt, with intervals); empty: the curves themselves.
  void set_baseline(const std::string& policy) { baseline_ = policy; }
  // A log-scale y axis where the values allow one (log_scale_possible).
  void set_log_y(bool on) { log_y_ = on; }
  // The x axis: "budget" (the curves over budgets), or "cache_bytes" / "cache_peak_bytes" (the Pareto view against
  // those bytes). Throws UsageError naming the three for anything else.
  void set_x_axis(const std::string& axis);
  const std::string& x_axis() const { return x_axis_; }
  // What a click at plot coordinates (x, y) picks, with the plot's scale in units per pixel.
  std::optional<QualityPoint> pick(double x, double y, double x_units_per_px, double y_units_per_px) const;
  // The run a click on the curve `series` ("policy" or "policy @cache_type") at `budget` asks for: the policy and
  // cache type of that series' rows.
  RunChoice choice(const std::string& series, const std::string& budget) const;
  // The run a click on the Pareto view's point of (policy, budget, cache type) asks for (what a script's `pick`
  // does in that view); nullopt when the view has no such point. An empty cache type is a sweep's without them.
  std::optional<RunChoice> pareto_choice(const std::string& policy, const std::string& budget,
                                         const std::string& cache_type);

  // Where the Pareto view put each point in the last frame it was drawn, in window pixels (what a real pointer must
  // hit: a script's `points` writes them for tests that click with the X pointer). Empty when no Pareto view was drawn.
  struct DrawnPoint {
    std::string series, policy, budget, cache_type;
    float x = 0.0f, y = 0.0f;
    bool on_front = false;
  };
  const std::vector<DrawnPoint>& drawn_points() const { return drawn_points_; }

 private:
  Session& session_;
  QualityCurves curves_;
  std::string metric_;
  std::string baseline_;  // the "A - B" view's B; empty: the curves themselves
  bool log_y_ = false;
  std::string x_axis_ = "budget";
  // The Pareto view of the curves on screen, and what it was computed for (its bootstrap is not redone each frame).
  std::optional<ParetoView> pareto_;
  std::string pareto_key_, pareto_error_;
  std::vector<DrawnPoint> drawn_points_;
  const ParetoView* pareto_view();
  std::optional<std::future<eval::SweepTable>> loading_;
  uint64_t sweep_id_ = 0;  // of the sweep whose rows are on screen (0: a file)
  bool sweep_running_ = false;
  std::size_t sweep_cells_ = 0;
  std::string path_ = "sweep/rows.csv";
  std::string policies_ = "streaming_llm,h2o,snapkv,tova";
  std::string budgets_ = "10%,25%,50%";
  int new_tokens_ = 8;
};

}  // namespace kvscope::viewers
