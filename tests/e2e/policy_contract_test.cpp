// The user policy contract (issue 36): what a Python policy file sees in `obs` and how its parameters live
// beside kvscope's, checked against independent facts (the spec given, the model's own numbers).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/common/error.h"
#include "core/engine/engine.h"
#include "core/engine/run_observer.h"
#include "core/model/model.h"
#include "core/policy/budget_spec.h"
#include "core/policy/registry.h"
#include "tests/support/default_model.h"
#include "tests/support/temp_file.h"

using namespace kvscope;

namespace {

std::string write_policy(const std::string& name, const std::string& source) {
  const auto path = test::temp_file(name, ".py");
  std::ofstream(path) << source;
  return path.string();
}

std::string plugin(const std::string& name) {
  return (std::filesystem::path(KVSCOPE_PLUGIN_DIR) / (name + ".so")).string();
}

// The positions each (layer, KV head) holds after a run of `spec` that generates one token (the prefill).
class FinalKept : public engine::RunObserver {
 public:
  std::vector<std::vector<int32_t>> heads;
  void on_step_end(const engine::StepInfo&, const cache::KVCache& cache, int, float) override {
    heads.clear();
    for (int l = 0; l < cache.n_layers(); ++l)
      for (int h = 0; h < cache.n_kv_heads(); ++h) {
        const auto p = cache.positions(l, h);
        heads.emplace_back(p.begin(), p.end());
      }
  }
};

std::vector<std::vector<int32_t>> kept_after(const std::string& spec, const std::string& budget = "40%") {
  const model::Model* model = test::default_model();
  const auto prompt = test::sample_prompt_tokens(*model, "heat_pump.txt");
  auto policy = policy::make_policy(spec);
  engine::Engine engine(*model);
  engine::GenerateOptions options;
  options.max_new_tokens = 1;
  options.stop_at_end_of_generation = false;
  options.budget = policy::BudgetSpec::parse(budget);
  engine::RunHooks hooks;
  hooks.policy = policy.policy.get();
  FinalKept kept;
  hooks.observers.push_back(&kept);
  engine.generate(prompt, options, hooks);
  return kept.heads;
}

// Runs `spec` on `model` over `prompt` (at most `new_tokens` decode steps); the error text, or "" when it ran.
std::string run_error_on(const model::Model& model, const std::vector<int>& prompt, const std::string& spec,
                         const std::string& budget = "50%", int new_tokens = 1) {
  try {
    auto policy = policy::make_policy(spec);
    engine::Engine engine(model);
    engine::GenerateOptions options;
    options.max_new_tokens = new_tokens;
    options.stop_at_end_of_generation = false;
    options.budget = policy::BudgetSpec::parse(budget);
    engine::RunHooks hooks;
    hooks.policy = policy.policy.get();
    engine.generate(prompt, options, hooks);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// The same on a short prompt of the default model.
std::string run_error(const std::string& spec, const std::string& budget = "50%", int new_tokens = 1) {
  const model::Model* model = test::default_model();
  return run_error_on(*model, test::sample_prompt_tokens(*model, "heat_pump.txt"), spec, budget, new_tokens);
}

// "(p, q), " for each later occurrence q of a token first seen at p, at least `gap` positions apart.
std::string repeated_token_pairs(const std::vector<int>& prompt, int gap) {
  std::map<int, int> first_seen;
  std::string pairs;
  for (int p = 0; p < static_cast<int>(prompt.size()); ++p) {
    const auto [it, fresh] = first_seen.emplace(prompt[p], p);
    if (!fresh && p - it->second > gap) pairs += "(" + std::to_string(it->second) + ", " + std::to_string(p) + "), ";
  }
  return pairs;
}

// A policy whose score() checks obs.rope on layer 0: a token's key rotated back from its position and on to
// another position where the same token sits gives that key (the pre-RoPE key of layer 0 depends on the
// token alone), and inverse rotation round-trips. Failures raise.
std::string rope_checking_policy(const std::string& pairs, const std::string& expected_attributes) {
  return R"PY(
import numpy as np
PAIRS = [)PY" +
         pairs + R"PY(]
EXPECTED = )PY" +
         expected_attributes + R"PY(
def score(obs):
    r = obs.rope
    for name, want in EXPECTED.items():
        got = getattr(r, name)
        if got != want:
            raise AssertionError("rope.%s = %r, expected %r" % (name, got, want))
    if r.inv_freq.shape != (r.rope_dim // 2,) or r.divisors.shape != (r.rope_dim // 2,):
        raise AssertionError("inv_freq / divisors shapes")
    if obs.layer == 0:
        keys, pos = obs.keys, obs.positions
        back = r.rotate(keys, pos, inverse=True)                 # (n_kv_heads, n, head_dim), positions broadcast
        again = r.rotate(back, pos)
        scale = np.abs(keys).max()
        if np.abs(again - keys).max() > 1e-5 * scale:
            raise AssertionError("rotate(rotate(k, p, inverse=True), p) differs by %g" % np.abs(again - keys).max())
        where = {int(p): j for j, p in enumerate(pos[0])}
        worst = 0.0
        for p, q in PAIRS:
            moved = r.rotate(back[:, where[p]], q)                # token of position p rotated to position q
            worst = max(worst, np.abs(moved - keys[:, where[q]]).max() / scale)
        if worst > 1e-4:
            raise AssertionError("same token moved from p to q differs from the key at q by %g" % worst)
        # Against numpy's own rotation (float64, from inv_freq, in the pairing named), at positions that repeat and
        # jump within one call, both ways; rotate keeps each position's angles between calls, so again after a
        # call that fills its table past its bound.
        rng = np.random.default_rng(0)
        x = rng.standard_normal((6, 3, r.head_dim)).astype(np.float32)
        at = rng.integers(0, 40, (6, 3))
        at[1] = at[0]
        half = r.rope_dim // 2
        first = np.arange(half) * 2 if r.pairing == "adjacent" else np.arange(half)
        second = first + 1 if r.pairing == "adjacent" else first + half
        def numpy_rotate(v, p):
            c, s = np.cos(p[..., None] * r.inv_freq), np.sin(p[..., None] * r.inv_freq)
            out = v.astype(np.float64)
            out[..., first] = v[..., first] * c - v[..., second] * s
            out[..., second] = v[..., first] * s + v[..., second] * c
            return out
        for inverse in (False, True):
            err = np.abs(r.rotate(x, at, inverse=inverse) - numpy_rotate(x, -at if inverse else at)).max()
            if err > 1e-5 * np.abs(x).max():
                raise AssertionError("rotate(inverse=%s) differs from numpy's rotation by %g" % (inverse, err))
        before = r.rotate(x, at)
        r.rotate(np.ones((70000, r.head_dim), np.float32), np.arange(70000))
        if not np.array_equal(r.rotate(x, at), before):
            raise AssertionError("rotate gives other values after 70000 positions")
        try:
            r.rotate(np.zeros((2, r.head_dim + 1)), 0)
        except ValueError as e:
            if "head_dim" not in str(e):
                raise
        else:
            raise AssertionError("a wrong head_dim was accepted")
    return -obs.positions.astype(np.float64)
)PY";
}

std::string make_error(const std::string& spec) {
  try {
    policy::make_policy(spec);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

std::set<std::string> recorded_names(const std::string& spec) {
  std::set<std::string> names;
  for (const auto& [k, v] : policy::make_policy(spec).params.as_text()) names.insert(k);
  return names;
}

std::set<std::string> with(std::set<std::string> a, const std::set<std::string>& b) {
  a.insert(b.begin(), b.end());
  return a;
}

const std::set<std::string> kFramework = {"window",          "recent",        "sinks",         "block",
                                          "decode_evict",    "trim",          "decode_interval", "prefill_evict",
                                          "block_scoring",   "decode_buffer", "allocation",    "selection"};

}  // namespace

TEST_CASE("obs.params holds the file's and the framework's parameters, and only the chosen allocation's",
          "[e2e][policy_contract]") {
  // score() fails the run unless obs.params has exactly the names the test expects, given in `expected`.
  const auto path = write_policy("params_view", R"PY(
import numpy as np
params = {"alpha": 0.5, "expected": {"default": "", "choices": ["", "uniform", "pyramid", "dynamickv", "adakv"]}}
FRAMEWORK = {"window", "recent", "sinks", "block", "decode_evict", "trim", "decode_interval", "prefill_evict",
             "block_scoring", "decode_buffer", "allocation", "selection"}
BY_ALLOCATION = {"": set(), "uniform": set(), "pyramid": {"beta", "pyramid_arithmetic"},
                 "dynamickv": {"kernel", "pooling", "group_reduce", "r_max", "arithmetic"},
                 "adakv": {"alpha_safeguard"}}
def score(obs):
    want = {"alpha", "expected"} | FRAMEWORK | BY_ALLOCATION[obs.params["expected"]]
    got = set(obs.params)
    if got != want:
        raise AssertionError("obs.params: extra %s, missing %s" % (sorted(got - want), sorted(want - got)))
    return -obs.positions.astype(np.float64)
)PY");
  CHECK(run_error("python:" + path + ",expected=uniform") == "");
  CHECK(run_error("python:" + path + ",expected=pyramid,allocation=pyramid,beta=10") == "");
  CHECK(run_error("python:" + path + ",expected=dynamickv,allocation=dynamickv") == "");
  CHECK(run_error("python:" + path + ",expected=adakv,selection=adakv") == "");
  // The check inside the file can fail: without the allocation its parameters are not there.
  CHECK_THAT(run_error("python:" + path + ",expected=pyramid"),
             Catch::Contains("missing ['beta', 'pyramid_arithmetic']"));

  // What a trace records (policy_params) is the same set.
  const std::set<std::string> file_params = {"alpha", "expected"};
  CHECK(recorded_names("python:" + path) == with(kFramework, file_params));
  CHECK(recorded_names("python:" + path + ",allocation=pyramid") ==
        with(with(kFramework, file_params), {"beta", "pyramid_arithmetic"}));
  CHECK(recorded_names("python:" + path + ",selection=chunkkv") ==
        with(with(kFramework, file_params), {"chunk_length"}));
  // Built-ins likewise: SnapKV's own parameters, no allocation's until it is chosen.
  const auto snapkv = recorded_names("snapkv");
  CHECK(snapkv.count("beta") == 0);
  CHECK(snapkv.count("cake_tau1") == 0);
  CHECK(snapkv.count("variance_norm") == 0);
  CHECK(snapkv.count("window") == 1);
  CHECK(recorded_names("snapkv:allocation=cake").count("cake_tau1") == 1);
  CHECK(recorded_names("snapkv:allocation=cake").count("beta") == 0);
}

TEST_CASE("an allocation's parameter given without its allocation is refused", "[e2e][policy_contract]") {
  CHECK_THAT(make_error("snapkv:alpha_safeguard=0.5"),
             Catch::Contains("'alpha_safeguard'") && Catch::Contains("selection=adakv"));
  CHECK(make_error("snapkv:selection=adakv,alpha_safeguard=0.5") == "(no error)");
  CHECK_THAT(make_error("snapkv:beta=10"), Catch::Contains("'beta'") && Catch::Contains("allocation pyramid") &&
                                               Catch::Contains("allocation=uniform"));
  const auto path = write_policy("plain", "def score(obs):\n    return -obs.positions\n");
  CHECK_THAT(make_error("python:" + path + ",cake_tau1=2"), Catch::Contains("allocation cake"));
  CHECK(make_error("python:" + path + ",allocation=cake,cake_tau1=2") == "(no error)");
}

TEST_CASE("a file parameter named like the chosen allocation's is refused naming the file and both owners",
          "[e2e][policy_contract]") {
  // `pooling` is also dynamickv's (avg, max, none): before, the file's default `max` became dynamickv's pooling.
  const auto path = write_policy("pooling_owner", R"PY(
params = {"pooling": {"default": "max", "choices": ["avg", "max"]}}
def score(obs):
    return -obs.positions
)PY");
  CHECK(make_error("python:" + path) == "(no error)");
  CHECK(make_error("python:" + path + ",allocation=pyramid") == "(no error)");
  for (const std::string spec : {",allocation=dynamickv", ",allocation=dynamickv,pooling=avg"}) {
    INFO(spec);
    CHECK_THAT(make_error("python:" + path + spec), Catch::Contains("policy file '" + path + "'") &&
                                                        Catch::Contains("'pooling'") &&
                                                        Catch::Contains("allocation 'dynamickv'"));
  }
}

TEST_CASE("a framework parameter an allocation shares never takes the file's default unseen",
          "[e2e][policy_contract]") {
  // dynamickv's window (default 8) is the scorer's observation window too.
  const auto silent = write_policy("no_window", "def score(obs):\n    return -obs.positions\n");
  CHECK(policy::make_policy("python:" + silent + ",allocation=dynamickv").params.get_int("window") == 8);
  CHECK(policy::make_policy("python:" + silent).params.get_int("window") == 0);
  CHECK(policy::make_policy("plugin:" + plugin("key_norm_plugin") + ",allocation=dynamickv").params.get_int("window") ==
        8);

  const auto declares =
      write_policy("window_32", "params = {'window': 32}\ndef score(obs):\n    return -obs.positions\n");
  CHECK_THAT(make_error("python:" + declares + ",allocation=dynamickv"),
             Catch::Contains(declares) && Catch::Contains("'window'") && Catch::Contains("dynamickv") &&
                 Catch::Contains("the file's 32") && Catch::Contains("the allocation's 8"));
  CHECK(policy::make_policy("python:" + declares + ",allocation=dynamickv,window=16").params.get_int("window") == 16);
  CHECK(policy::make_policy("python:" + declares + ",allocation=pyramid").params.get_int("window") == 32);
}

TEST_CASE("a failed import in a policy file says where packages come from (VIRTUAL_ENV)", "[e2e][policy_contract]") {
  const auto path =
      write_policy("no_torch", "import kvscope_issue36_no_such_module\ndef score(obs):\n    return -obs.positions\n");
  CHECK_THAT(make_error("python:" + path), Catch::Contains(path) && Catch::Contains("line 1") &&
                                               Catch::Contains("ModuleNotFoundError") &&
                                               Catch::Contains("kvscope_issue36_no_such_module") &&
                                               Catch::Contains("VIRTUAL_ENV") && Catch::Contains("-m venv DIR"));
  // Any other exception stays as it was.
  const auto other = write_policy("value_error", "raise ValueError('bad config')\ndef score(obs):\n    return 0\n");
  CHECK_THAT(make_error("python:" + other),
             Catch::Contains("ValueError: bad config") && !Catch::Contains("VIRTUAL_ENV"));
}

TEST_CASE("integer parameters print and record as integers, floats as the value given", "[e2e][policy_contract]") {
  CHECK(policy::ParamSpec::integer("n", 1 << 20, 0, 1 << 20, "").range_text() == "integer in [0, 1048576]");
  CHECK(policy::ParamSpec::integer("n", 1 << 20, 0, 1 << 20, "").default_text() == "1048576");
  const auto path = write_policy("int_params", R"PY(
params = {"count": 1048576, "share": 0.1234567}
def score(obs):
    return -obs.positions
)PY");
  const auto info = policy::describe_policy("python:" + path);
  std::map<std::string, std::string> range;
  for (const auto& p : info.params) range[p.name] = p.range_text();
  CHECK(range.at("count") == "integer in [-1073741824, 1073741824]");
  CHECK(range.at("recent") == "integer in [0, 1048576]");
  const auto recorded = policy::make_policy("python:" + path + ",sinks=1000000").params.as_text();
  CHECK(recorded.at("count") == "1048576");
  CHECK(recorded.at("sinks") == "1000000");
  CHECK(recorded.at("share") == "0.1234567");
}

TEST_CASE("score() may return integer arrays, nested lists or anything numpy converts (torch tensors)",
          "[e2e][policy_contract]") {
  // One score, four return types; integers within float32's exact range keep the same entries.
  const auto path = write_policy("return_types", R"PY(
import numpy as np
params = {"kind": {"default": "float", "choices": ["float", "int64", "int32", "list", "array_like"]}}
class ArrayLike:  # what torch.Tensor (on the CPU, without grad) offers numpy
    def __init__(self, a):
        self.a = a
    def __array__(self, dtype=None, copy=None):
        return self.a if dtype is None else self.a.astype(dtype)
def score(obs):
    s = np.trunc(obs.keys[..., 0].astype(np.float64) * 1000)
    kind = obs.params["kind"]
    if kind == "int64": return s.astype(np.int64)
    if kind == "int32": return s.astype(np.int32)
    if kind == "list": return s.tolist()
    if kind == "array_like": return ArrayLike(s)
    return s
)PY");
  const auto reference = kept_after("python:" + path);
  for (const std::string kind : {"int64", "int32", "list", "array_like"}) {
    INFO(kind);
    CHECK(kept_after("python:" + path + ",kind=" + kind) == reference);
  }
}

TEST_CASE("obs.keys of a llama GGUF pair head dimensions (2i, 2i+1), as docs/policies.md says",
          "[e2e][policy_contract]") {
  // Layer 0's key of a token depends on the token alone before RoPE. So two occurrences of one token, rotated
  // back from their positions to 0 by the documented convention (adjacent pairs, theta_i = p base^(-2i/d)),
  // give the same vector; by transformers' rotate-half convention they do not.
  const model::Model* model = test::default_model();
  const auto prompt = test::sample_prompt_tokens(*model, "heat_pump.txt");
  std::map<int, int> first_seen;
  std::string pairs;
  for (int p = 0; p < static_cast<int>(prompt.size()); ++p) {
    const auto [it, fresh] = first_seen.emplace(prompt[p], p);
    if (!fresh && p - it->second > 8) pairs += "(" + std::to_string(it->second) + ", " + std::to_string(p) + "), ";
  }
  REQUIRE(!pairs.empty());
  const std::string source = R"PY(
import numpy as np
PAIRS = [)PY" + pairs + R"PY(]
BASE, ROPE_DIM = )PY" + std::to_string(model->config.rope_base) +
                             ", " + std::to_string(model->config.rope_dim) + R"PY(
def unrotate(k, position, adjacent):
    i = np.arange(ROPE_DIM // 2)
    angle = -position * BASE ** (-2.0 * i / ROPE_DIM)
    a, b = (2 * i, 2 * i + 1) if adjacent else (i, i + ROPE_DIM // 2)
    out = k.astype(np.float64).copy()
    out[..., a] = k[..., a] * np.cos(angle) - k[..., b] * np.sin(angle)
    out[..., b] = k[..., a] * np.sin(angle) + k[..., b] * np.cos(angle)
    return out
def score(obs):
    if obs.layer == 0:
        where = {int(p): j for j, p in enumerate(obs.positions[0])}
        for adjacent in (True, False):
            worst = 0.0
            for p, q in PAIRS:
                kp = unrotate(obs.keys[:, where[p]], p, adjacent)
                kq = unrotate(obs.keys[:, where[q]], q, adjacent)
                worst = max(worst, np.abs(kp - kq).max() / np.abs(kp).max())
            if adjacent and worst > 1e-3:
                raise AssertionError("adjacent pairs: same token differs by %g after un-rotating" % worst)
            if not adjacent and worst < 0.05:
                raise AssertionError("rotate-half also matches (%g): the test cannot tell the layouts apart" % worst)
    return -obs.positions.astype(np.float64)
)PY";
  REQUIRE(model->config.rope_style == model::RopeStyle::AdjacentPairs);
  CHECK(run_error("python:" + write_policy("key_layout", source)) == "");
}

TEST_CASE("a Python policy's scores rank in float64: 1e-12 apart is kept by value, not by position",
          "[e2e][policy_contract]") {
  // Every entry scores 1 except one late entry, 1 + 1e-12 (equal to 1 in float32). A budget of 10 keeps the
  // first 9 (ties to the earlier entry) and that one.
  const auto path = write_policy("close_scores", R"PY(
import numpy as np
def score(obs):
    s = np.ones(obs.positions.shape, dtype=np.float64)
    s[obs.positions == 30] += 1e-12
    return s
)PY");
  const auto kept = kept_after("python:" + path, "10");
  REQUIRE(!kept.empty());
  const std::vector<int32_t> want = {0, 1, 2, 3, 4, 5, 6, 7, 8, 30};
  for (const auto& head : kept) {
    CHECK(head == want);
  }
  // A float32 array of the same scores ties them: the first 10 stay.
  const auto tied = write_policy("close_scores_f32", R"PY(
import numpy as np
def score(obs):
    s = np.ones(obs.positions.shape, dtype=np.float64)
    s[obs.positions == 30] += 1e-12
    return s.astype(np.float32)
)PY");
  const auto kept_tied = kept_after("python:" + tied, "10");
  CHECK(kept_tied.front() == std::vector<int32_t>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST_CASE("obs.rope rotates keys to and from positions as the engine does (llama GGUF, adjacent pairs)",
          "[e2e][policy_contract]") {
  const model::Model* model = test::default_model();
  const auto prompt = test::sample_prompt_tokens(*model, "heat_pump.txt");
  const std::string pairs = repeated_token_pairs(prompt, 8);
  REQUIRE(!pairs.empty());
  char theta[64];
  std::snprintf(theta, sizeof theta, "%.17g", static_cast<double>(model->config.rope_base));
  const std::string expected = std::string("{\"theta\": ") + theta +
                               ", \"rope_dim\": " + std::to_string(model->config.rope_dim) +
                               ", \"head_dim\": " + std::to_string(model->config.head_dim) +
                               ", \"pairing\": \"adjacent\", \"scaling\": {\"type\": \"default\"}}";
  CHECK(run_error_on(*model, prompt, "python:" + write_policy("rope_gguf", rope_checking_policy(pairs, expected))) ==
        "");
}

TEST_CASE("obs.rope of a Hugging Face llama3 checkpoint: rotate-half pairs and llama3 scaling",
          "[e2e][policy_contract]") {
  const model::Model model = model::load_model(std::filesystem::path(KVSCOPE_FIXTURES_DIR) / "hf_synthetic" / "llama3");
  // Tokens repeat at distances up to 60, past original_max_position_embeddings (32).
  std::vector<int> prompt = {0};
  for (int i = 0; i < 70; ++i) prompt.push_back(5 + (i * 7) % 23);
  const std::string pairs = repeated_token_pairs(prompt, 8);
  REQUIRE(!pairs.empty());
  const std::string expected =
      "{\"theta\": 500.0, \"rope_dim\": 14, \"head_dim\": 14, \"pairing\": \"half\", \"scaling\": {\"type\": "
      "\"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
      "\"original_max_position_embeddings\": 32}}";
  CHECK(run_error_on(model, prompt, "python:" + write_policy("rope_hf", rope_checking_policy(pairs, expected))) == "");
  // The checks can fail: the same file expecting adjacent pairs on this model does.
  std::string wrong = expected;
  wrong.replace(wrong.find("half"), 4, "adjacent");
  CHECK_THAT(run_error_on(model, prompt, "python:" + write_policy("rope_hf_wrong", rope_checking_policy(pairs, wrong))),
             Catch::Contains("rope.pairing = 'half', expected 'adjacent'"));
}

TEST_CASE("keys_pre_rope, queries_pre_rope and hidden_states agree with the checkpoint's own weights",
          "[e2e][policy_contract]") {
  // On the Hugging Face llama3 fixture (float32 weights, rotate-half), inside score(), from the safetensors
  // file read by numpy: layer 0's hidden_states = RMSNorm(embedding of the tokens) * input_layernorm,
  // hidden_states @ k_proj.T = keys_pre_rope (q likewise), and rope.rotate of the pre-RoPE parts to the query
  // positions gives the cache's keys and obs.queries. Any mismatch raises.
  const auto dir = std::filesystem::path(KVSCOPE_FIXTURES_DIR) / "hf_synthetic" / "llama3";
  const model::Model model = model::load_model(dir);
  std::vector<int> prompt = {0};
  for (int i = 0; i < 40; ++i) prompt.push_back(5 + (i * 11) % 97);
  std::string ids;
  for (int t : prompt) ids += std::to_string(t) + ", ";
  const std::string source = R"PY(
import json, struct
import numpy as np
TOKENS = np.array([)PY" + ids +
                             R"PY(])
FILE = ")PY" + (dir / "model.safetensors").string() +
                             R"PY("
def tensors():
    with open(FILE, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", t["dtype"]
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=np.float32).reshape(t["shape"]).astype(np.float64)
    return out
W = tensors()
needs = ["keys_pre_rope", "queries_pre_rope", "hidden_states", "queries", "q_proj", "k_proj"]
def close(name, got, want, tol=2e-4):
    err = np.abs(np.asarray(got, np.float64) - want).max() / max(np.abs(want).max(), 1e-30)
    if err > tol:
        raise AssertionError("layer %s: %s differs by %g (relative)" % (LAYER[0], name, err))
LAYER = [0]
def score(obs):
    LAYER[0] = obs.layer
    n = len(obs.query_positions)
    pre = "model.layers.%d." % obs.layer
    h = obs.hidden_states
    if h.shape != (n, W["model.embed_tokens.weight"].shape[1]):
        raise AssertionError("hidden_states shape %s" % (h.shape,))
    if obs.layer == 0:
        x = W["model.embed_tokens.weight"][TOKENS[obs.query_positions]]
        x = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-5) * W[pre + "input_layernorm.weight"]
        close("hidden_states", h, x)
    for name, got in (("k_proj", obs.k_proj), ("q_proj", obs.q_proj)):
        if got.flags.writeable or got.dtype != np.float32:
            raise AssertionError("obs.%s must be read-only float32" % name)
        close("obs." + name, got, W[pre + "self_attn." + name + ".weight"], 0.0)
    k = h.astype(np.float64) @ W[pre + "self_attn.k_proj.weight"].T
    q = h.astype(np.float64) @ W[pre + "self_attn.q_proj.weight"].T
    close("keys_pre_rope", obs.keys_pre_rope, k.reshape(n, obs.n_kv_heads, obs.head_dim))
    close("queries_pre_rope", obs.queries_pre_rope, q.reshape(n, obs.n_heads, obs.head_dim))
    where = {int(p): j for j, p in enumerate(obs.positions[0])}
    stored = np.stack([obs.keys[:, where[int(p)]] for p in obs.query_positions])    # (n, n_kv_heads, head_dim)
    pos = obs.query_positions[:, None]
    close("rope.rotate(keys_pre_rope)", obs.rope.rotate(obs.keys_pre_rope, pos), stored, 1e-5)
    close("rope.rotate(queries_pre_rope)", obs.rope.rotate(obs.queries_pre_rope, pos), obs.queries, 1e-5)
    close("rope.rotate(keys, inverse)", obs.rope.rotate(stored, pos, inverse=True), obs.keys_pre_rope, 1e-5)
    return -obs.positions.astype(np.float64)
)PY";
  CHECK(run_error_on(model, prompt, "python:" + write_policy("pre_rope", source)) == "");
  // The same parts in a block-wise prefill, where each block sees its own queries.
  CHECK(run_error_on(model, prompt, "python:" + write_policy("pre_rope_blocks", source) + ",block=16") == "");
}

TEST_CASE("pre-attention parts are refused until asked for", "[e2e][policy_contract]") {
  const auto path = write_policy("unasked_pre_rope", "def score(obs):\n    return obs.keys_pre_rope\n");
  CHECK_THAT(run_error("python:" + path), Catch::Contains("add 'keys_pre_rope'"));
  const auto hidden = write_policy("unasked_hidden", "def score(obs):\n    return obs.hidden_states\n");
  CHECK_THAT(run_error("python:" + hidden), Catch::Contains("add 'hidden_states'"));
}

TEST_CASE("obs.k_proj of a quantized GGUF projects hidden_states onto keys_pre_rope, in obs.keys' layout",
          "[e2e][policy_contract]") {
  // Q4_1 weights dequantized by kvscope; the engine's quantized matmul agrees to about 1%.
  const auto path = write_policy("gguf_proj", R"PY(
import numpy as np
needs = ["keys_pre_rope", "queries_pre_rope", "hidden_states", "q_proj", "k_proj"]
def score(obs):
    n = len(obs.query_positions)
    h = obs.hidden_states.astype(np.float64)
    for name, w, got in (("k", obs.k_proj, obs.keys_pre_rope), ("q", obs.q_proj, obs.queries_pre_rope)):
        want = (h @ w.astype(np.float64).T).reshape(got.shape)
        err = np.abs(got - want).max() / np.abs(want).max()
        if err > 0.03:
            raise AssertionError("layer %d: hidden_states @ %s_proj.T differs from %s_pre_rope by %g" % (obs.layer, name, name, err))
    return -obs.positions.astype(np.float64)
)PY");
  CHECK(run_error("python:" + path) == "");
}

TEST_CASE("obs.rope of a YaRN checkpoint: its fields, and rotate as the model rotates keys and queries",
          "[e2e][policy_contract][yarn]") {
  // tests/fixtures/hf_yarn: the folder (transformers' whole ramp, attention_factor 1.25) and the GGUF with
  // llama.cpp's yarn_ext_factor 0.5 and attn_factor 1.1. Inside score(), on every layer: the scaling fields, the
  // per-pair frequencies against YaRN's closed form computed in numpy from the same numbers, and the cache's keys
  // and obs.queries against the pre-RoPE parts rotated by that closed form times the attention factor (rotate-half
  // pairs, float64), and by rope.rotate; rotate(inverse=True) takes the cache's keys back to keys_pre_rope.
  const auto dir = std::filesystem::path(KVSCOPE_FIXTURES_DIR) / "hf_yarn";
  std::vector<int> prompt = {1};
  for (int i = 0; i < 100; ++i) prompt.push_back(3 + (i * 13) % 300);  // past the original context of 64
  const auto policy = [](const std::string& name, const std::string& scaling, double attention) {
    char attention_text[64];
    std::snprintf(attention_text, sizeof attention_text, "%.17g", attention);
    return write_policy(name, R"PY(
import numpy as np
needs = ["keys_pre_rope", "queries_pre_rope", "queries"]
ATTENTION = )PY" + std::string(attention_text) +
                                  R"PY(
SCALING = )PY" + scaling + R"PY(
def yarn_inv_freq(dim, base, s):
    """transformers' _compute_yarn_parameters, with llama.cpp's ext_factor weighting the extrapolation."""
    corr = lambda rot: dim * np.log(s["original_max_position_embeddings"] / (rot * 2 * np.pi)) / (2 * np.log(base))
    low, high = max(np.floor(corr(s["beta_fast"])), 0), min(np.ceil(corr(s["beta_slow"])), dim - 1)
    ramp = np.clip((np.arange(dim // 2) - low) / (high - low), 0, 1)
    extrapolated = (1 - ramp) * s["ext_factor"]
    freq = base ** (-np.arange(0, dim, 2) / dim)
    return freq / s["factor"] * (1 - extrapolated) + freq * extrapolated
def rotate_half(x, pos, inv_freq):
    angle = pos[..., None] * inv_freq                              # (..., dim/2)
    a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return ATTENTION * np.concatenate([a * np.cos(angle) - b * np.sin(angle), a * np.sin(angle) + b * np.cos(angle)], -1)
def close(name, got, want, tol):
    err = np.abs(np.asarray(got, np.float64) - want).max() / np.abs(want).max()
    if err > tol:
        raise AssertionError("%s differs by %g (relative)" % (name, err))
def score(obs):
    r = obs.rope
    same = lambda got, want: abs(got - want) <= 1e-6 * abs(want) if isinstance(want, float) else got == want
    if (set(r.scaling) != set(SCALING) or not all(same(r.scaling[k], v) for k, v in SCALING.items())
            or not same(r.attention_factor, ATTENTION) or r.pairing != "half"):
        raise AssertionError("rope.scaling %r, attention_factor %r, pairing %r" % (r.scaling, r.attention_factor, r.pairing))
    inv_freq = yarn_inv_freq(r.rope_dim, r.theta, SCALING)
    close("rope.inv_freq", r.inv_freq, inv_freq, 1e-6)
    where = {int(p): j for j, p in enumerate(obs.positions[0])}
    stored = np.stack([obs.keys[:, where[int(p)]] for p in obs.query_positions])     # (n, n_kv_heads, head_dim)
    pos = obs.query_positions[:, None]
    close("keys (closed form)", rotate_half(obs.keys_pre_rope.astype(np.float64), pos, inv_freq), stored, 1e-4)
    close("queries (closed form)", rotate_half(obs.queries_pre_rope.astype(np.float64), pos, inv_freq), obs.queries, 1e-4)
    close("rope.rotate(keys_pre_rope)", r.rotate(obs.keys_pre_rope, pos), stored, 1e-5)
    close("rope.rotate(queries_pre_rope)", r.rotate(obs.queries_pre_rope, pos), obs.queries, 1e-5)
    close("rope.rotate(keys, inverse)", r.rotate(stored, pos, inverse=True), obs.keys_pre_rope, 1e-5)
    return -obs.positions.astype(np.float64)
)PY");
  };
  const model::Model folder = model::load_model(dir / "qwen2_yarn");
  const std::string folder_scaling =
      "{\"type\": \"yarn\", \"factor\": 4.0, \"attention_factor\": ATTENTION, \"original_max_position_embeddings\": "
      "64, "
      "\"beta_fast\": 4.0, \"beta_slow\": 2.0, \"truncate\": True, \"ext_factor\": 1.0}";
  CHECK(run_error_on(folder, prompt, "python:" + policy("rope_yarn", folder_scaling, 1.25)) == "");
  const model::Model partial = model::load_model(dir / "qwen2_yarn_ext050.gguf");
  const double partial_attention = 1.1 * (0.1 * std::log(4.0) + 1.0);  // attn_factor x YaRN's default
  std::string partial_scaling = folder_scaling;
  partial_scaling.replace(partial_scaling.find("\"ext_factor\": 1.0"), 17, "\"ext_factor\": 0.5");
  CHECK(partial.config.rope_scaling.attention_factor == Approx(partial_attention));
  CHECK(run_error_on(partial, prompt, "python:" + policy("rope_yarn_ext", partial_scaling, partial_attention)) == "");
  // The checks can fail: the folder's numbers expected of the partial ramp's file are refused.
  CHECK_THAT(run_error_on(partial, prompt, "python:" + policy("rope_yarn_wrong", folder_scaling, 1.25)),
             Catch::Contains("rope.scaling"));
}
