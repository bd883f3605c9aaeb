#include "viewers/run_choice.h"

#include "kernels/kv_storage.h"

namespace kvscope::viewers {

std::string choice_cache_type(const RunChoice& choice) {
  return choice.cache_type.empty() ? std::string("f32")
                                   : kernels::cache_type_name(kernels::parse_cache_types(choice.cache_type));
}

int run_of_choice(const AppState& state, const RunChoice& choice, const std::string& prompt) {
  const std::string type = choice_cache_type(choice);
  for (int i = static_cast<int>(state.runs.size()) - 1; i >= 0; --i) {
    const trace::RunTrace* r = state.run(i);
    if (!r || r->meta("prompt") != prompt) continue;
    const bool policy = r->meta("policy_spec") == choice.policy || r->meta("policy") == choice.policy;
    // A trace written before cache types were recorded held float32.
    const std::string run_type = r->meta("cache_type").empty() ? "f32" : r->meta("cache_type");
    if (policy && r->meta("budget") == choice.budget && run_type == type) return i;
  }
  return -1;
}

std::string describe_choice(const RunChoice& choice) {
  const std::string type = choice_cache_type(choice);
  return choice.policy + " at " + choice.budget + (type == "f32" ? "" : " with a " + type + " cache");
}

}  // namespace kvscope::viewers
