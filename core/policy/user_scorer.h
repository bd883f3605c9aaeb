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
