#include "viewers/quality_panel.h"

#include "core/eval/sweep_summary.h"

#include <imgui.h>
#include <implot.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/common/error.h"
#include "core/eval/sweep_store.h"

namespace kvscope::viewers {

namespace {

// The live run's entry: its request carries the prompt a window sweep runs on.
const RunEntry* live_entry(const AppState& state) {
  for (const auto& e : state.runs)
    if (e.slot == kLiveSlot && e.request) return &e;
  return nullptr;
}

// Into the log panel, and on stderr like the session's messages, so scripted sessions keep a record.
void note(AppState& state, std::string text) {
  std::fprintf(stderr, "kvscope gui: %s\n", text.c_str());
  state.log.push_back(std::move(text));
}

}  // namespace

void QualityPanel::open_file(const std::string& path) {
  path_ = path;
  loading_ = std::async(std::launch::async, [path] { return eval::open_sweep_file(path); });
}

void QualityPanel::set_metric(const std::string& metric) {
  if (std::find(curves_.metrics.begin(), curves_.metrics.end(), metric) == curves_.metrics.end())
    throw UsageError("the sweep on screen has no metric '" + metric + "'");
  metric_ = metric;
}

void QualityPanel::set_x_axis(const std::string& axis) {
  std::string names = "budget";
  bool known = axis == "budget";
  for (const auto& bytes : pareto_bytes_axes()) {
    names += std::string(", ") + bytes.metric;
    known = known || axis == bytes.metric;
  }
  if (!known) throw UsageError("the Quality panel's x axis is one of " + names + ", not '" + axis + "'");
  x_axis_ = axis;
}

const ParetoView* QualityPanel::pareto_view() {
  const std::string key = std::to_string(curves_.rows.size()) + "|" + curves_.source + "|" + metric_ + "|" + x_axis_;
  if (key != pareto_key_) {
    pareto_key_ = key;
    pareto_.reset();
    pareto_error_.clear();
    try {
      pareto_ = pareto_points(curves_.rows, metric_, x_axis_);
    } catch (const Error& e) {
      pareto_error_ = e.what();  // no row has both columns (a sweep written before bytes were recorded)
    }
  }
  return pareto_ ? &*pareto_ : nullptr;
}

void QualityPanel::start_sweep(const AppState& state, const std::string& policies, const std::string& budgets,
                               int new_tokens) {
  const RunEntry* live = live_entry(state);
  if (!live) throw UsageError("a sweep runs on the live run's prompt: run something first");
  SweepRequest r;
  r.model_path = live->request->model_path;
  r.prompt = live->request->prompt;
  r.chat = live->request->chat;
  r.no_think = live->request->no_think;
  r.parse_special = live->request->parse_special;
  r.policies = eval::split_policy_list(policies);
  r.budgets = eval::split_list(budgets, "budget");
  r.new_tokens = new_tokens;
  const std::size_t cells = r.cells();
  sweep_id_ = session_.submit_sweep(std::move(r));
  sweep_running_ = true;
  sweep_cells_ = cells;
  curves_ = QualityCurves{};
  curves_.source = "sweep in the window";
  curves_.eval_kind = "fidelity";
}

void QualityPanel::poll(AppState& state) {
  if (loading_ && loading_->wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
    try {
      QualityCurves loaded = quality_curves(loading_->get());
      curves_ = std::move(loaded);
      metric_ = default_metric(curves_);
      sweep_id_ = 0;
      note(state, "opened sweep " + curves_.source + " (" + std::to_string(curves_.rows.size()) + " rows, " +
                      std::to_string(curves_.policies.size()) + " policies, " + std::to_string(curves_.budgets.size()) +
                      " budgets)");
    } catch (const std::exception& e) {
      note(state, std::string("error: ") + e.what());
    }
    loading_.reset();
  }
  for (auto& u : session_.take_sweep_rows()) {
    if (u.sweep != sweep_id_) continue;  // a superseded sweep's last row
    curves_.add(std::move(u.row));
    if (metric_.empty()) metric_ = default_metric(curves_);
    if (curves_.rows.size() >= u.cells) sweep_running_ = false;
  }
  if (sweep_running_ && session_.idle()) sweep_running_ = false;  // cancelled or failed (the log says which)
}

RunChoice QualityPanel::choice(const std::string& series, const std::string& budget) const {
  for (const auto& r : curves_.rows)
    if (r.series() == series) return {r.policy, budget, r.cache_type, "quality curve"};
  return {series, budget, "", "quality curve"};
}

std::optional<RunChoice> QualityPanel::pareto_choice(const std::string& policy, const std::string& budget,
                                                     const std::string& cache_type) {
  const ParetoView* view = pareto_view();
  if (!view) return std::nullopt;
  for (const auto& p : view->points)
    if (p.policy == policy && p.budget == budget && p.cache_type == cache_type)
      return RunChoice{p.policy, p.budget, p.cache_type, "Pareto point"};
  return std::nullopt;
}

std::optional<QualityPoint> QualityPanel::pick(double x, double y, double x_units_per_px, double y_units_per_px) const {
  return point_near(curves_, metric_, x, y, x_units_per_px, y_units_per_px);
}

void QualityPanel::draw(AppState& state) {
  drawn_points_.clear();  // filled again if the Pareto view is drawn this frame
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 18);
  input_text("##path", path_);
  ImGui::SameLine();
  if (ImGui::Button(loading_ ? "Reading..." : "Open sweep") && !loading_) open_file(path_);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("a sweep folder, its rows.csv or its eval.h5 (kvscope sweep --out)");

