"""The built-in kvpress ports (issue 36, item 4: `expected_attention`, `non_causal_attn`, `compactor`, C++ for
speed) keep exactly the entries their Python twins under examples/policies keep: three traces of the default model,
each shipped prompt at its own compression ratio (0.25, 0.5, 0.75: every prompt and every ratio once, a third of the
nine pairs' time), run each Python file beside its built-in with the same parameters (a non-default set too), and the kept masks after the prefill, read with h5py, must be equal in every
(layer, KV head), or differ only among entries whose recorded scores are equal (exact ties: the two sum in
different orders, and the float64 difference breaks the tie; `non_causal_attn:chunk_size=100` has 2 to 4 such heads
of 90 per trace, all other pairs none). Both score in float64 and rank the float64 scores; the float32 scores the trace records of the
evicted entries must agree to 1e-5 of their layer's spread (they differ only by summation order). tests/python/test_kvpress_parity.py holds
the built-ins to kvpress's own goldens.

Needs neither torch nor kvpress. Run by ctest with the project venv; KVSCOPE_BINARY points at the executable."""
import collections
import os
import subprocess
import sys

import h5py
import numpy as np

from checks import check, run_in_temp_folder

BINARY = os.environ.get("KVSCOPE_BINARY", "")
SOURCE = os.environ.get("KVSCOPE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
RECORD = "attention=off;similarity=off;decode=off;stats=off;qk=off;nmse=off"
# Each prompt at one ratio: every prompt and every ratio is traced, in three prefills per spec instead of nine.
PROMPTS_AT_RATIOS = [("bakery_notes.txt", 0.25), ("heat_pump.txt", 0.5), ("lighthouse_story.txt", 0.75)]
# (Python file, built-in, parameters given to both)
TWINS = [
    ("expected_attention.py", "expected_attention", ""),
    ("expected_attention.py", "expected_attention", "n_future_positions=64,n_sink=2,use_covariance=false,epsilon=0.01"),
    ("non_causal_attn.py", "non_causal_attn", ""),
    ("non_causal_attn.py", "non_causal_attn", "chunk_size=100"),
    ("compactor.py", "compactor", ""),
    ("compactor.py", "compactor", "sketch_dimension=0,chunk_size=64,sink_size_start=3,sink_size_end=0,blending=0.5"),
    ("compactor.py", "compactor", "seed=7"),
]


def specs(file, builtin, params):
    python = "python:" + os.path.join(SOURCE, "examples", "policies", file) + ("," + params if params else "")
    return python, builtin + (":" + params if params else "")


def runs(path):
    """{policy_spec: (kept mask (layers, kv_heads, n) bool, the eviction events (layer, kv_head, position, score)
    sorted)}"""
    out = {}
    with h5py.File(path, "r") as f:
        for run in f["runs"].values():
            spec = run.attrs["policy_spec"]
            spec = spec.decode() if isinstance(spec, bytes) else spec
            n_layers, n = int(run.attrs["n_layers"]), int(run.attrs["prompt_length"])
            kept = np.stack([run[f"kept_mask/layer_{l:02d}"][:, :n, 0] == 1 for l in range(n_layers)])
            e = run["events"][()]
            e = e[np.lexsort((e["position"], e["kv_head"], e["layer"]))]
            out[spec] = kept, e
    return out


def compare(what, kept_py, events_py, kept_cpp, events_cpp, tally):
    """Head by head: the same kept set, or an exact tie (the entries only one run evicted carry, in the two runs,
    the same float32 scores: equal up to summation order, which breaks the tie); and the evicted entries' recorded
    scores agree to 1e-5 of their layer's spread."""
    n_layers, n_kv, _ = kept_py.shape
    worst = 0.0
    for l in range(n_layers):
        ep, ec = events_py[events_py["layer"] == l], events_cpp[events_cpp["layer"] == l]
        spread = float(np.ptp(ep["score"])) + 1e-30 if len(ep) else 1.0
        for h in range(n_kv):
            p, c = ep[ep["kv_head"] == h], ec[ec["kv_head"] == h]
            if (kept_py[l, h] == kept_cpp[l, h]).all():
                tally["exact"] += 1
                worst = max(worst, float(np.max(np.abs(p["score"].astype(np.float64) - c["score"]), initial=0)) / spread)
                continue
            only_p = np.sort(p["score"][~np.isin(p["position"], c["position"])])
            only_c = np.sort(c["score"][~np.isin(c["position"], p["position"])])
            tied = len(only_p) == len(only_c) and (only_p == only_c).all()
            tally["tie" if tied else "wrong"] += 1
            check(tied, f"{what}: layer {l} KV head {h}: the built-in keeps the Python file's entries, or differs only "
                        f"among equal scores (evicted only by the file: {only_p[:4]}, only by the built-in: {only_c[:4]})")
    check(worst < 1e-5, f"{what}: the evicted entries' recorded scores agree to 1e-5 of their layer's spread "
                        f"(worst {worst:.2e})")


def main(root):
    tally = collections.defaultdict(collections.Counter)
    for i, (prompt, ratio) in enumerate(PROMPTS_AT_RATIOS):
        out = os.path.join(root, f"t{i}_{ratio}.h5")
        args = [BINARY, "trace", "--prompt-file", os.path.join(SOURCE, "sample_data", "prompts", prompt),
                "--compression-ratio", repr(ratio), "--max-new-tokens", "0", "--threads", "1", "--record", RECORD,
                "--quiet", "--out", out]
        for twin in TWINS:
            for spec in specs(*twin):
                args += ["--policy", spec]
        res = subprocess.run(args, capture_output=True, text=True, timeout=900)
        check(res.returncode == 0, f"{prompt} r={ratio}: trace exits 0 ({res.stderr.strip()[-400:]})")
        if res.returncode != 0:
            continue
        traced = runs(out)
        for twin in TWINS:
            python, builtin = specs(*twin)
            what = f"{prompt} r={ratio} {builtin}"
            if python not in traced or builtin not in traced:
                check(False, f"{what}: the trace has both runs ({sorted(traced)})")
                continue
            (kept_py, events_py), (kept_cpp, events_cpp) = traced[python], traced[builtin]
            check(kept_py.sum() < kept_py.size, f"{what}: the policy evicts")
            compare(what, kept_py, events_py, kept_cpp, events_cpp, tally[builtin + (":" if twin[2] else "") + twin[2]])
    for spec, t in sorted(tally.items()):
        print(f"{spec}: {t['exact']} heads exact, {t['tie']} differ only among equal scores, {t['wrong']} wrong "
              f"(of {len(PROMPTS_AT_RATIOS)} traces)")


if __name__ == "__main__":
    sys.exit(run_in_temp_folder(BINARY, "kvscope_kvpress_twins_", main))
