#pragma once
// What every user-written scorer (a Python file or a compiled plugin) shares: the framework parameters
// `window`, `recent` and `sinks` (0 unless given), its `needs` turned into an observation request, and the
// checks on the scores it returns. Errors name the file.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/policy/params.h"
#include "core/policy/scored_policy.h"

namespace kvscope::policy {

// The names a scorer may list in `needs`, as the built-ins' ObservationRequest names them.
const std::vector<std::string>& scorer_need_names();
// The request for `needs`; throws UsageError naming `file` for an unknown name.
ObservationRequest request_for_needs(const std::vector<std::string>& needs, const std::filesystem::path& file);

// Whether `name` is one of the framework parameters below (a file may set their defaults, not declare them).
bool is_framework_param(const std::string& name);
// window, recent and sinks with defaults from `defaults` (a name absent there defaults to 0).
std::vector<ParamSpec> scorer_framework_params(const std::map<std::string, int>& defaults);
// A user file's parameters against the chosen allocation's (`params`' `allocation`; nothing without one), so that
// nothing of the file changes an allocation's parameter unseen. `what` names the file ("policy file 'x.py'"),
// `declared` its own parameters, `framework_defaults` the framework defaults it set. Throws UsageError naming
// the file, the parameter and the allocation when the file declares a parameter the allocation declares too,
// or when it sets the default of a framework parameter the allocation shares (dynamickv's `window`) to another
// value than the allocation's and the spec does not give it. A shared framework parameter the file leaves alone
// takes the allocation's default (the framework's 0 would disable it).
void resolve_allocation_params(const std::string& what, const std::vector<std::string>& declared,
                               const std::map<std::string, int>& framework_defaults, PolicyParams& params);
// Throws UsageError naming `file` when a window part is needed but `window` is 0.
void check_window(const ObservationRequest& needs, const PolicyParams& params, const std::filesystem::path& file);

// "" when every score is finite, otherwise what is wrong ("3 scores are not finite, the first at entry 17: nan").
std::string non_finite_scores(const float* scores, std::size_t n);

// A ScoredPolicy whose scorer is a user's: it asks for `needs` (with the `window` parameter's window), keeps
// the first `sinks` and last max(`recent`, `window`) entries whatever their score and reserves the window.
class UserScorer : public ScoredPolicy {
 public:
  UserScorer(std::string name, const PolicyParams& params, ObservationRequest needs, std::filesystem::path file);

 protected:
  // The engine calls a policy for a layer only when it asked for some part of that layer's attention; a
  // scorer of the cache alone (key norms) asks for the cheapest part, the last row, so that it is called.
  ObservationRequest scorer_request(Phase) const override {
    ObservationRequest r = needs_;
    if (!r.any()) r.last_row = true;
    return r;
  }
  bool scorer_reads_attention() const override {
    return needs_.column_sums || needs_.window_sums || needs_.window_rows || needs_.last_row || needs_.log_sum_exp;
  }
  int sinks(int /*budget*/) const override { return sinks_; }
  int recent(int /*budget*/) const override { return std::max(recent_, window_); }
  int reserved() const override { return window_; }
  const std::filesystem::path& file() const { return file_; }
  // "policy file 'x.py'" or "plugin 'x.so'", for messages.
  virtual std::string what() const = 0;

 private:
  ObservationRequest needs_;
  std::filesystem::path file_;
  int window_, recent_, sinks_;
};

}  // namespace kvscope::policy
