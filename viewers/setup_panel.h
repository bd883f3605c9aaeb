#pragma once
// The run form: model, prompt (editor, shipped samples, a file), policy with one widget per declared
// parameter (ranges and paper defaults from its ParamSpec list), budget and new tokens. With "live" on,
// every change re-runs on the Session's worker; the previous run of the slot is cancelled, so dragging
// the budget slider keeps the window responsive and shows the latest value as soon as it is computed.
#include <map>
#include <string>

#include "viewers/panel.h"
#include "viewers/session.h"

namespace kvscope::viewers {

class SetupPanel final : public Panel {
 public:
  explicit SetupPanel(Session& session);
  void draw(AppState& state) override;

  // Scripted control (the same paths as the widgets).
  void set_model(const std::string& path) { model_path_ = path; }
  void set_prompt(const std::string& text) { prompt_ = text; }
  void set_sample(const std::string& name);
  void set_policy(const std::string& spec);  // "name:k=v,...", checked against the ParamSpecs
  void set_budget(const std::string& text);  // "64" or "25%"
  void set_tokens(int n) { max_new_tokens_ = n; }
  // The default first screen: default model, the first sample prompt, a policy that evicts.
  void load_defaults();
  // Submits the current form to the "live" slot (and the full-cache baseline once per prompt).
  void run(bool with_baseline = true);
  // Keeps the current live run as its own entry for comparison.
  void pin(AppState& state);
  // Writes every finished run on screen (live, baseline, kept ones, ones read from files) from memory into
  // one HDF5 file; the model does not run. Returns how many runs are being saved.
  int save(const AppState& state, const std::string& path);

  RunRequest request() const;
  std::string policy_spec() const;
  std::string budget_text() const;

 private:
  void reset_params();
  bool param_widgets();

  Session& session_;
  std::string model_path_;
  std::string prompt_;
  std::string sample_;
  std::vector<std::string> samples_;
  std::string prompt_file_;
  bool chat_ = false;
  int policy_ = 0;
  std::map<std::string, double> numbers_;
  std::map<std::string, std::string> choices_;
  bool budget_percent_ = true;
  float budget_share_ = 25.0f;
  int budget_tokens_ = 64;
  int max_new_tokens_ = 32;
  bool live_ = true;
  int pins_ = 0;
  std::string baseline_key_;  // prompt + model of the last baseline run, so it runs once per prompt
  int prompt_tokens_ = 0;     // of the latest run, for the budget slider's range
};

}  // namespace kvscope::viewers