  if (ImGui::CollapsingHeader("Run a sweep here (fidelity on the live run's prompt)")) {
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 18);
    input_text("policies", policies_);
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 18);
    input_text("budgets", budgets_);
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 8);
    ImGui::InputInt("new tokens", &new_tokens_);
    new_tokens_ = std::clamp(new_tokens_, 1, 256);
    if (!sweep_running_) {
      if (ImGui::Button("Run sweep")) {
        try {
          start_sweep(state, policies_, budgets_, new_tokens_);
        } catch (const std::exception& e) {
          note(state, std::string("error: ") + e.what());
        }
      }
    } else {
      if (ImGui::Button("Cancel sweep")) session_.cancel_sweep();
      ImGui::SameLine();
      const float done = sweep_cells_ ? static_cast<float>(curves_.rows.size()) / sweep_cells_ : 0.0f;
      const std::string label = std::to_string(curves_.rows.size()) + "/" + std::to_string(sweep_cells_) + " cells";
      ImGui::ProgressBar(done, ImVec2(ImGui::GetFontSize() * 12, 0), label.c_str());
    }
  }

  if (curves_.empty()) {
    centered_hint(sweep_running_ ? "Waiting for the first cell..."
                                 : "Open a sweep (kvscope sweep --out DIR) or run one here.");
    return;
  }
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 12);
  if (ImGui::BeginCombo("metric", metric_.c_str())) {
    for (const auto& m : curves_.metrics)
      if (ImGui::Selectable(m.c_str(), m == metric_)) metric_ = m;
    ImGui::EndCombo();
  }
  ImGui::SameLine();
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 10);
  // The paged axes only for a sweep that counted pages (--cache-page).
  std::vector<std::pair<std::string, std::string>> axes = {{"budget", "budget"}};
  for (const auto& bytes : pareto_bytes_axes())
    if (std::find(curves_.metrics.begin(), curves_.metrics.end(), bytes.metric) != curves_.metrics.end() ||
        x_axis_ == bytes.metric)
      axes.emplace_back(bytes.metric, std::string(bytes.label) + " (Pareto)");
  std::string shown_axis = axes[0].second;
  for (const auto& [metric, label] : axes)
    if (x_axis_ == metric) shown_axis = label;
  if (ImGui::BeginCombo("x", shown_axis.c_str())) {
    for (const auto& [metric, label] : axes)
      if (ImGui::Selectable(label.c_str(), x_axis_ == metric)) x_axis_ = metric;
    ImGui::EndCombo();
  }
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("budget: the curves over budgets. cache bytes: quantize or evict? The quality against the bytes the "
                      "cache really held at the end (peak: the most it held), one curve per policy and cache type, the "
                      "Pareto front marked, as kvscope figure --view pareto draws it");
  const bool pareto = x_axis_ != "budget";
  ImGui::SameLine();
  ImGui::BeginDisabled(pareto);
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 12);
  if (ImGui::BeginCombo("minus", baseline_.empty() ? "(nothing)" : baseline_.c_str())) {
    if (ImGui::Selectable("(nothing)", baseline_.empty())) baseline_.clear();
    for (const auto& p : curves_.policies)
      if (ImGui::Selectable(p.c_str(), p == baseline_)) baseline_ = p;
    ImGui::EndCombo();
  }
  ImGui::EndDisabled();
  if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip(pareto ? "Differences belong to the budget axis"
                             : "Show each policy minus this one, paired by prompt, with 95%% bootstrap intervals (A - B)");
  ImGui::SameLine();
  const bool log_possible = !pareto && log_scale_possible(curves_, metric_, baseline_);
  ImGui::BeginDisabled(!log_possible);
  ImGui::Checkbox("log y", &log_y_);
  ImGui::EndDisabled();
  if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip(log_possible ? "A log-scale y axis (KL and perplexity span decades across budgets)"
                                   : "Needs every value above zero (differences and zero scores cannot be on a log axis)");
  ImGui::SameLine();
  ImGui::TextDisabled("%s", curves_.source.c_str());
  ImGui::SameLine();
  export_button(state, key());

  const Figure f = figure(state);
  if (pareto) {
    if (f.empty()) {
      ImGui::TextWrapped("no Pareto view: %s", pareto_error_.c_str());
      return;
    }
    const ParetoView* view = pareto_view();
    std::optional<RunChoice> clicked_point;
    draw_line_plot("pareto", std::get<LinePlot>(f.parts.front()), ImGui::GetContentRegionAvail(), [&] {
      if (!view) return;
      const ImVec2 origin = ImGui::GetMainViewport()->Pos;
      for (const auto& p : view->points) {
        const ImVec2 at = ImPlot::PlotToPixels(p.bytes / (1024.0 * 1024.0), p.quality);
        drawn_points_.push_back({p.series, p.policy, p.budget, p.cache_type, at.x - origin.x, at.y - origin.y, p.on_front});
      }
      if (!ImPlot::IsPlotHovered()) return;
      const ImPlotRect limits = ImPlot::GetPlotLimits();
      const ImVec2 size = ImPlot::GetPlotSize();
      const ImPlotPoint mouse = ImPlot::GetPlotMousePos();
      const ParetoPoint* p = pareto_point_near(*view, mouse.x, mouse.y, limits.X.Size() / std::max(1.0f, size.x),
                                               limits.Y.Size() / std::max(1.0f, size.y));
      if (!p) return;
      char text[640];
      std::snprintf(text, sizeof text,
                    "%s at %s: %s = %.4g\n95%% bootstrap interval [%.4g, %.4g] over %d prompt(s)\n%s %.4g MiB%s\n"
                    "click: run policy %s, budget %s, %s cache live (or show its run, when on screen)",
                    p->series.c_str(), p->budget.c_str(), metric_.c_str(), p->quality, p->low, p->high, p->n,
                    x_axis_.c_str(), p->bytes / (1024.0 * 1024.0), p->on_front ? "\non the Pareto front" : "",
                    p->policy.c_str(), p->budget.c_str(), p->cache_type.empty() ? "f32" : p->cache_type.c_str());
      ImGui::SetTooltip("%s", text);
      state.hover_note = text;
      if (plot_clicked()) clicked_point = RunChoice{p->policy, p->budget, p->cache_type, "Pareto point"};
    });
    if (clicked_point) state.run_choice = *clicked_point;
    return;
  }
  if (f.empty()) return;
  LinePlot plot = std::get<LinePlot>(f.parts.front());
  const trace::RunTrace* live = state.active_run();
  const std::optional<double> live_x = live ? budget_position(curves_, live->meta("budget")) : std::nullopt;
  if (live_x) plot.marks_x.push_back(*live_x);
  std::optional<QualityPoint> clicked;
  draw_line_plot("quality", plot, ImGui::GetContentRegionAvail(), [&] {
    if (live_x)
      ImPlot::Annotation(*live_x, ImPlot::GetPlotLimits().Y.Max, ImVec4(1, 1, 1, 0.9f), ImVec2(4, 4), true, "%s (%s)",
                         live->name.c_str(), live->meta("budget").c_str());
    if (!ImPlot::IsPlotHovered() || !baseline_.empty()) return;  // points are differences there, not cells
    const ImPlotRect limits = ImPlot::GetPlotLimits();
    const ImVec2 size = ImPlot::GetPlotSize();
    const ImPlotPoint mouse = ImPlot::GetPlotMousePos();
    const double ux = limits.X.Size() / std::max(1.0f, size.x), uy = limits.Y.Size() / std::max(1.0f, size.y);
    const auto near = pick(mouse.x, mouse.y, ux, uy);
    if (near) {
      const auto ci = eval::cell_interval(curves_.rows, near->policy, near->budget, metric_);
      ImGui::SetTooltip("%s at %s: %s = %.4g\n95%% bootstrap interval [%.4g, %.4g] over %d prompt(s)\nclick: run it live",
                        near->policy.c_str(), near->budget.c_str(), metric_.c_str(), near->y, ci ? ci->low : near->y,
                        ci ? ci->high : near->y, ci ? ci->n : 0);
    }
    if (near && plot_clicked()) clicked = near;
  });
  if (clicked) state.run_choice = choice(clicked->policy, clicked->budget);
}

Figure QualityPanel::figure(const AppState&) {
  if (curves_.empty() || metric_.empty()) return {};
  if (x_axis_ != "budget") {
    const ParetoView* view = pareto_view();
    return view ? pareto_figure(*view, pareto_title(curves_.eval_kind, *view)) : Figure{};
  }
  try {
    return quality_figure(curves_, metric_, baseline_, log_y_);
  } catch (const Error&) {
    return {};  // no row has the metric yet
  }
}

}  // namespace kvscope::viewers
