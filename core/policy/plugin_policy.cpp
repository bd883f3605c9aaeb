#include "core/policy/plugin_policy.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "core/common/error.h"
#include "core/common/sha256.h"
#include "core/policy/user_code_scope.h"
#include "core/policy/user_scorer.h"
#include "include/kvscope/policy_plugin.h"

namespace kvscope::policy {

namespace {

// The opened library; closed when the last policy made from it is gone.
struct Library {
  std::filesystem::path file;
  void* handle = nullptr;
  const kvscope_policy_plugin* plugin = nullptr;
  ~Library() {
    if (!handle) return;
    UserCodeScope running("plugin", file, "its unload (dlclose: static destructors)");
    dlclose(handle);
  }
};

std::vector<std::string> needs_names(uint32_t needs) {
  static const std::pair<uint32_t, const char*> flags[] = {
      {KVSCOPE_NEEDS_COLUMN_SUMS, "column_sums"}, {KVSCOPE_NEEDS_WINDOW_SUMS, "window_sums"},
      {KVSCOPE_NEEDS_WINDOW_ROWS, "window_rows"}, {KVSCOPE_NEEDS_LAST_ROW, "last_row"},
      {KVSCOPE_NEEDS_LOG_SUM_EXP, "log_sum_exp"}, {KVSCOPE_NEEDS_QUERIES, "queries"},
      {KVSCOPE_NEEDS_HIDDEN_STATES, "hidden_states"}};
  std::vector<std::string> out;
  for (const auto& [flag, name] : flags)
    if (needs & flag) out.push_back(name);
  return out;
}

class PluginPolicy final : public UserScorer {
 public:
  PluginPolicy(std::string name, const PolicyParams& params, ObservationRequest needs, std::shared_ptr<Library> library,
               std::vector<std::string> param_names)
      : UserScorer(std::move(name), params, needs, library->file), library_(std::move(library)) {
    for (const auto& n : param_names) values_.push_back(params.get_float(n));
  }

 protected:
  std::string what() const override { return "plugin '" + file().string() + "'"; }
  int recent(int budget) const override {
    if (!library_->plugin->recent) return UserScorer::recent(budget);
    UserCodeScope running("plugin", file(), "recent()");
    return std::max(checked(library_->plugin->recent(budget, values_.data()), "recent"), reserved());
  }
  int sinks(int budget) const override {
    if (!library_->plugin->sinks) return UserScorer::sinks(budget);
    UserCodeScope running("plugin", file(), "sinks()");
    return checked(library_->plugin->sinks(budget, values_.data()), "sinks");
  }

  std::vector<float> score(const AttentionObservation& obs, int kv_head, cache::KVCache& cache) override {
    const int group = obs.n_heads / obs.n_kv_heads, n = cache.size(obs.layer, kv_head);
    kvscope_observation o{};
    o.layer = obs.layer;
    o.kv_head = kv_head;
    o.n_layers = cache.n_layers();
    o.n_kv_heads = obs.n_kv_heads;
    o.n_heads = obs.n_heads;
    o.group = group;
    o.head_dim = cache.head_dim();
    o.phase = obs.phase == observation::Phase::Prefill ? KVSCOPE_PHASE_PREFILL : KVSCOPE_PHASE_DECODE;
    o.step = obs.step;
    o.n_entries = n;
    o.budget = layer_budgets().at(obs.layer);
    o.prompt_length = run_info().prompt_length;
    o.keys = cache.keys(obs.layer, kv_head).data();
    o.values = cache.values(obs.layer, kv_head).data();
    o.positions = cache.positions(obs.layer, kv_head).data();
    o.state = cache.mutable_scores(obs.layer, kv_head).data();
    o.n_queries = obs.n_queries();
    o.window = obs.window;
    o.query_positions = obs.query_positions.data();
    // Per-part pointer tables for this KV head's query heads.
    auto table = [&](const std::vector<std::vector<float>>& part, std::vector<const float*>& out) -> const float* const* {
      if (part.empty()) return nullptr;
      out.clear();
      for (int i = 0; i < group; ++i) out.push_back(part.at(kv_head * group + i).data());
      return out.data();
    };
    o.column_sums = table(obs.column_sums, tables_[0]);
    o.window_sums = table(obs.window_sums, tables_[1]);
    o.window_rows = table(obs.window_rows, tables_[2]);
    o.last_row = table(obs.last_row, tables_[3]);
    o.log_sum_exp = table(obs.log_sum_exp, tables_[4]);
    o.queries = obs.queries.empty() ? nullptr : obs.queries.data();
    o.params = values_.data();
    // ABI 2's fields: a version-1 plugin's struct ends before them and never reads them.
    if (!obs.hidden_states.empty() && obs.n_queries() > 0) {
      o.hidden_dim = static_cast<int32_t>(obs.hidden_states.size() / obs.n_queries());
      o.hidden_states = obs.hidden_states.data();
    }
    std::vector<float> scores(n, 0.0f);
    char error[1024] = {0};
    const std::string where = what() + " score() for layer " + std::to_string(obs.layer) + " KV head " + std::to_string(kv_head);
    int32_t failed = 0;
    {
      UserCodeScope running("plugin", file(), "score()", obs.layer);
      failed = library_->plugin->score(&o, scores.data(), error, sizeof error);
    }
    if (failed != 0) {
      error[sizeof error - 1] = '\0';
      throw Error(where + " failed: " + (error[0] ? error : "(no message)"));
    }
    if (const std::string bad = non_finite_scores(scores.data(), scores.size()); !bad.empty())
      throw Error(where + ": " + bad + "; scores must be finite");
    return scores;
  }

