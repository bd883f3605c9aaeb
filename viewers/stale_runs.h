#pragma once
// Results that no longer match their policy's file. When a saved policy file does not load (a syntax error), the
// window keeps the runs of the version before it: they are still worth looking at, but every panel showing one
// must say that it is the previous version, and why the new one did not run, so an edit that failed is not read as
// an edit that changed nothing (issue 38).
#include <string>

#include "viewers/panel.h"

namespace kvscope::viewers {

// The policy file run i ran, when it ran one (a live run of `python:PATH` or `plugin:PATH`), else "".
std::string policy_file_of(const AppState& state, int i);
// Non-empty when run i ran a policy file that, as saved now, does not load (AppState::policy_file_errors):
// "shows the previous version of FILE; the file as saved does not load: ERROR".
std::string stale_reason(const AppState& state, int i);
// The notice a panel shows above its contents: about the active run for a single-run panel, about any run shown for
// one that shows every run (`all_runs`: Summary, Compare, Layer stats, Budgets). Empty when nothing is stale.
std::string stale_notice(const AppState& state, bool all_runs);

}  // namespace kvscope::viewers
