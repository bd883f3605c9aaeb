#include "viewers/setup_panel.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/common/error.h"
#include "core/policy/allocation_catalog.h"
#include "core/policy/budget_spec.h"
#include "core/policy/compose_policy.h"
#include "core/policy/policy_file.h"
#include "core/policy/registry.h"
#include "core/policy/shipped_policies.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/kv_storage.h"

namespace kvscope::viewers {

namespace {

// What happened to a policy file, in the log and on stderr: scripted sessions leave a record of reloads.
void note(AppState& state, const std::string& line) {
  std::fprintf(stderr, "kvscope gui: %s\n", line.c_str());
  state.log.push_back(line);
}

std::string format_number(double v, bool integer) {
  char buf[32];
  if (integer) std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(std::llround(v)));
  else std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// Parameters the form holds as text (choices_): a choice's option, a list's values joined by '/'.
bool is_text(const policy::ParamSpec& p) {
  return p.kind == policy::ParamSpec::Kind::Choice || p.kind == policy::ParamSpec::Kind::RealList;
}

}  // namespace

bool param_in_effect(const policy::ParamSpec& p, const std::string& allocation) {
  if (allocation.empty()) return true;
  const auto owners = policy::allocations_declaring(p);
  return owners.empty() || std::find(owners.begin(), owners.end(), allocation) != owners.end();
}

SetupPanel::SetupPanel(Session& session) : Panel("setup", "Set-up"), session_(session) {
  samples_ = sample_prompt_names();
  for (const auto& name : samples_) sample_texts_.push_back(sample_prompt(name));
  if (samples_.empty())
    prompt_ = kFallbackPrompt;
  else
    set_sample(samples_.front());
  shipped_policies_ = policy::shipped_policy_files();
  reset_params();
}

std::vector<SetupPanel::PolicyChoice> SetupPanel::policy_choices() const {
  std::vector<PolicyChoice> out;
  const auto& all = policy::all_policies();
  for (std::size_t i = 0; i < all.size(); ++i) out.push_back({"", all[i].name, "", static_cast<int>(i)});
  out.push_back({"two in sequence", policy::compose_policy_info().name, "", kCompose});
  const auto loaded = [&](const std::string& path) {
    for (std::size_t i = 0; i < user_policies_.size(); ++i)
      if (user_policies_[i].path == path) return static_cast<int>(all.size() + i);
    return -1;
  };
  for (const auto& file : shipped_policies_)
    out.push_back({"shipped files", "python:" + file.stem().string(), file.string(), loaded(file.string())});
  for (std::size_t i = 0; i < user_policies_.size(); ++i) {
    const auto& u = user_policies_[i];
    const bool shipped = std::any_of(shipped_policies_.begin(), shipped_policies_.end(),
                                     [&](const auto& f) { return f.string() == u.path; });
    if (!shipped) out.push_back({"your files", u.info.name, u.path, static_cast<int>(all.size() + i)});
  }
  return out;
}

std::string SetupPanel::sample_shown() const {
  if (samples_.empty()) return prompt_ == kFallbackPrompt ? "(built-in)" : "(custom)";
  std::string shown = "(custom)";
  for (std::size_t i = 0; i < samples_.size(); ++i)
    if (prompt_ == sample_texts_[i] && (shown == "(custom)" || samples_[i] == sample_)) shown = samples_[i];
  return shown;
}

bool SetupPanel::in_effect(const policy::ParamSpec& p) const {
  const auto it = choices_.find("allocation");
  return param_in_effect(p, it == choices_.end() ? "" : it->second);
}

std::vector<std::string> SetupPanel::shown_params() const {
  std::vector<std::string> names;
  for (const auto& p : policy_info().params)
    if (in_effect(p)) names.push_back(p.name);
  return names;
}

void SetupPanel::set_sample(const std::string& name) {
  if (std::find(samples_.begin(), samples_.end(), name) == samples_.end()) {
    std::string valid;
    for (const auto& s : samples_) valid += (valid.empty() ? "" : ", ") + s;
    throw UsageError("no sample prompt '" + name + "' (available: " + (valid.empty() ? "none installed" : valid) + ")");
  }
  sample_ = name;
  prompt_ = sample_texts_[std::find(samples_.begin(), samples_.end(), name) - samples_.begin()];
}

void SetupPanel::reset_params() {
  numbers_.clear();
  choices_.clear();
  const auto& info = policy_info();
  for (const auto& p : info.params) {
    if (is_text(p)) choices_[p.name] = p.default_choice;
    else numbers_[p.name] = p.default_number;
  }
}

const policy::PolicyInfo& SetupPanel::policy_info() const {
  if (policy_ == kCompose) return policy::compose_policy_info();
  const auto& all = policy::all_policies();
  return policy_ < static_cast<int>(all.size()) ? all[policy_] : user_policies_.at(policy_ - all.size()).info;
}

int SetupPanel::load_policy_file(const std::string& path) {
  const std::string spec = policy::policy_file_spec_for(path);
  UserPolicy entry{spec, path, policy::describe_policy(spec), {}};
  std::error_code ec;
  entry.modified = std::filesystem::last_write_time(path, ec);
  const auto& all = policy::all_policies();
  for (std::size_t i = 0; i < user_policies_.size(); ++i)
    if (user_policies_[i].path == path) {
      user_policies_[i] = std::move(entry);
      return static_cast<int>(all.size() + i);
    }
  user_policies_.push_back(std::move(entry));
  return static_cast<int>(all.size() + user_policies_.size() - 1);
}

bool SetupPanel::reload_changed_policy_file(AppState& state) {
  const auto& all = policy::all_policies();
  if (policy_ == kCompose || policy_ < static_cast<int>(all.size())) return false;
  UserPolicy& u = user_policies_.at(policy_ - all.size());
  std::error_code ec;
  const auto modified = std::filesystem::last_write_time(u.path, ec);
  if (ec || modified == u.modified) return false;
  u.modified = modified;
  // A file saved with a mistake keeps the form as it was; the error says what to fix.
  try {
    // What the user changed in the form stays; everything else takes the new file's defaults.
    std::map<std::string, double> numbers;
    std::map<std::string, std::string> choices;
    for (const auto& p : u.info.params) {
      if (is_text(p)) {
        if (choices_[p.name] != p.default_choice) choices[p.name] = choices_[p.name];
      } else if (numbers_[p.name] != p.default_number) {
        numbers[p.name] = numbers_[p.name];
      }
    }
    u.info = policy::describe_policy(u.spec_prefix);
    reset_params();
    for (const auto& [k, v] : numbers) if (numbers_.count(k)) numbers_[k] = v;
    for (const auto& [k, v] : choices) if (choices_.count(k)) choices_[k] = v;
    note(state, "reloaded " + u.path + " (sha256 " + u.info.provenance.at("policy_file_sha256").substr(0, 12) + ")");
    policy_error_.clear();
    state.policy_file_errors.erase(u.path);
    return true;
  } catch (const std::exception& e) {
    policy_error_ = e.what();
    state.policy_file_errors[u.path] = policy_error_;  // every panel showing this file's runs says they are stale
    note(state, "error: " + policy_error_);
    return false;
  }
}

std::string SetupPanel::policy_file_problem() const {
  if (policy_error_.empty()) return "";
  // The first line of the error names the file, the line and the exception; the rest is a traceback.
  const std::string first = policy_error_.substr(0, policy_error_.find('\n'));
  return "not run: " + first + ". The panels show the previous version.";
}

void SetupPanel::choose_policy_file(const std::string& path, AppState& state) {
  try {
    policy_ = load_policy_file(path);
    policy_file_ = path;
    reset_params();
    policy_error_.clear();
    state.policy_file_errors.erase(path);
    note(state, "loaded policy " + policy_info().name + " from " + path);
    if (live_) run();
  } catch (const std::exception& e) {
    policy_error_ = e.what();
    // Runs of this file already on screen (it was loaded before) are of a version that no longer loads.
    if (std::any_of(user_policies_.begin(), user_policies_.end(), [&](const UserPolicy& u) { return u.path == path; }))
      state.policy_file_errors[path] = policy_error_;
    note(state, std::string("error: ") + e.what());
  }
}

void SetupPanel::set_policy(const std::string& spec) {
  const auto file = policy::parse_policy_file_spec(spec);
  const auto parsed = file ? policy::PolicySpecText{"", file->assignments} : policy::split_policy_spec(spec);
  const auto& all = policy::all_policies();
  if (file) {
    policy_ = load_policy_file(file->path.string());
  } else if (policy::is_compose_spec(spec)) {
    // The form sets compose's own parameters; the inner policies run with their defaults.
    for (const auto& [key, value] : parsed.assignments)
      if (key.rfind("first.", 0) == 0 || key.rfind("then.", 0) == 0)
        throw UsageError("compose: the form sets first, then and then_ratio; '" + key +
                         "' (an inner policy's parameter) is given with --policy on the command line");
    policy_ = kCompose;
  } else {
    const std::string& name = policy::find_policy(parsed.name).name;  // throws with the valid names
    policy_ = static_cast<int>(std::find_if(all.begin(), all.end(), [&](const auto& p) { return p.name == name; }) - all.begin());
  }
  const auto& info = policy_info();
  // Validates every assignment against the ParamSpecs before touching the form.
  const policy::PolicyParams checked(info.name, info.params, parsed.assignments);
  reset_params();
  const auto text = checked.as_text();
  for (const auto& p : info.params) {
    auto it = text.find(p.name);
    if (it == text.end()) continue;
    if (is_text(p)) choices_[p.name] = it->second;
    else if (p.kind == policy::ParamSpec::Kind::Bool) numbers_[p.name] = it->second == "true" || it->second == "1";
    else numbers_[p.name] = std::stod(it->second);
  }
}

void SetupPanel::set_budget(const std::string& text) {
  const auto b = policy::BudgetSpec::parse(text);
  budget_kind_ = b.kind;
  if (b.kind == policy::BudgetSpec::Kind::PromptShare) budget_share_ = static_cast<float>(b.value * 100.0);
  if (b.kind == policy::BudgetSpec::Kind::CompressionRatio) compression_ratio_ = static_cast<float>(b.value);
  if (b.kind == policy::BudgetSpec::Kind::Tokens) budget_tokens_ = static_cast<int>(b.value);
}

void SetupPanel::set_device(const std::string& name) {
  if (name == "cpu") {
    use_cuda_ = false;
    return;
  }
  if (name != "cuda") throw UsageError("device '" + name + "': expected cpu or cuda");
  const kernels::cuda::CudaDeviceList cuda = kernels::cuda::list_cuda_devices();
  if (cuda.devices.empty()) throw UsageError("device cuda: no CUDA device: " + cuda.why_none);
  use_cuda_ = true;
}

std::string SetupPanel::policy_spec() const {
  const auto& info = policy_info();
  const auto& all = policy::all_policies();
  const bool file = policy_ != kCompose && policy_ >= static_cast<int>(all.size());
  std::string spec = file ? user_policies_.at(policy_ - all.size()).spec_prefix : info.name, sep = file ? "," : ":";
  for (const auto& p : info.params) {
    if (!in_effect(p)) continue;  // kept in the form for when its allocation is chosen again, but inert now
    std::string value;
    if (is_text(p)) {
      auto it = choices_.find(p.name);
      if (it == choices_.end() || it->second == p.default_choice) continue;
      value = it->second;
    } else {
      auto it = numbers_.find(p.name);
      if (it == numbers_.end() || it->second == p.default_number) continue;
      value = p.kind == policy::ParamSpec::Kind::Bool ? (it->second != 0 ? "true" : "false")
                                                       : format_number(it->second, p.kind == policy::ParamSpec::Kind::Int);
    }
    spec += sep + p.name + "=" + value;
    sep = ",";
  }
  return spec;
}

void SetupPanel::set_cache_type(const std::string& text) {
  const kernels::KVCacheTypes types = kernels::parse_cache_types(text);
  if (cache_page_ > 0) kernels::check_cache_page(types, cache_page_);  // kivi2 after `cache-page 20`: refused here
  cache_type_ = kernels::cache_type_name(types);
}

void SetupPanel::set_cache_page(int tokens) {
  if (tokens < 0) throw UsageError("cache page " + std::to_string(tokens) + ": give a page size in tokens, or 0 for none");
  if (tokens > 0) kernels::check_cache_page(kernels::parse_cache_types(cache_type_), tokens);
  cache_page_ = tokens;
}

std::string SetupPanel::budget_text() const {
  if (policy_info().name == "full") return "";
  switch (budget_kind_) {
    case policy::BudgetSpec::Kind::PromptShare:
      return format_number(std::round(budget_share_ * 10.0) / 10.0, false) + "%";
    case policy::BudgetSpec::Kind::CompressionRatio:
      return policy::BudgetSpec::compression_ratio_text(
          format_number(std::round(compression_ratio_ * 100.0) / 100.0, false));
    case policy::BudgetSpec::Kind::Tokens:
      break;
  }
  return std::to_string(budget_tokens_);
}

RunRequest SetupPanel::request() const {
  RunRequest r;
  r.slot = "live";
  r.model_path = model_path_;
  r.prompt = prompt_;
  r.chat = chat_;
  r.no_think = chat_ && no_think_;
  r.parse_special = parse_special_;
  r.policy_spec = policy_spec();
  r.budget = budget_text();
  r.cache_type = cache_type_ == "f32" ? "" : cache_type_;
  r.cache_page = cache_page_;
  r.max_new_tokens = max_new_tokens_;
  r.record = record_;
  r.device = use_cuda_ ? "cuda" : "cpu";
  r.fidelity = true;  // the Summary shows what the policy cost against the full cache
  return r;
}

void SetupPanel::load_defaults() {
  const auto& all = policy::all_policies();
  // A policy that evicts during prefill fills every panel (marks, timeline, budgets) on the first screen.
  for (const char* name : {"snapkv", "h2o", "streaming_llm"}) {
    auto it = std::find_if(all.begin(), all.end(), [&](const auto& p) { return p.name == name; });
    if (it != all.end()) {
      policy_ = static_cast<int>(it - all.begin());
      break;
    }
  }
  reset_params();
  budget_kind_ = policy::BudgetSpec::Kind::PromptShare;
  budget_share_ = 25.0f;
  max_new_tokens_ = 32;
  if (!samples_.empty()) set_sample(samples_.front());
}

void SetupPanel::run(bool with_baseline) {
  const RunRequest r = request();
  session_.submit(r);
  const std::string key = r.model_path + "\n" + r.prompt + (r.chat ? "\nchat" : "") + (r.no_think ? "\nno_think" : "") +
                          (r.parse_special ? "" : "\nno_parse_special") +
                          "\n" + std::to_string(r.max_new_tokens) + "\npage " + std::to_string(r.cache_page);
  if (with_baseline && r.policy_spec != "full" && key != baseline_key_) {
    baseline_key_ = key;
    RunRequest b = r;
    b.slot = "baseline";
    b.policy_spec = "full";
    b.budget.clear();
    b.cache_type.clear();  // the reference: every token, in float32 (counted in the same pages, when paged)
    session_.submit(b);
  }
}

void SetupPanel::pin(AppState& state) {
  for (const auto& e : state.runs)
    if (e.slot == "live" && e.run && !e.in_progress) {
      RunEntry copy = e;  // a copy: upsert may grow state.runs, which would leave `e` dangling
      copy.slot = "pin" + std::to_string(++pins_);
      const std::string name = copy.run->name;
      // Kept before its fidelity arrived: the next live run supersedes that measurement, so the kept run
      // gets one of its own (queued behind live runs).
      if (!copy.fidelity && copy.request && copy.request->fidelity && copy.run->meta("policy") != "full")
        session_.measure_fidelity(copy.run, *copy.request);
      state.upsert(std::move(copy));
      state.log.push_back("kept " + name + " for comparison");
      return;
    }
  state.log.push_back("nothing to keep: no finished live run");
}

int SetupPanel::save(const AppState& state, const std::string& path) {
  std::vector<Session::SavedRun> runs;
  for (const auto& e : state.runs) {
    if (!e.run || e.in_progress) continue;
    // Run names must be unique in a file; a kept run and the live one (or two files) can share one.
    std::string name = e.run->name;
    auto taken = [&](const std::string& n) {
      return std::any_of(runs.begin(), runs.end(), [&](const Session::SavedRun& r) { return r.name == n; });
    };
    for (int k = 2; taken(name); ++k) name = e.run->name + "_" + std::to_string(k);
    runs.push_back({name, e.run});
  }
  const int n = static_cast<int>(runs.size());
  session_.save(std::move(runs), path);
  return n;
}

bool SetupPanel::param_widgets() {
  bool changed = false;
  const auto& info = policy_info();
  for (const auto& p : info.params) {
    if (!in_effect(p)) continue;
    ImGui::PushID(p.name.c_str());
    ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x * 0.55f);
    switch (p.kind) {
      case policy::ParamSpec::Kind::Int: {
        int v = static_cast<int>(std::llround(numbers_[p.name]));
        const int lo = static_cast<int>(p.min), hi = static_cast<int>(std::min(p.max, 2147483647.0));
        const bool edited = hi - lo <= 1024 ? ImGui::SliderInt(p.name.c_str(), &v, lo, hi)
                                            : ImGui::DragInt(p.name.c_str(), &v, 1.0f, lo, hi);
        if (edited) numbers_[p.name] = std::clamp(v, lo, hi), changed = true;
        break;
      }
      case policy::ParamSpec::Kind::Float: {
        float v = static_cast<float>(numbers_[p.name]);
        const float lo = static_cast<float>(p.min), hi = static_cast<float>(p.max);
        const bool edited = std::isfinite(hi - lo) && hi - lo <= 1000.0f ? ImGui::SliderFloat(p.name.c_str(), &v, lo, hi, "%.3g")
                                                                          : ImGui::DragFloat(p.name.c_str(), &v, 0.01f, lo, hi, "%.3g");
        if (edited) numbers_[p.name] = std::clamp(v, lo, hi), changed = true;
        break;
      }
      case policy::ParamSpec::Kind::Bool: {
        bool v = numbers_[p.name] != 0;
        if (ImGui::Checkbox(p.name.c_str(), &v)) numbers_[p.name] = v, changed = true;
        break;
      }
      case policy::ParamSpec::Kind::Choice: {
        std::string& v = choices_[p.name];
        if (ImGui::BeginCombo(p.name.c_str(), v.c_str())) {
          for (const auto& c : p.choices)
            if (ImGui::Selectable(c.c_str(), c == v)) v = c, changed = true;
          ImGui::EndCombo();
        }
        break;
      }
      case policy::ParamSpec::Kind::RealList: {
        // Checked when the run starts: a wrong value or count is refused there with what was expected.
        if (input_text(p.name.c_str(), choices_[p.name])) changed = true;
        break;
      }
    }
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip("%s\ndefault %s, %s", p.doc.c_str(), p.default_text().c_str(), p.range_text().c_str());
    ImGui::PopID();
  }
  return changed;
}