 private:
  int checked(int value, const char* function) const {
    if (value < 0) throw Error(what() + " " + function + "() returned " + std::to_string(value) + ", below 0");
    return value;
  }

  std::shared_ptr<Library> library_;
  std::vector<double> values_;
  std::vector<const float*> tables_[5];
};

}  // namespace

PolicyInfo load_plugin_policy(const std::filesystem::path& file) {
  auto library = std::make_shared<Library>();
  library->file = file;
  const std::string where = "plugin '" + file.string() + "'";
  // dlopen searches the library path for a bare name; a user's file is meant as a path.
  const std::string path = file.has_parent_path() ? file.string() : "./" + file.string();
  {
    UserCodeScope running("plugin", library->file, "its load (dlopen: static constructors)");
    library->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
  if (!library->handle) throw UsageError(where + " cannot be loaded: " + dlerror());
  auto entry = reinterpret_cast<kvscope_policy_plugin_entry>(dlsym(library->handle, KVSCOPE_POLICY_PLUGIN_ENTRY_NAME));
  if (!entry)
    throw UsageError(where + " has no entry point " KVSCOPE_POLICY_PLUGIN_ENTRY_NAME "() (include/kvscope/policy_plugin.h)");
  {
    UserCodeScope running("plugin", library->file, KVSCOPE_POLICY_PLUGIN_ENTRY_NAME "()");
    library->plugin = entry();
  }
  const kvscope_policy_plugin* p = library->plugin;
  if (!p) throw UsageError(where + ": " KVSCOPE_POLICY_PLUGIN_ENTRY_NAME "() returned NULL");
  if (p->abi_version < KVSCOPE_POLICY_ABI_VERSION_MIN || p->abi_version > KVSCOPE_POLICY_ABI_VERSION)
    throw UsageError(where + " was built for policy ABI version " + std::to_string(p->abi_version) +
                     "; this kvscope speaks versions " + std::to_string(KVSCOPE_POLICY_ABI_VERSION_MIN) + " to " +
                     std::to_string(KVSCOPE_POLICY_ABI_VERSION) + " (rebuild it against include/kvscope/policy_plugin.h)");
  // A version-1 description ends at `sinks`: what version 2 added is read only from a plugin that states it.
  const bool abi2 = p->abi_version >= 2;
  const uint32_t needs = abi2 ? p->needs : p->needs & ~static_cast<uint32_t>(KVSCOPE_NEEDS_HIDDEN_STATES);
  const int32_t block_scoring = abi2 ? p->block_scoring : 0;
  if (block_scoring < 0)
    throw UsageError(where + ": its description's block_scoring is " + std::to_string(block_scoring) +
                     "; expected 0 (every entry scored at once) or a block size above 0");
  if (!p->score) throw UsageError(where + " has no score function");
  if (p->n_params < 0 || (p->n_params > 0 && !p->params)) throw UsageError(where + " declares parameters without a table");

  std::vector<ParamSpec> own;
  std::vector<std::string> declared;
  std::map<std::string, int> framework_defaults;
  Protocol protocol{
      .block = p->block, .decode_evict = p->decode_evict != 0, .trim_before_output = p->trim_before_output != 0};
  protocol.block_scoring = block_scoring;
  for (int i = 0; i < p->n_params; ++i) {
    const kvscope_param_spec& s = p->params[i];
    if (!s.name || !*s.name) throw UsageError(where + ": parameter " + std::to_string(i) + " has no name");
    const std::string name = s.name, doc = s.doc ? s.doc : "declared by " + file.filename().string();
    declared.push_back(name);
    // decode_interval, which the description has no field for (ABI 1), is declared as a parameter: its default
    // is the protocol's, and its value reaches score() at its place in obs->params like any parameter's.
    if (name == "decode_interval") {
      if (!(s.default_value == std::floor(s.default_value) && s.default_value >= 1 && s.default_value <= (1 << 20)))
        throw UsageError(where + ": parameter 'decode_interval' has default " + std::to_string(s.default_value) +
                         ", not an integer in [1, 1048576] (decode steps between evictions)");
      protocol.decode_interval = static_cast<int>(s.default_value);
      continue;
    }
    if (name == "decode_buffer") {
      if (!(s.default_value == std::floor(s.default_value) && s.default_value >= 0 && s.default_value <= (1 << 20)))
        throw UsageError(where + ": parameter 'decode_buffer' has default " + std::to_string(s.default_value) +
                         ", not an integer in [0, 1048576] (earlier decode steps an evicting step is scored on)");
      protocol.decode_buffer = static_cast<int>(s.default_value);
      continue;
    }
    // prefill_evict likewise: a bool parameter of that name sets the protocol's default.
    if (name == "prefill_evict") {
      if (s.kind != KVSCOPE_PARAM_BOOL || (s.default_value != 0.0 && s.default_value != 1.0))
        throw UsageError(where + ": parameter 'prefill_evict' must be a bool (KVSCOPE_PARAM_BOOL) with default 0 or "
                         "1 (whether the prefill evicts)");
      protocol.prefill_evict = s.default_value != 0.0;
      continue;
    }
    // A framework parameter (its default only) is an int as well.
    const bool framework = is_framework_param(name);
    if (s.kind == KVSCOPE_PARAM_INT || framework)
      for (const auto& [label, v] : {std::pair{"default", s.default_value}, std::pair{"min", s.min_value},
                                     std::pair{"max", s.max_value}})
        if ((!framework || std::string(label) == "default") &&
            !(v == std::floor(v) && v >= std::numeric_limits<int>::min() && v <= std::numeric_limits<int>::max()))
          throw UsageError(where + ": int parameter '" + name + "' has " + label + " " + std::to_string(v) +
                           ", not a 32-bit integer");
    if (framework) {
      framework_defaults[name] = static_cast<int>(s.default_value);
      continue;
    }
    switch (s.kind) {
      case KVSCOPE_PARAM_INT:
        own.push_back(ParamSpec::integer(name, static_cast<int>(s.default_value), static_cast<int>(s.min_value),
                                         static_cast<int>(s.max_value), doc));
        break;
      case KVSCOPE_PARAM_FLOAT: own.push_back(ParamSpec::real(name, s.default_value, s.min_value, s.max_value, doc)); break;
      case KVSCOPE_PARAM_BOOL: own.push_back(ParamSpec::flag(name, s.default_value != 0.0, doc)); break;
      default: throw UsageError(where + ": parameter '" + name + "' has unknown kind " + std::to_string(s.kind));
    }
  }
  for (auto& s : scorer_framework_params(framework_defaults)) own.push_back(std::move(s));
  if (const std::string problem = protocol_problem(protocol); !problem.empty())
    throw UsageError(where + ": its protocol defaults: " + problem);
  const ObservationRequest request = request_for_needs(needs_names(needs), file);

  PolicyInfo info;
  info.name = "plugin:" + std::string(p->name && *p->name ? p->name : file.stem().string());
  info.summary = p->summary ? p->summary : "a compiled scorer (" + file.filename().string() + ")";
  info.reference = std::filesystem::absolute(file).string();
  info.params = scored_policy_params(own, protocol);
  for (const auto& s : info.params)
    if (const std::string problem = default_range_problem(s); !problem.empty())
      throw UsageError(where + ", parameter '" + s.name + "': " + problem);
  info.provenance = {{"policy_file", std::filesystem::absolute(file).string()},
                     {"policy_file_kind", "plugin"},
                     {"policy_file_sha256", file_sha256(file)}};
  info.resolve_params = [declared, framework_defaults, what = where](PolicyParams& params) {
    std::vector<std::string> own_names;
    for (const auto& n : declared)
      if (!is_framework_param(n) && n != "decode_interval" && n != "prefill_evict" && n != "decode_buffer")
        own_names.push_back(n);
    resolve_allocation_params(what, own_names, framework_defaults, params);
  };
  info.make = [library, request, declared, name = info.name](const PolicyParams& params) -> std::unique_ptr<Policy> {
    return std::make_unique<PluginPolicy>(name, params, request, library, declared);
  };
  return info;
}

}  // namespace kvscope::policy
