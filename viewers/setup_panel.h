#pragma once
// The run form: model, prompt (editor, shipped samples, a file), policy with one widget per declared
// parameter (ranges and paper defaults from its ParamSpec list), budget and new tokens. With "live" on,
// every change re-runs on the Session's worker; the previous run of the slot is cancelled, so dragging
// the budget slider keeps the window responsive and shows the latest value as soon as it is computed.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/policy/budget_spec.h"
#include "core/policy/params.h"
#include "core/policy/registry.h"
#include "viewers/panel.h"
#include "viewers/session.h"

namespace kvscope::viewers {

// Whether a policy parameter changes the run: a layer-allocation parameter only under an allocation that
// declares it (beta does nothing with allocation=uniform); every other parameter always. `allocation` is
// empty for a policy without an allocation choice: its allocation is fixed and all its parameters count.
bool param_in_effect(const policy::ParamSpec& p, const std::string& allocation);

class SetupPanel final : public Panel {
 public:
  explicit SetupPanel(Session& session);
  void draw(AppState& state) override;

  // Scripted control (the same paths as the widgets).
  void set_model(const std::string& path) { model_path_ = path; }
  void set_prompt(const std::string& text) { prompt_ = text; }
  void set_sample(const std::string& name);
  void set_policy(const std::string& spec);  // "name:k=v,..." or "python:PATH,k=v", checked against the ParamSpecs
  void set_budget(const std::string& text);  // "64", "25%" or "cr:0.75"
  // How the cache stores keys and values ("f32", "q8_0", "kivi2:group=16,residual=64": kernels::parse_cache_types);
  // throws UsageError naming an unknown type.
  void set_cache_type(const std::string& text);
  const std::string& cache_type() const { return cache_type_; }
  // --cache-page N for the runs: also count their caches in N-token pages per (layer, KV head), the physical bytes
  // the Summary shows beside the logical ones; 0: not paged. Throws UsageError for N < 0 and for an N the cache
  // type cannot page (a KIVI key page holds whole groups: kernels::check_cache_page).
  void set_cache_page(int tokens);
  int cache_page() const { return cache_page_; }
  void set_tokens(int n) { max_new_tokens_ = n; }
  // "cpu" or "cuda", as the form's device chooser; cuda without a device is an error naming the runtime's reason.
  void set_device(const std::string& name);
  // What live runs record (a trace::RecordOptions spec; `kvscope gui --record`).
  void set_record(const std::string& spec) { record_ = spec; }
  // The default first screen: default model, the first sample prompt, a policy that evicts.
  void load_defaults();
  // Submits the current form to the "live" slot (and the full-cache baseline once per prompt).
  void run(bool with_baseline = true);
  // Keeps the current live run as its own entry for comparison.
  void pin(AppState& state);
  // Writes every finished run on screen (live, baseline, kept ones, ones read from files) from memory into
  // one HDF5 file; the model does not run. Returns how many runs are being saved.
  int save(const AppState& state, const std::string& path);

  // Loads a policy file of the user's (PATH.py or a plugin .so) into the chooser and runs it when live; a
  // file that cannot be used leaves the form as it was and shows why.
  void choose_policy_file(const std::string& path, AppState& state);
  // When the chosen policy is a file that changed on disk: reloads it and returns true (re-run it). A file that
  // no longer loads keeps the previous version in the form and is entered in state.policy_file_errors.
  bool reload_changed_policy_file(AppState& state);
  // Why the chosen policy file was not run ("not run: policy file 'X', line 1: SyntaxError ... The panels show
  // the previous version."), for the footer that is always on screen; empty when it loaded.
  std::string policy_file_problem() const;
  // Looks at the chosen policy file's time stamp on the next frame instead of within 250 ms.
  void check_policy_file_soon() { last_file_check_ = -1e9; }

  RunRequest request() const;
  std::string policy_spec() const;  // the parameters in effect that differ from their defaults
  std::string budget_text() const;
  // What the sample chooser shows: the name of the sample whose text the prompt is, else "(custom)" (a
  // typed, scripted or loaded prompt).
  std::string sample_shown() const;
  // Names of the parameters the form shows: those in effect under the chosen allocation.
  std::vector<std::string> shown_params() const;

  // One entry of the policy chooser. A shipped file (examples/policies, shipped_policies.h) is loaded as a
  // user's file is when it is chosen; until then it has no index.
  struct PolicyChoice {
    std::string section;  // "" (the built-ins), "two in sequence" (compose), "shipped files" or "your files"
    std::string label;    // the policy's name: "snapkv", "python:keydiff"
    std::string path;     // the file; empty for a built-in
    int index = -1;       // the policy's index once loaded (see policy_), else -1
  };
  // What the chooser offers, in its order: the built-ins, compose, the shipped files, the user's loaded files.
  std::vector<PolicyChoice> policy_choices() const;
  // The chosen policy's name, as the chooser shows it.
  std::string policy_name() const { return policy_info().name; }

 private:
  // A policy file the user loaded; `spec_prefix` is "python:PATH" or "plugin:PATH".
  struct UserPolicy {
    std::string spec_prefix, path;
    policy::PolicyInfo info;
    std::filesystem::file_time_type modified;
  };
  const policy::PolicyInfo& policy_info() const;
  // Loads (or reloads) a policy file into the chooser; returns its index. Throws for a file that cannot be used.
  int load_policy_file(const std::string& path);
  void reset_params();
  bool in_effect(const policy::ParamSpec& p) const;
  bool param_widgets();

  Session& session_;
  std::string model_path_;
  std::string prompt_;
  std::string sample_;  // the last one chosen: named first when several samples have the same text
  std::vector<std::string> samples_;
  std::vector<std::string> sample_texts_;  // read once, to tell whether the prompt still is a sample
  std::string prompt_file_;
  float footer_height_ = 0.0f;  // the run controls' height last frame (they stay below the scrolling form)
  bool chat_ = false;
  bool no_think_ = false;  // with chat_: Qwen3's thinking off
  bool parse_special_ = true;  // special-token text in a plain prompt is tokens (kvscope --no-parse-special)
  // compose (compose_policy.h) in policy_: two policies in sequence, offered after the built-ins.
  static constexpr int kCompose = -2;
  int policy_ = 0;  // an index into all_policies(), then into user_policies_; or kCompose
  std::vector<UserPolicy> user_policies_;
  std::vector<std::filesystem::path> shipped_policies_;  // found once, when the panel is made
  std::string policy_file_;
  std::string policy_error_;  // why the last load or reload of a policy file failed
  double last_file_check_ = 0.0;
  std::map<std::string, double> numbers_;
  std::map<std::string, std::string> choices_;
  policy::BudgetSpec::Kind budget_kind_ = policy::BudgetSpec::Kind::PromptShare;
  float budget_share_ = 25.0f;
  float compression_ratio_ = 0.75f;  // kvpress's statement of a budget: the share removed
  int budget_tokens_ = 64;
  int max_new_tokens_ = 32;
  std::string cache_type_ = "f32";  // kernels::cache_type_name of the chosen types
  int cache_page_ = 0;              // --cache-page N; 0: not paged
  std::string record_ = RunRequest{}.record;
  bool use_cuda_ = false;  // the run's compute backend: cuda when chosen (and a device exists), else cpu
  bool live_ = true;
  int pins_ = 0;
  std::string baseline_key_;  // prompt + model of the last baseline run, so it runs once per prompt
  int prompt_tokens_ = 0;     // of the latest run, for the budget slider's range
};

}  // namespace kvscope::viewers
