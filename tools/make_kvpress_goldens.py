#!/usr/bin/env python3
"""Generate one golden fixture per kvpress press: which prompt tokens NVIDIA kvpress's own press keeps.

The catalogue of issue 36: for each score-based press that needs no trained weights, the press instance
(PyPI kvpress 0.5.5) compresses the prefill cache of SmolLM2-135M-Instruct (the Q4_1 GGUF kvscope loads,
dequantized to float32 by transformers, eager attention, CPU) on the three prompts of sample_data/prompts at
compression ratios 0.25, 0.5 and 0.75, and this script records, per layer and KV head, the original positions
of the entries it kept, plus the near-tie bands a second implementation may resolve otherwise. Output:
tests/fixtures/kvpress_<press>/golden.json, read by tests/python/test_kvpress_parity.py.

How to run (from the repository root; the venv as in tools/make_kvpress_knorm_golden.py):

    /work/kvpress-venv/bin/python tools/make_kvpress_goldens.py [--press keydiff ...]

The observation machinery (PressObserver on the press's bound score/compress, kept rows recovered from the
keys compress returned by bitwise equality, the cache checked after the forward, the tokenizer conventions)
is tools/make_kvpress_knorm_golden.py's, imported from there; only the choice of presses and the
score-agnostic tie bands are new here. Per case:
  * kept[layer][kv_head]: sorted kept positions (the keys compress returned, matched in its input), which
    must equal scores.topk(n_kept) as kvpress computes it.
  * near_boundary: per (layer, kv_head) whose band holds kept and evicted positions, the positions whose
    score lies within `band_tol` of the midpoint between the n_kept-th and (n_kept+1)-th score, as
    [layer, kv_head, [[position, score, kept 1|0], ...]]. band_tol = NEAR_REL * max(|midpoint|, std of the
    head's scores): scores of any sign and scale (z-scores, softmax probabilities, ranks). Exact ties (LagKV's
    per-partition ranks, RandomPress never) are inside by construction.
  * f64_kept_differs: heads where the same press on the model cast to float64 keeps another set, and
    f64_outside_band: those whose difference is not inside the band (float noise larger than NEAR_REL; a
    parity test must then not expect equality there: they are listed so that it can say so).
RandomPress draws torch.rand from a torch.Generator seeded with `seed` on every call (so every layer keeps the
same positions: `same_in_every_layer`); examples/policies/random_press.py replays that generator bit-exactly.
LeverageScorePress and CompactorPress draw a Gaussian sketch per layer from torch's global generator without a
seed: here torch.manual_seed(TORCH_SEED) runs right before each forward (`torch_seed` in the case), so layer l's
sketch is the l-th block of torch.randn draws after that seed, which examples/policies/leverage.py replays in
numpy (examples/policies/_torch_cpu_rng.py) (float32 rounding and torch's vectorised log/cos differ by ~1e-6: near ties only). Their float64 run draws
other numbers (randn in float64), so they have no float64 cross-check.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")

import numpy as np
import torch

from make_kvpress_knorm_golden import (PressObserver, check_tokenizer_against_golden, dump, encode, f32,
                                       gguf_add_bos, match_rows, pkg_version)
from reference_model import DEFAULT_MODEL, REPO_ROOT, load_reference, sha256_file

PROMPT_FILES = [
    "sample_data/prompts/lighthouse_story.txt",
    "sample_data/prompts/heat_pump.txt",
    "sample_data/prompts/bakery_notes.txt",
]
RATIOS = [0.25, 0.5, 0.75]
NEAR_REL = 1e-4
SCHEMA_VERSION = 1

# name -> (kvpress class, list of (press kwargs, ratios)), the policy file examples/policies/<policy>.py and the
# file parameters that correspond to the kwargs
PRESSES = {
    "random": ("RandomPress", [({"seed": 0}, RATIOS)], "random_press", {"seed": "seed"}),
    "observed_attention": ("ObservedAttentionPress", [({}, RATIOS)], "observed_attention", {}),
    "keydiff": ("KeyDiffPress", [({}, RATIOS)], "keydiff", {}),
    # the default lag_size 128 needs n_sink + 256 tokens before it scores at all (shorter prompts keep the sinks
    # and the most recent tokens): the sample prompts (154-162 tokens) test that path at one ratio, lag_size 32
    # the scoring at 0.25 and 0.5; at 0.75 lag_size 32 would keep fewer tokens than its always-kept sinks and
    # last partition (all exactly tied: a test of nothing but the tie, and 200 KB of bands), lag_size 16 does not
    "lagkv": ("LagKVPress", [({}, [0.5]), ({"lag_size": 32}, [0.25, 0.5]), ({"lag_size": 16}, [0.75])], "lagkv",
              {"lag_size": "lag_size", "n_sink": "n_sink"}),
    "expected_attention": ("ExpectedAttentionPress", [({}, RATIOS)], "expected_attention", {}),
    "cur": ("CURPress", [({}, RATIOS)], "cur", {}),
    "non_causal_attn": ("NonCausalAttnPress", [({}, RATIOS)], "non_causal_attn", {}),
    # these two draw their Gaussian sketch from torch's global generator, unseeded; the golden seeds it with
    # torch.manual_seed(TORCH_SEED) right before the forward, and the files replay that generator (their `seed`)
    "leverage": ("LeverageScorePress", [({}, RATIOS)], "leverage", {}),
    "compactor": ("CompactorPress", [({}, RATIOS)], "compactor", {}),
}
SEEDED = {"leverage", "compactor"}
TORCH_SEED = 0


@torch.no_grad()
def run_press(model, ids, cls_name, kwargs, ratio, torch_seed=None):
    import kvpress
    from transformers import DynamicCache

    press = getattr(kvpress, cls_name)(compression_ratio=ratio, **kwargs)
    obs = PressObserver(press)
    cache = DynamicCache()
    if torch_seed is not None:
        torch.manual_seed(torch_seed)
    with press(model):
        model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
    return obs, cache


@torch.no_grad()
def run_case(model, ids, cls_name, kwargs, ratio, torch_seed=None):
    from kvpress.utils import compute_n_kept

    n_layer = model.config.num_hidden_layers
    q_len = len(ids)
    n_kept = compute_n_kept(q_len, ratio)
    assert n_kept == max(1, int(q_len * (1 - ratio))) and 0 < n_kept < q_len
    obs, cache = run_press(model, ids, cls_name, kwargs, ratio, torch_seed)
    assert sorted(obs.records) == list(range(n_layer)), "press did not run on every layer"
    kept, near, gaps = [], [], []
    for layer in range(n_layer):
        rec = obs.records[layer]
        k_in, v_in, k_out, v_out, s = (rec[n] for n in ("keys_in", "values_in", "keys_out", "values_out", "scores"))
        n_kv = k_in.shape[1]
        assert k_out.shape[2] == n_kept and s.shape == (1, n_kv, q_len), (k_out.shape, s.shape)
        cl = cache.layers[layer]
        assert torch.equal(cl.keys, k_out) and torch.equal(cl.values, v_out)
        layer_kept = []
        for h in range(n_kv):
            pos = match_rows(k_out[0, h], k_in[0, h])
            assert torch.equal(v_out[0, h], v_in[0, h][pos]), "values gathered elsewhere"
            assert sorted(pos) == sorted(s[0, h].topk(n_kept).indices.tolist())
            sh = s[0, h].double()
            srt = torch.sort(sh, descending=True).values
            gaps.append(float(srt[n_kept - 1] - srt[n_kept]))
            mid = float(srt[n_kept - 1] + srt[n_kept]) / 2
            tol = NEAR_REL * max(abs(mid), float(sh.std()))
            band = torch.nonzero((sh - mid).abs() <= tol).flatten().tolist()
            kept_set = set(pos)
            if any(p in kept_set for p in band) and any(p not in kept_set for p in band):
                band.sort(key=lambda p: (-float(sh[p]), p))
                near.append([layer, h, [[p, f32(sh[p]), int(p in kept_set)] for p in band]])
            layer_kept.append(sorted(pos))
        kept.append(layer_kept)
    return {
        "compression_ratio": ratio,
        "q_len": q_len,
        "n_kept": n_kept,
        "kept": kept,
        "n_exact_ties": sum(1 for g in gaps if g == 0.0),
        "near_boundary": near,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--press", action="append", choices=sorted(PRESSES), help="only these (default: all)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    t0 = time.perf_counter()
    import transformers
    transformers.utils.logging.disable_progress_bar()
    import kvpress

    tok, model = load_reference(args.model, args.threads)
    cfg = model.config
    assert type(model).__name__ == "LlamaForCausalLM" and gguf_add_bos(args.model) is False
    n_tok_checked = check_tokenizer_against_golden(tok)
    model64 = copy.deepcopy(model).double()
    model_sha = sha256_file(args.model)
    prompts = []
    for rel in PROMPT_FILES:
        text = (REPO_ROOT / rel).read_bytes().decode("utf-8")
        prompts.append({"prompt_file": rel, "text": text, "ids": encode(tok, text)})

    for name in args.press or list(PRESSES):
        cls_name, variants, policy, param_map = PRESSES[name]
        cases = []
        for kwargs, ratios in variants:
            for pi, p in enumerate(prompts):
                for ratio in ratios:
                    seed = TORCH_SEED if name in SEEDED else None
                    c = run_case(model, p["ids"], cls_name, kwargs, ratio, seed)
                    params = {param_map[k]: v for k, v in kwargs.items() if k in param_map}
                    if name in SEEDED:
                        params["seed"] = seed
                    if name == "compactor":  # kvpress blends with the compression ratio, which no policy is told
                        params["blending"] = ratio
                    c = {"prompt": pi, "press_kwargs": kwargs, **({"torch_seed": seed} if name in SEEDED else {}),
                         "policy_params": params, **c}
                    c["f64_kept_differs"], c["f64_outside_band"] = [], []
                    if name != "random" and name not in SEEDED:  # float64 draws other random numbers
                        c64 = run_case(model64, p["ids"], cls_name, kwargs, ratio)
                        band = {(l, h): {e[0] for e in es} for l, h, es in c["near_boundary"]}
                        for l in range(cfg.num_hidden_layers):
                            for h in range(cfg.num_key_value_heads):
                                diff = set(c["kept"][l][h]) ^ set(c64["kept"][l][h])
                                if diff:
                                    c["f64_kept_differs"].append([l, h])
                                    if not diff <= band.get((l, h), set()):
                                        c["f64_outside_band"].append([l, h])
                    else:  # re-seeded per call: every layer and head keeps the same positions
                        c["same_in_every_layer"] = all(lk == c["kept"][0] for lk in c["kept"])
                    print(f"{name} {kwargs} {p['prompt_file']} r={ratio}: n_kept {c['n_kept']}, "
                          f"{c['n_exact_ties']} exact ties, {len(c['near_boundary'])} heads with bands, "
                          f"f64 differs {len(c['f64_kept_differs'])} (outside band {c['f64_outside_band']})",
                          file=sys.stderr)
                    cases.append(c)
        out = {
            "schema_version": SCHEMA_VERSION,
            "generator": "tools/make_kvpress_goldens.py",
            "press": f"kvpress.{cls_name}",
            "policy_file": f"examples/policies/{policy}.py",
            "model": {"file": args.model.name, "sha256": model_sha, "n_layer": cfg.num_hidden_layers,
                      "n_head": cfg.num_attention_heads, "n_head_kv": cfg.num_key_value_heads,
                      "head_dim": cfg.hidden_size // cfg.num_attention_heads},
            "reference": {"torch": torch.__version__, "transformers": transformers.__version__,
                          "kvpress": pkg_version("kvpress"), "numpy": np.__version__, "torch_threads": args.threads,
                          "tokenizer_checked_against_golden_prompts": n_tok_checked,
                          "load": "AutoModelForCausalLM.from_pretrained(dir, gguf_file=file, dtype=torch.float32, "
                                  "attn_implementation='eager'), CPU",
                          "press": f"kvpress.{cls_name}(compression_ratio=r, **press_kwargs), applied with `with "
                                   f"press(model): model(input_ids, past_key_values=DynamicCache())`"},
            "conventions": "See tools/make_kvpress_goldens.py's docstring and tests/fixtures/kvpress_knorm/README.md "
                           "(text, ids, positions, kept as there). prompts[i] holds text and ids once; a case names "
                           "its prompt by index. near_boundary entries are [position, score, kept] sorted by "
                           f"decreasing score; band_tol = {NEAR_REL} * max(|midpoint|, std of the head's scores).",
            "prompts": prompts,
            "cases": cases,
        }
        path = REPO_ROOT / "tests" / "fixtures" / f"kvpress_{name}" / "golden.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dump(out), encoding="utf-8")
        print(f"wrote {path} ({path.stat().st_size} bytes, {time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
