// Policies users write (issue 22): Python files and compiled plugins run through the same framework as the
// built-ins, so a numpy re-implementation of a built-in keeps exactly its tokens at every step, and every
// mistake a researcher makes in such a file is an error that names the file (and line).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <nlohmann/json.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/common/error.h"
#include "core/common/sha256.h"
#include "core/engine/engine.h"
#include "core/engine/run_observer.h"
#include "core/policy/budget_spec.h"
#include "core/policy/registry.h"
#include "tests/support/default_model.h"
#include "tests/support/temp_file.h"

using namespace kvscope;

namespace {

const std::filesystem::path kExamples = std::filesystem::path(KVSCOPE_SOURCE_DIR) / "examples";

// The positions each (layer, KV head) holds at the end of every step.
class KeptSets : public engine::RunObserver {
 public:
  std::vector<std::vector<std::vector<int32_t>>> steps;  // [step][layer * kv_heads + head][positions]
  void on_step_end(const engine::StepInfo&, const cache::KVCache& cache, int, float) override {
    auto& s = steps.emplace_back();
    for (int l = 0; l < cache.n_layers(); ++l)
      for (int h = 0; h < cache.n_kv_heads(); ++h) {
        const auto p = cache.positions(l, h);
        s.emplace_back(p.begin(), p.end());
      }
  }
};

struct Outcome {
  std::vector<int> tokens;
  KeptSets kept;
};

Outcome run(const model::Model& model, const std::vector<int>& prompt, const std::string& spec, const std::string& budget,
            int new_tokens = 8) {
  auto policy = policy::make_policy(spec);
  engine::Engine engine(model);
  engine::GenerateOptions options;
  options.max_new_tokens = new_tokens;
  options.stop_at_end_of_generation = false;
  options.budget = policy::BudgetSpec::parse(budget);
  Outcome out;
  engine::RunHooks hooks;
  hooks.policy = policy.policy.get();
  hooks.observers.push_back(&out.kept);
  out.tokens = engine.generate(prompt, options, hooks).generated_tokens;
  return out;
}

std::string example(const std::string& file) { return (kExamples / "policies" / file).string(); }

std::string plugin(const std::string& name) {
  return (std::filesystem::path(KVSCOPE_PLUGIN_DIR) / (name + ".so")).string();
}

void require_same_kept_sets(const Outcome& a, const Outcome& b) {
  CHECK(a.tokens == b.tokens);
  REQUIRE(a.kept.steps.size() == b.kept.steps.size());
  int differing = 0;
  for (std::size_t s = 0; s < a.kept.steps.size(); ++s)
    for (std::size_t i = 0; i < a.kept.steps[s].size(); ++i)
      if (a.kept.steps[s][i] != b.kept.steps[s][i]) ++differing;
  CHECK(differing == 0);
}

// A policy file written by the test; the error cases each get their own.
std::string write_policy(const std::string& name, const std::string& source) {
  const auto path = test::temp_file(name, ".py");
  std::ofstream(path) << source;
  return path.string();
}

std::string error_of(const model::Model& model, const std::vector<int>& prompt, const std::string& spec) {
  try {
    run(model, prompt, spec, "50%", 2);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("numpy H2O and SnapKV keep exactly the built-ins' tokens at every step", "[e2e][user_policy]") {
  const model::Model* model = test::default_model();
  for (const std::string prompt_file : {"lighthouse_story.txt", "heat_pump.txt", "bakery_notes.txt"}) {
    const auto prompt = test::sample_prompt_tokens(*model, prompt_file);
    for (const std::string budget : {"25%", "50%"}) {
      INFO(prompt_file << " at " << budget);
      SECTION("h2o " + prompt_file + " " + budget) {
        require_same_kept_sets(run(*model, prompt, "python:" + example("h2o_numpy.py"), budget),
                               run(*model, prompt, "h2o", budget));
      }
      SECTION("snapkv " + prompt_file + " " + budget) {
        require_same_kept_sets(run(*model, prompt, "python:" + example("snapkv_numpy.py"), budget),
                               run(*model, prompt, "snapkv", budget));
      }
      SECTION("h2o plugin " + prompt_file + " " + budget) {
        require_same_kept_sets(run(*model, prompt, "plugin:" + plugin("h2o_plugin"), budget),
                               run(*model, prompt, "h2o", budget));
      }
    }
  }
}

TEST_CASE("parameters and protocol switches reach a Python scorer", "[e2e][user_policy]") {
  const model::Model* model = test::default_model();
  const auto prompt = test::sample_prompt_tokens(*model, "heat_pump.txt");
  // Another recent share, another window and kernel, another allocation: still the built-ins' tokens.
  require_same_kept_sets(run(*model, prompt, "python:" + example("h2o_numpy.py") + ",recent_ratio=0.25", "30%"),
                         run(*model, prompt, "h2o:recent_ratio=0.25", "30%"));
  require_same_kept_sets(run(*model, prompt, "python:" + example("snapkv_numpy.py") + ",window=16,kernel=5,allocation=pyramid", "30%"),
                         run(*model, prompt, "snapkv:window=16,kernel=5,allocation=pyramid", "30%"));
  // The plugin and the Python file of one scorer agree too (key norm, compressing the prompt once).
  require_same_kept_sets(run(*model, prompt, "plugin:" + plugin("key_norm_plugin"), "40%"),
                         run(*model, prompt, "python:" + example("key_norm.py"), "40%"));
}

// kvpress DecodingPress's compression_interval: a file states decode_interval in `protocol`, a plugin by declaring
// the parameter, and either is then called at decode steps N - 1, 2N - 1, ... only (0-based); given in the spec,
// it makes the numpy H2O keep what the built-in keeps at the same interval.
TEST_CASE("a Python file and a plugin state decode_interval and are called every N-th decode step",
          "[e2e][user_policy]") {
  const model::Model* model = test::default_model();
  const auto prompt = test::sample_prompt_tokens(*model, "heat_pump.txt");
  const int interval = 3, new_tokens = 7;
  const auto log = test::temp_file("interval_calls", ".log");
  const auto key_norm = write_policy("interval_key_norm", R"PY(
import numpy as np
protocol = {"decode_evict": True, "decode_interval": 3}
def score(obs):
    if obs.layer == 0:
        with open(")PY" + log.string() + R"PY(", "a") as f:
            f.write(f"{obs.phase} {obs.step} {obs.params['decode_interval']}\n")
    return -np.sqrt((obs.keys.astype(np.float64) ** 2).sum(axis=-1))
)PY");
  const Outcome file = run(*model, prompt, "python:" + key_norm, "40%", new_tokens);
  const int decode_steps = static_cast<int>(file.kept.steps.size()) - 1;  // after the one-pass prefill
  REQUIRE(decode_steps >= 2 * interval);
  std::vector<std::string> want = {"prefill 0 3"};
  for (int step = interval - 1; step < decode_steps; step += interval)
    want.push_back("decode " + std::to_string(step) + " 3");
  std::vector<std::string> calls;
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);) calls.push_back(line);
  CHECK(calls == want);
  // Between evictions a (layer, KV head) grows by one entry a step, and an evicting step brings it back.
  auto lengths = [&](const Outcome& o) {
    std::vector<std::size_t> out;
    for (const auto& step : o.kept.steps) out.push_back(step.front().size());
    return out;
  };
  const std::size_t budget = file.kept.steps.front().front().size();
  std::vector<std::size_t> want_lengths = {budget};
  for (int step = 0; step < decode_steps; ++step) want_lengths.push_back(budget + (step + 1) % interval);
  CHECK(lengths(file) == want_lengths);
  // The plugin fails the run when it is called at a step the interval skips (its float32 scores may break a
  // near-tie otherwise than the file's float64 ones, so the lengths are compared, not the entries).
  const std::string interval_plugin = "plugin:" + plugin("interval_key_norm_plugin");
  CHECK(lengths(run(*model, prompt, interval_plugin, "40%", new_tokens)) == want_lengths);
  // The spec sets it too; the numpy H2O keeps the built-in's entries at the same interval.
  const std::string numpy_h2o = "python:" + example("h2o_numpy.py") + ",decode_interval=3";
  require_same_kept_sets(run(*model, prompt, numpy_h2o, "40%", new_tokens),
                         run(*model, prompt, "h2o:decode_evict=true,decode_interval=3", "40%", new_tokens));
  auto load_error = [](const std::string& spec) -> std::string {
    try {
      policy::make_policy(spec);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "(no error)";
  };
  const std::string body = "def score(obs):\n    return -obs.positions\n";
  const auto no_evict = write_policy("interval_no_evict", "protocol = {'decode_interval': 4}\n" + body);
  CHECK_THAT(load_error("python:" + no_evict),
             Catch::Contains(no_evict) && Catch::Contains("protocol: decode_interval=4 needs decode_evict=true"));
  const auto zero = write_policy("interval_zero", "protocol = {'decode_evict': True, 'decode_interval': 0}\n" + body);
  CHECK_THAT(load_error("python:" + zero), Catch::Contains(zero) && Catch::Contains("at least 1"));
  // DecodingPress's hidden_states_buffer_size as the protocol's decode_buffer
  const auto negative_buffer =
      write_policy("buffer_negative", "protocol = {'decode_evict': True, 'decode_interval': 4, 'decode_buffer': -1}\n" + body);
  CHECK_THAT(load_error("python:" + negative_buffer),
             Catch::Contains(negative_buffer) && Catch::Contains("['decode_buffer'] = -1") && Catch::Contains("at least 0"));
  const auto buffer_no_evict = write_policy("buffer_no_evict", "protocol = {'decode_buffer': 8}\n" + body);
  CHECK_THAT(load_error("python:" + buffer_no_evict),
             Catch::Contains(buffer_no_evict) && Catch::Contains("protocol: decode_buffer=8 needs decode_evict=true"));
  const auto buffer = write_policy("buffer_8", "protocol = {'decode_evict': True, 'decode_interval': 4, 'decode_buffer': 8}\n" + body);
  CHECK(policy::make_policy("python:" + buffer).params.get_int("decode_buffer") == 8);
}

// kvpress DecodingPress buffers the hidden states of the decode steps since its last compression and scores them
// all: at an evicting step of decode_interval=3 a file sees the rows of that step and the two before, bitwise the
// rows an every-step file sees one at a time (a budget above the whole run: neither evicts, so both runs compute the
// same numbers), and prefill_evict=false keeps the prompt whole until the first evicting decode step.
TEST_CASE("decode_interval hands a file the buffered rows of the steps since its last eviction; prefill_evict=false "
          "keeps the prompt", "[e2e][user_policy]") {
  const model::Model* model = test::default_model();
  const auto prompt = test::sample_prompt_tokens(*model, "heat_pump.txt");
  const auto dir = test::temp_file("decode_rows", "");
  std::filesystem::create_directories(dir);
  const std::string fields = R"PY(["query_positions", "hidden_states", "queries", "queries_pre_rope", "keys_pre_rope", "log_sum_exp"])PY";
  // `every` records each decode step's rows at layer 3; `interval`, run after it, compares its buffered rows there with
  // the concatenation of the recorded ones, raising on any difference, and leaves a mark for each step it checked.
  auto file = [&](const std::string& tag, const std::string& protocol) {
    return write_policy("decode_rows_" + tag, R"PY(
import os
import numpy as np
needs = ["hidden_states", "queries", "queries_pre_rope", "keys_pre_rope", "log_sum_exp"]
protocol = )PY" + protocol + R"PY(
DIR, TAG, FIELDS = ")PY" + dir.string() + R"PY(", ")PY" + tag + R"PY(", )PY" + fields + R"PY(
def score(obs):
    if obs.layer == 3 and TAG == "every" and obs.phase == "decode":
        np.savez("%s/every_%d.npz" % (DIR, obs.step), **{f: getattr(obs, f) for f in FIELDS})
    if obs.layer == 3 and TAG != "every":
        assert obs.phase == "decode", "prefill_evict=false: called after the prefill"
        n = len(obs.query_positions)
        if TAG == "interval":
            rows = [np.load("%s/every_%d.npz" % (DIR, s)) for s in range(obs.step - n + 1, obs.step + 1)]
            for f in FIELDS:
                want = np.concatenate([r[f] for r in rows], axis=1 if f == "log_sum_exp" else 0)
                got = getattr(obs, f)
                assert got.shape == want.shape and np.array_equal(got, want), (obs.step, f, got.shape, want.shape)
        open("%s/%s_%d_%d" % (DIR, TAG, obs.step, n), "w").close()
    return -obs.positions.astype(np.float64)
)PY");
  };
  const int new_tokens = 8;  // the first from the prefill, then 7 decode steps
  run(*model, prompt, "python:" + file("every", R"({"decode_evict": True})"), "1000", new_tokens);
  const std::string interval = R"({"decode_evict": True, "decode_interval": 3, "prefill_evict": False})";
  CHECK_NOTHROW(run(*model, prompt, "python:" + file("interval", interval), "1000", new_tokens));
  std::vector<std::string> marks;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() != ".npz") marks.push_back(e.path().filename().string());
  std::sort(marks.begin(), marks.end());
  // decode steps 2 and 5 evict, each on three steps' rows
  CHECK(marks == std::vector<std::string>{"interval_2_3", "interval_5_3"});
  // Below the prompt the prompt stays whole until decode step 2, which compresses to the budget.
  const Outcome kept = run(*model, prompt, "python:" + file("below", interval), "40%", new_tokens);
  CHECK(std::filesystem::exists(dir / "below_2_3"));
  const std::size_t n = prompt.size(), budget = policy::BudgetSpec::parse("40%").resolve(n, model->config.context_length);
  std::vector<std::size_t> lengths, want = {n, n + 1, n + 2, budget, budget + 1, budget + 2, budget, budget + 1};
  for (const auto& step : kept.kept.steps) lengths.push_back(step.front().size());
  CHECK(lengths == want);
  // A plugin states prefill_evict by declaring it; it fails unless each decode eviction sees the 3 buffered queries.
  lengths.clear();
  const std::string interval_plugin = "plugin:" + plugin("interval_key_norm_plugin") + ",prefill_evict=false";
  for (const auto& step : run(*model, prompt, interval_plugin, "40%", new_tokens).kept.steps)
    lengths.push_back(step.front().size());
  CHECK(lengths == want);
}

TEST_CASE("a Python file states block_scoring in its protocol as the spec would", "[e2e][user_policy]") {
  const model::Model* model = test::default_model();
  const auto prompt = test::sample_prompt_tokens(*model, "heat_pump.txt");
  std::ifstream in(example("keydiff.py"));
  const std::string keydiff((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string blocked = write_policy("keydiff_blocked", keydiff + "\nprotocol = {\"block_scoring\": 16}\n");
  const Outcome stated = run(*model, prompt, "python:" + blocked, "40%", 2);
  require_same_kept_sets(stated, run(*model, prompt, "python:" + example("keydiff.py") + ",block_scoring=16", "40%", 2));
  // KeyDiff's score depends on the other entries, so scoring in blocks keeps other entries than one pass.
  const Outcome one_pass = run(*model, prompt, "python:" + example("keydiff.py"), "40%", 2);
  CHECK(stated.kept.steps.front() != one_pass.kept.steps.front());
  CHECK_THAT(error_of(*model, prompt, "python:" + write_policy("keydiff_negative", keydiff + "\nprotocol = {\"block_scoring\": -2}\n")),
             Catch::Matchers::Contains("['block_scoring'] = -2"));
}

// Plugin ABI 2: a plugin declares block_scoring in its description and reads the layer's hidden states, the rows a
// Python file's obs.hidden_states holds (BlockPress's gathered subset rows, the buffered decode steps' rows); a plugin
// built for ABI 1 still loads and keeps what it kept.
TEST_CASE("a plugin declares block_scoring and reads hidden states as a Python file does; an ABI 1 plugin runs as "
          "before", "[e2e][user_policy]") {
  const model::Model* model = test::default_model();
  auto prompt = test::sample_prompt_tokens(*model, "heat_pump.txt");
  prompt.resize(std::min<std::size_t>(prompt.size(), 56));  // 34 entries past a 40% budget: three blocks of 16
  // tests/support/plugins/hidden_states_plugin.c's score: keys against the mean of each head's slice of the rows
  const std::string twin = "python:" + write_policy("hidden_states_twin", R"PY(
import numpy as np
needs = ["hidden_states"]
protocol = {"block_scoring": 16}
def score(obs):
    k = obs.keys.astype(np.float64)
    n_kv, _, d = k.shape
    h = obs.hidden_states.astype(np.float64)
    s = h.shape[1] // n_kv
    mean = np.stack([h[:, i * s:i * s + d].mean(axis=0) for i in range(n_kv)])
    return np.einsum("hnd,hd->hn", k, mean).astype(np.float32)
)PY");
  const std::string hidden = "plugin:" + plugin("hidden_states_plugin");
  const Outcome blocked = run(*model, prompt, hidden, "40%", 2);
  require_same_kept_sets(blocked, run(*model, prompt, twin, "40%", 2));
  // One pass (block_scoring=0), then a decode eviction every second step, which sees both buffered steps' rows.
  const std::string interval = ",block_scoring=0,decode_evict=true,decode_interval=2";
  const Outcome decoded = run(*model, prompt, hidden + interval, "40%", 3);
  require_same_kept_sets(decoded, run(*model, prompt, twin + interval, "40%", 3));
  // The mean is over the subset's rows: one pass keeps other entries, so the declared block_scoring took effect.
  CHECK(blocked.kept.steps.front() != decoded.kept.steps.front());
  // Built against the version-1 header, with values past its description that version 2 would read as its
  // block_scoring (-7, refused): it loads, and keeps what the version-2 example keeps at every step.
  require_same_kept_sets(run(*model, prompt, "plugin:" + plugin("abi_v1_key_norm_plugin"), "40%", 2),
                         run(*model, prompt, "plugin:" + plugin("key_norm_plugin"), "40%", 2));
}

TEST_CASE("a Python scorer's own allocation and merges are applied", "[e2e][user_policy]") {
  const model::Model* model = test::default_model();
  const auto prompt = test::sample_prompt_tokens(*model, "lighthouse_story.txt");
  const auto path = write_policy("allocating", R"PY(
import numpy as np
def score(obs):
    return -obs.positions.astype(np.float32)  # the oldest entries first
def allocate(info):
    # twice the budget in the first half of the layers, none extra in the rest (the total is the uniform one)
    half = info.n_layers // 2
    return [2 * info.budget - 1] * half + [1] * (info.n_layers - half)
)PY");
  const int n = static_cast<int>(prompt.size());
  const Outcome out = run(*model, prompt, "python:" + path, "20", 1);
  const auto& last = out.kept.steps.back();
  const int heads = model->config.n_kv_heads, layers = model->config.n_layers;
  for (int l = 0; l < layers; ++l) {
    const std::size_t want = l < layers / 2 ? 39 : 1;
    CHECK(last[l * heads].size() == want);
    // Highest score = lowest position: the first `want` tokens.
    CHECK(last[l * heads].front() == 0);
    CHECK(last[l * heads].back() == static_cast<int32_t>(want) - 1);
  }
  REQUIRE(n > 39);

  // Merges: the example folds every evicted entry into a kept one; the kept set is still top-budget.
  const Outcome merged = run(*model, prompt, "python:" + example("merge_nearest.py"), "50%", 4);
  const int budget = policy::BudgetSpec::parse("50%").resolve(n, model->config.context_length);
  for (const auto& head : merged.kept.steps.back()) CHECK(static_cast<int>(head.size()) == budget + 3);
}

TEST_CASE("a Python scorer's queries, keys and log-sum-exp give back the engine's attention rows", "[e2e][user_policy]") {
  const model::Model* model = test::default_model();
  const auto prompt = test::sample_prompt_tokens(*model, "heat_pump.txt");
  // Inside score(): the last query's probabilities recomputed from obs.queries (after RoPE), obs.keys (the
  // cache's, after RoPE) and obs.log_sum_exp must equal obs.last_row, in the prompt's last step and in every
  // decode step (decode_evict), for every query head; positions must be the cache's. Any mismatch raises.
  const auto path = write_policy("queries", R"PY(
import numpy as np
needs = ["queries", "last_row", "log_sum_exp"]
protocol = {"decode_evict": True}
def score(obs):
    group = obs.n_heads // obs.n_kv_heads
    q = obs.queries[-1].astype(np.float64)                  # (n_heads, head_dim), the step's last query
    k = obs.keys.astype(np.float64)                         # (n_kv_heads, n, head_dim)
    for h in range(obs.n_heads):
        logits = k[h // group] @ q[h] / np.sqrt(obs.head_dim)
        p = np.exp(logits - obs.log_sum_exp[h, -1])
        err = np.abs(p - obs.last_row[h]).max()
        if err > 2e-5:
            raise AssertionError("layer %d head %d: recomputed row differs by %g" % (obs.layer, h, err))
    if obs.query_positions[-1] != obs.positions.max():
        raise AssertionError("the last query is not the newest cache entry")
    return obs.last_row.reshape(obs.n_kv_heads, group, -1).sum(axis=1)
)PY");
  const Outcome out = run(*model, prompt, "python:" + path, "50%", 4);
  CHECK(out.tokens.size() == 4);
}

TEST_CASE("mistakes in a policy file are errors naming the file and line", "[e2e][user_policy]") {
  const model::Model* model = test::default_model();
  const auto prompt = test::sample_prompt_tokens(*model, "heat_pump.txt");
  auto load_error = [&](const std::string& spec) -> std::string {
    try {
      policy::make_policy(spec);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "(no error)";
  };

  const auto syntax = write_policy("syntax", "def score(obs)\n    return obs.keys\n");
  CHECK_THAT(load_error("python:" + syntax), Catch::Contains(syntax) && Catch::Contains("line 1") &&
                                                  Catch::Contains("SyntaxError"));

  const auto missing = write_policy("missing", "needs = ['column_sums']\n");
  CHECK_THAT(load_error("python:" + missing), Catch::Contains(missing) && Catch::Contains("no score(obs)"));

  const auto top_level = write_policy("top_level", "import numpy\n\nraise RuntimeError('no config')\ndef score(o): pass\n");
  CHECK_THAT(load_error("python:" + top_level),
             Catch::Contains("line 3") && Catch::Contains("RuntimeError: no config"));

  const auto ok = write_policy("ok", "def score(obs):\n    return -obs.positions\n");
  CHECK_THAT(load_error("python:" + ok + ",no_such=3"), Catch::Contains("no_such"));
  CHECK_THAT(load_error("python:" + ok + ",window=-1"), Catch::Contains("window"));
  CHECK_THAT(load_error("python:/nonexistent/p.py"), Catch::Contains("/nonexistent/p.py") && Catch::Contains("does not exist"));

  const auto bad_need = write_policy("bad_need", "needs = ['attention']\ndef score(obs):\n    return obs.positions\n");
  CHECK_THAT(load_error("python:" + bad_need), Catch::Contains("attention") && Catch::Contains("column_sums"));

  const auto raises = write_policy("raises", "def score(obs):\n    x = 1\n    return obs.keys / 0 + undefined_name\n");
  CHECK_THAT(error_of(*model, prompt, "python:" + raises),
             Catch::Contains(raises) && Catch::Contains("line 3") && Catch::Contains("(in score)") &&
                 Catch::Contains("NameError"));

  const auto shape = write_policy("shape", "def score(obs):\n    return obs.positions[0]\n");
  CHECK_THAT(error_of(*model, prompt, "python:" + shape),
             Catch::Contains(shape) && Catch::Contains("shape (") && Catch::Contains("expected (n_kv_heads, n_entries) = (3, "));

  const auto nan = write_policy("nan", "import numpy as np\ndef score(obs):\n    s = np.zeros(obs.positions.shape)\n    s[:, 5] = np.nan\n    return s\n");
  CHECK_THAT(error_of(*model, prompt, "python:" + nan),
             Catch::Contains(nan) && Catch::Contains("not finite, the first at entry 5: nan"));

  const auto inf = write_policy("inf", "import numpy as np\ndef score(obs):\n    return np.full(obs.positions.shape, np.inf)\n");
  CHECK_THAT(error_of(*model, prompt, "python:" + inf), Catch::Contains("inf"));

  const auto not_array = write_policy("not_array", "def score(obs):\n    return 'high'\n");
  CHECK_THAT(error_of(*model, prompt, "python:" + not_array), Catch::Contains("not an array of numbers"));

  const auto unasked = write_policy("unasked", "def score(obs):\n    return obs.column_sums[:3]\n");
  CHECK_THAT(error_of(*model, prompt, "python:" + unasked), Catch::Contains("add 'column_sums'"));

  // Plugins: a library without the entry point, another ABI version, a scorer that reports a failure.
  CHECK_THAT(load_error("plugin:" + plugin("not_a_policy_plugin")),
             Catch::Contains("not_a_policy_plugin.so") && Catch::Contains("no entry point kvscope_get_policy_plugin"));
  CHECK_THAT(load_error("plugin:" + plugin("abi_v999_plugin")),
             Catch::Contains("ABI version 999") && Catch::Contains("speaks versions 1 to 2"));
  CHECK_THAT(error_of(*model, prompt, "plugin:" + plugin("failing_plugin")),
             Catch::Contains("failing_plugin.so") && Catch::Contains("layer 0 KV head 0 failed: scorer refuses"));
}

TEST_CASE("a user policy's provenance names the exact bytes that ran", "[e2e][user_policy]") {
  const auto path = example("key_norm.py");
  const auto info = policy::describe_policy("python:" + path);
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  CHECK(info.provenance.at("policy_file_sha256") == sha256_hex(bytes));
  CHECK(info.provenance.at("policy_file_kind") == "python");
  CHECK(info.name == "python:key_norm");
  const auto p = policy::describe_policy("plugin:" + plugin("h2o_plugin"));
  CHECK(p.provenance.at("policy_file_sha256") == file_sha256(plugin("h2o_plugin")));
  CHECK(p.name == "plugin:h2o");
}

// kvpress's KnormPress on the same model and prompt ids (tests/fixtures/kvpress_knorm, made by
// tools/make_kvpress_knorm_golden.py) against examples/policies/key_norm.py: the same kept set in every
// (layer, KV head), except for swaps among keys whose norms lie within float32 noise of the boundary (the
// fixture lists those bands; kvpress breaks exact ties in torch.topk's order, kvscope by position).
TEST_CASE("the key-norm example keeps what kvpress's KnormPress keeps", "[e2e][user_policy][kvpress]") {
  const model::Model* model = test::default_model();
  std::ifstream in(std::filesystem::path(KVSCOPE_FIXTURES_DIR) / "kvpress_knorm" / "knorm_golden.json");
  REQUIRE(in.good());
  const nlohmann::json golden = nlohmann::json::parse(in);
  int exact = 0, within_band = 0;
  for (const auto& c : golden.at("cases")) {
    INFO(c.at("prompt_file").get<std::string>() << " at compression " << c.at("compression_ratio").get<double>());
    const std::vector<int> ids = model->tokenizer->encode(c.at("text").get<std::string>(), false);
    REQUIRE(ids == c.at("ids").get<std::vector<int>>());
    const int n_kept = c.at("n_kept").get<int>();
    // The budget as kvpress states it: the compression ratio, whose count must be kvpress's n_kept.
    const std::string budget = policy::BudgetSpec::compression_ratio_text(c.at("compression_ratio").dump());
    const Outcome out = run(*model, ids, "python:" + example("key_norm.py"), budget, 1);
    const auto& kept = out.kept.steps.front();  // after the prompt: KnormPress compresses it once
    std::map<std::pair<int, int>, std::vector<int>> bands;
    for (const auto& b : c.at("near_boundary")) {
      auto& band = bands[{b.at(0).get<int>(), b.at(1).get<int>()}];
      for (const auto& entry : b.at(2)) band.push_back(entry.at(0).get<int>());
    }
    const int heads = model->config.n_kv_heads;
    for (int l = 0; l < model->config.n_layers; ++l)
      for (int h = 0; h < heads; ++h) {
        INFO("layer " << l << " KV head " << h);
        const std::vector<int32_t>& ours = kept[l * heads + h];
        const auto want = c.at("kept").at(l).at(h).get<std::vector<int32_t>>();
        REQUIRE(static_cast<int>(ours.size()) == n_kept);
        if (ours == want) {
          ++exact;
          continue;
        }
        std::vector<int32_t> differ;
        std::set_symmetric_difference(ours.begin(), ours.end(), want.begin(), want.end(), std::back_inserter(differ));
        const auto band = bands.find({l, h});
        REQUIRE(band != bands.end());
        for (int32_t p : differ)
          CHECK(std::find(band->second.begin(), band->second.end(), p) != band->second.end());
        ++within_band;
      }
  }
  // Nearly every head matches to the position; the rest differ only inside their tie bands.
  CHECK(exact >= 6 * 90 - 12);
  WARN("KnormPress: " << exact << " heads equal, " << within_band << " differ only among boundary ties");
}