void SetupPanel::draw(AppState& state) {
  bool rerun = false;
  // Runs may have finished: the slider's range follows the prompt's length.
  for (const auto& e : state.runs)
    if (e.slot == "live" && e.run) prompt_tokens_ = e.run->prompt_length;

  // The form scrolls; the budget and the run controls stay in a footer below it, so they are on screen at any
  // window size and however long the prompt and the policy's parameters make the form (issue 25). The footer's
  // height is the one it measured last frame (a first guess before that).
  const float footer = footer_height_ > 0 ? footer_height_ : ImGui::GetFrameHeightWithSpacing() * 9;
  const float form = std::max(ImGui::GetContentRegionAvail().y - footer, ImGui::GetFrameHeightWithSpacing() * 3);
  ImGui::BeginChild("##form", ImVec2(0, form));
  ImGui::SeparatorText("Model");
  ImGui::SetNextItemWidth(-1);
  input_text("##model", model_path_);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("GGUF file or Hugging Face folder; empty: $KVSCOPE_MODEL or the default SmolLM2-135M-Instruct");
  if (model_path_.empty()) ImGui::TextDisabled("default model (SmolLM2-135M-Instruct)");
  // Asked once: the CUDA runtime's answer does not change while the window is open.
  static const kernels::cuda::CudaDeviceList cuda = kernels::cuda::list_cuda_devices();
  const std::string cuda_label =
      cuda.devices.empty() ? "cuda (none: " + cuda.why_none + ")" : "cuda: " + cuda.devices.front().name;
  ImGui::SetNextItemWidth(-1);
  if (ImGui::BeginCombo("##device", use_cuda_ ? cuda_label.c_str() : "cpu")) {
    if (ImGui::Selectable("cpu", !use_cuda_)) use_cuda_ = false, rerun = true;
    ImGui::BeginDisabled(cuda.devices.empty());
    if (ImGui::Selectable(cuda_label.c_str(), use_cuda_)) use_cuda_ = true, rerun = true;
    ImGui::EndDisabled();
    ImGui::EndCombo();
  }
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("The compute backend the runs use (kvscope --device)");
  ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x * 0.55f);
  if (ImGui::BeginCombo("cache type", cache_type_.c_str())) {
    for (const char* type : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "kivi2", "kivi4"})
      if (ImGui::Selectable(type, cache_type_ == type)) cache_type_ = type, rerun = true;
    ImGui::EndCombo();
  }
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("How the KV cache stores keys and values (kvscope --cache-type); the full-cache baseline stays f32");
  ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x * 0.55f);
  const std::string page_shown = cache_page_ > 0 ? std::to_string(cache_page_) + " tokens" : "not paged";
  if (ImGui::BeginCombo("cache page", page_shown.c_str())) {
    // vLLM's 16 first; KIVI's key pages take whole groups (32 by default).
    for (const int tokens : {0, 16, 32, 64, 128, 256})
      if (ImGui::Selectable(tokens > 0 ? (std::to_string(tokens) + " tokens").c_str() : "not paged", cache_page_ == tokens))
        cache_page_ = tokens, rerun = true;
    ImGui::EndCombo();
  }
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("Also count the cache in pages of N tokens per layer and KV head, as a paged serving engine\n"
                      "allocates it (kvscope --cache-page N): the Summary shows these physical bytes beside the\n"
                      "entries' logical bytes. The runs themselves do not change.");

  ImGui::SeparatorText("Prompt");
  ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x * 0.55f);
  const std::string shown = sample_shown();
  if (ImGui::BeginCombo("sample", shown.c_str())) {
    for (const auto& s : samples_)
      if (ImGui::Selectable(s.c_str(), s == shown)) set_sample(s), rerun = true;
    if (samples_.empty()) ImGui::TextDisabled("no sample_data/prompts installed");
    ImGui::EndCombo();
  }
  // The chat switches on a line of their own: beside the sample list they do not fit the panel's usual width.
  if (ImGui::Checkbox("chat", &chat_)) rerun = true;
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("Wrap the prompt in the model's chat template as a user message");
  ImGui::SameLine();
  ImGui::BeginDisabled(!chat_);
  if (ImGui::Checkbox("no think", &no_think_)) rerun = true;
  ImGui::EndDisabled();
  if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip(
        "Qwen3 templates: thinking off (enable_thinking=False, kvscope --no-think); other templates refuse it");
  ImGui::SameLine();
  ImGui::BeginDisabled(chat_);
  if (ImGui::Checkbox("special tokens", &parse_special_)) rerun = true;
  ImGui::EndDisabled();
  if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip("Special-token text in the prompt (\"<|im_start|>\", \"<s>\") becomes those tokens, as in "
                      "transformers; off: plain text (kvscope --no-parse-special). A chat is always parsed.");
  input_multiline("##prompt", prompt_, -1, ImGui::GetTextLineHeight() * 7);
  if (ImGui::IsItemDeactivatedAfterEdit()) rerun = true;
  ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x - ImGui::CalcTextSize("Load file").x - ImGui::GetStyle().FramePadding.x * 4);
  input_text("##promptfile", prompt_file_);
  ImGui::SameLine();
  if (ImGui::Button("Load file")) {
    std::ifstream in(prompt_file_, std::ios::binary);
    if (!in) {
      state.log.push_back("error: cannot read prompt file '" + prompt_file_ + "'");
    } else {
      std::ostringstream ss;
      ss << in.rdbuf();
      prompt_ = ss.str();
      rerun = true;
    }
  }

  ImGui::SeparatorText("Policy");
  const auto& all = policy::all_policies();
  const int builtins = static_cast<int>(all.size());
  ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x * 0.55f);
  // Tall enough for the built-ins and the shipped files together, without scrolling on a usual window.
  if (ImGui::BeginCombo("policy", policy_info().name.c_str(), ImGuiComboFlags_HeightLargest)) {
    std::string section;
    std::string to_load;  // a shipped file chosen: loaded after the list, which loading changes
    for (const auto& choice : policy_choices()) {
      if (choice.section != section) ImGui::SeparatorText((section = choice.section).c_str());
      ImGui::PushID(choice.path.empty() ? choice.label.c_str() : choice.path.c_str());
      const bool chosen = choice.index == policy_;
      if (ImGui::Selectable(choice.label.c_str(), chosen) && !chosen) {
        if (choice.index == -1) {
          to_load = choice.path;
        } else {
          policy_ = choice.index;
          reset_params();
          rerun = true;
        }
      }
      if (ImGui::IsItemHovered()) {
        if (choice.index == kCompose) {
          const auto& info = policy::compose_policy_info();
          ImGui::SetTooltip("%s\n%s\nInner parameters (%s) on the command line.", info.summary.c_str(),
                            info.reference.c_str(), "first.NAME=VALUE, then.NAME=VALUE");
        } else if (choice.index >= 0) {
          const auto& info = choice.index < builtins ? all[choice.index] : user_policies_[choice.index - builtins].info;
          ImGui::SetTooltip("%s\n%s", info.summary.c_str(), info.reference.c_str());
        } else {
          ImGui::SetTooltip("%s\n(loaded when chosen; loading it runs its code)", choice.path.c_str());
        }
      }
      ImGui::PopID();
    }
    ImGui::EndCombo();
    if (!to_load.empty()) choose_policy_file(to_load, state);  // runs it when live
  }
  ImGui::SameLine();
  if (ImGui::SmallButton("defaults")) reset_params(), rerun = true;
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  ImGui::TextWrapped("%s", policy_info().summary.c_str());
  ImGui::PopStyleColor();
  // A policy of the user's own: a Python file (reloaded whenever it is saved) or a compiled plugin.
  ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x - ImGui::CalcTextSize("Load policy").x -
                          ImGui::GetStyle().FramePadding.x * 4);
  input_text("##policyfile", policy_file_);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("A policy file of your own: PATH.py (score(obs); docs/policies.md, Writing a policy) or a plugin .so.\n"
                      "Loading it runs its code. A Python file is reloaded and re-run whenever it is saved.");
  ImGui::SameLine();
  if (ImGui::Button("Load policy")) choose_policy_file(policy_file_, state);
  if (ImGui::GetTime() - last_file_check_ > 0.25) {
    last_file_check_ = ImGui::GetTime();
    rerun |= reload_changed_policy_file(state);
  }
  if (policy_ != kCompose && policy_ >= builtins) {
    const auto& sha = policy_info().provenance.at("policy_file_sha256");
    if (policy_error_.empty()) {
      ImGui::TextDisabled("%s  sha256 %s", user_policies_[policy_ - builtins].path.c_str(), sha.substr(0, 12).c_str());
    } else {
      // The version in the form is the last one that loaded, not the file on disk.
      ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(1.0f, 0.45f, 0.4f, 1.0f));
      ImGui::TextWrapped("%s  sha256 %s: the previous version; the file as saved does not load:",
                         user_policies_[policy_ - builtins].path.c_str(), sha.substr(0, 12).c_str());
      ImGui::PopStyleColor();
    }
  }
  if (!policy_error_.empty()) {
    ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(1.0f, 0.45f, 0.4f, 1.0f));
    ImGui::TextWrapped("%s", policy_error_.c_str());
    ImGui::PopStyleColor();
  }
  rerun |= param_widgets();
  ImGui::EndChild();

  const float footer_top = ImGui::GetCursorPosY();
  ImGui::SeparatorText("Budget");
  const bool full = policy_info().name == "full";
  ImGui::BeginDisabled(full);
  int mode = static_cast<int>(budget_kind_);
  if (ImGui::RadioButton("% of prompt", &mode, static_cast<int>(policy::BudgetSpec::Kind::PromptShare))) rerun = true;
  ImGui::SameLine();
  if (ImGui::RadioButton("tokens", &mode, static_cast<int>(policy::BudgetSpec::Kind::Tokens))) rerun = true;
  ImGui::SameLine();
  if (ImGui::RadioButton("ratio", &mode, static_cast<int>(policy::BudgetSpec::Kind::CompressionRatio))) rerun = true;
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("compression ratio R as kvpress states it: keeps int(n * (1 - R)) of an n-token prompt");
  budget_kind_ = static_cast<policy::BudgetSpec::Kind>(mode);
  ImGui::SetNextItemWidth(-1);
  if (budget_kind_ == policy::BudgetSpec::Kind::PromptShare) {
    if (ImGui::SliderFloat("##budget", &budget_share_, 1.0f, 100.0f, "%.0f%% of the prompt")) rerun = true;
  } else if (budget_kind_ == policy::BudgetSpec::Kind::CompressionRatio) {
    if (ImGui::SliderFloat("##budget", &compression_ratio_, 0.0f, 0.99f, "compression ratio %.2f")) rerun = true;
  } else {
    const int hi = std::max(16, prompt_tokens_ > 0 ? prompt_tokens_ : 512);
    if (ImGui::SliderInt("##budget", &budget_tokens_, 1, hi, "%d tokens per (layer, KV head)")) rerun = true;
  }
  ImGui::EndDisabled();
  if (full) ImGui::TextDisabled("the full cache keeps every token");
  ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x * 0.55f);
  if (ImGui::SliderInt("new tokens", &max_new_tokens_, 1, 256)) rerun = true;

  ImGui::Separator();
  if (ImGui::Button("Run", ImVec2(ImGui::GetFontSize() * 5, 0))) run();
  ImGui::SameLine();
  if (ImGui::Button("Cancel")) session_.cancel_all();
  ImGui::SameLine();
  ImGui::Checkbox("live", &live_);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("Re-run on every change; a newer run cancels the one in progress, so dragging the budget never blocks");
  if (ImGui::Button("Keep for comparison")) pin(state);
  // Wrapped: with a cache type and a page size the line is wider than the form's usual width.
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  ImGui::TextWrapped("run: %s  budget %s%s%s", policy_spec().c_str(), full ? "-" : budget_text().c_str(),
                     cache_type_ == "f32" ? "" : ("  cache " + cache_type_).c_str(),
                     cache_page_ > 0 ? ("  pages of " + std::to_string(cache_page_)).c_str() : "");
  ImGui::PopStyleColor();

  const SessionStatus st = session_.status();
  if (!policy_error_.empty()) {
    // In the footer, which is always on screen: the form's own message may be scrolled out of view.
    ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(1.0f, 0.45f, 0.4f, 1.0f));
    ImGui::TextWrapped("%s", policy_file_problem().c_str());
    ImGui::PopStyleColor();
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", policy_error_.c_str());
  }
  if (st.busy) {
    // A task wider than the bar (a run's name and where its prefill is) goes under it, wrapped, not clipped.
    const std::string task = st.task.empty() ? "working..." : st.task;
    const bool fits = ImGui::CalcTextSize(task.c_str()).x + ImGui::GetStyle().FramePadding.x * 2 <= ImGui::GetContentRegionAvail().x;
    ImGui::ProgressBar(st.fraction, ImVec2(-1, 0), fits ? task.c_str() : nullptr);
    if (!fits) ImGui::TextWrapped("%s", task.c_str());
  } else {
    ImGui::TextDisabled("idle; %d runs done%s", st.completed,
                        st.last_run_ms > 0 ? (", last " + std::to_string(static_cast<int>(st.last_run_ms)) + " ms").c_str() : "");
  }
  if (!st.last_error.empty()) {
    ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(1.0f, 0.45f, 0.4f, 1.0f));
    ImGui::TextWrapped("%s", st.last_error.c_str());
    ImGui::PopStyleColor();
  }
  footer_height_ = ImGui::GetCursorPosY() - footer_top;
  if (rerun && live_) run();
}

}  // namespace kvscope::viewers
