#!/usr/bin/env python3
"""Generate the KnormPress golden fixture: which prompt tokens NVIDIA kvpress's KnormPress keeps.

An independent reference for kvscope's key-norm scorer. NVIDIA's `kvpress` package (its own
`KnormPress`, hooked into Hugging Face transformers the kvpress way) compresses the prefill KV
cache of SmolLM2-135M-Instruct (the same Q4_1 GGUF kvscope loads, dequantized to float32 by
transformers), and this script records, per layer and KV head, the original prompt positions of
the entries the press kept.

How to run (from the repository root):

    python3 -m venv /tmp/kvpress-venv
    /tmp/kvpress-venv/bin/pip install -r tools/requirements-kvpress.txt
    scripts/fetch_model.sh                          # -> .deps/models/...Q4_1.gguf
    /tmp/kvpress-venv/bin/python tools/make_kvpress_knorm_golden.py
    # -> tests/fixtures/kvpress_knorm/knorm_golden.json

Options: --model PATH (GGUF file), --out FILE, --threads N (torch CPU threads, default 1),
--dump-scores FILE.npz (also save kvpress's per-layer scores, for analysis). Reruns with the same
versions and CPU produce a byte-identical file. About 40 s on one CPU thread.

How the kept positions come out of kvpress's own code path (nothing here re-implements the
selection): the press instance is used as kvpress intends (`with press(model): model(ids,
past_key_values=DynamicCache())`), and its bound `score` and `compress` methods are wrapped on
the instance only to *observe* them:
  * `compress` (kvpress's ScorerPress.compress: score, compute_n_kept, topk, gather) receives the
    layer's full prefill keys/values and returns the gathered ones. Every returned key row is
    located in the input by exact equality and must match exactly one input position (keys carry
    RoPE, so even repeated tokens differ); the returned values must be the input values at those
    positions. Those positions are the golden `kept` lists.
  * `score` (KnormPress.score) is observed to record kvpress's scores, used for the boundary gap
    and for cross-checks: the matched set equals `scores.topk(n_kept)` (the same op kvpress
    runs), and the scores equal minus the L2 norm of the keys.
After the forward, the DynamicCache of every layer must hold exactly n_kept entries per KV head,
bitwise equal to what `compress` returned; the press's input keys must equal, bitwise, the keys
of a separate forward without any press (the prefill hook compresses a layer's cache only after
that layer's attention ran, so later layers are unaffected).

Cross-check against float64: the same model cast to float64 runs through the same press (kvpress
scores float64 caches in float64). The largest relative difference of any key norm (fp32 noise)
goes to `checks`, must be 10x below the near_boundary band (NEAR_REL), and every (layer, KV head)
where float64 kvpress keeps a different set must differ only inside that head's band (listed per
case in `f64_kept_differs`; on this model only layer-0 exact ties of repeated tokens).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")  # gguf-py's load progress bar; set before tqdm loads

import numpy as np
import torch

from reference_model import DEFAULT_MODEL, REPO_ROOT, load_reference, sha256_file

DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "kvpress_knorm" / "knorm_golden.json"
PROMPT_FILES = [
    "sample_data/prompts/lighthouse_story.txt",
    "sample_data/prompts/heat_pump.txt",
    "sample_data/prompts/bakery_notes.txt",
]
COMPRESSION_RATIOS = [0.5, 0.75]
# near_boundary band: key norms within this relative distance of the kept/evicted boundary
NEAR_REL = 1e-4
SCHEMA_VERSION = 1

CONVENTIONS = (
    "text: the prompt file's bytes verbatim, decoded as UTF-8, trailing newline kept (kvscope's "
    "--prompt-file reads the file unchanged). ids: the model's tokenizer (transformers, from the "
    "GGUF) on that text without special tokens: no BOS (the GGUF says add_bos_token false), plain "
    "text, no chat template. Positions are 0-based indices into ids. "
    "One prefill forward over all ids (float32, eager attention, CPU) with kvpress "
    "KnormPress(compression_ratio) applied through its forward hooks: compression happens once, "
    "after the prefill, in every layer, independently per KV head. Keys are the keys "
    "transformers caches: after k_proj and RoPE, before any compression, float32. "
    "score = -||k||_2 over head_dim (order of the head dimensions is irrelevant to the norm, so "
    "GGUF pair order vs HF rotate-half order does not matter); the kept entries are the n_kept "
    "highest scores, i.e. the n_kept SMALLEST key norms, with no protected sink or recent window. "
    "n_kept = max(1, int(q_len * (1 - compression_ratio))) (kvpress compute_n_kept), the same for "
    "every layer and head. kept[layer][kv_head] is the sorted list of kept positions, recovered "
    "from the keys kvpress's compress returned. boundary_gap[layer][kv_head] is "
    "score[n_kept-th best] - score[(n_kept+1)-th best] = norm of the smallest evicted key minus "
    "norm of the largest kept key (>= 0; a tiny gap marks a near tie that float noise in another "
    "implementation could flip); min_boundary_gap is the smallest over all layers and heads, at "
    "min_boundary_gap_at [layer, kv_head]; n_exact_ties counts heads whose gap is exactly 0. "
    "Exact ties are real, not noise: in layer 0 every occurrence of a repeated token has the same "
    "key before RoPE, and RoPE preserves the norm, so such norms agree to the last bit or two; "
    "kvpress then keeps whichever torch.topk returns first (unspecified order, not 'earlier "
    "position wins'). near_boundary lists, per (layer, kv_head) whose band holds both kept and "
    "evicted positions, every position whose key norm is within NEAR_REL (1e-3) relative of the "
    "boundary midpoint, as [layer, kv_head, [[position, key_norm, kept 1|0], ...]] sorted by "
    "norm: a test should accept a selection that differs from kept only by swapping positions "
    "inside that band (and should report the kvpress norms when it does). "
    "Floats are float32 values in shortest round-trip form."
)


# --------------------------------------------------------------------------------------------
# helpers


def f32(v) -> float:
    """A float32 as the Python float whose repr is the shortest that round-trips to it."""
    x = np.float32(v)
    return float(np.format_float_positional(x, unique=True, trim="-"))


def pkg_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def gguf_add_bos(model_path: Path) -> bool:
    from gguf import GGUFReader
    field = GGUFReader(str(model_path)).fields["tokenizer.ggml.add_bos_token"]
    return bool(field.contents())


def encode(tok, text: str) -> list[int]:
    """Token ids of text without special tokens. SmolLM2's GGUF says add_bos_token = false, so
    kvscope adds nothing; the transformers versions kvpress accepts (< 5.3) ignore that flag when
    they build a tokenizer from a GGUF and prepend BOS by default (transformers 5.23, used for
    tests/fixtures/golden, honours it). Hence add_special_tokens=False, and a check that the
    default encode differs from it by exactly that BOS and nothing else."""
    ids = list(tok(text, add_special_tokens=False)["input_ids"])
    default = list(tok(text)["input_ids"])
    assert default in (ids, [tok.bos_token_id] + ids), "default encode differs beyond a BOS"
    return ids


def check_tokenizer_against_golden(tok) -> int:
    """The ids of the plain-text prompts of tests/fixtures/golden (written with transformers
    5.23) must come out the same here. Returns how many prompts were compared."""
    path = REPO_ROOT / "tests" / "fixtures" / "golden" / "smollm2_golden.json"
    if not path.exists():
        return 0
    n = 0
    for p in json.loads(path.read_text(encoding="utf-8"))["prompts"]:
        if p["kind"] == "text":
            assert encode(tok, p["text"]) == p["ids"], f"tokenizer disagrees on {p['name']}"
            n += 1
    return n


class PressObserver:
    """Wraps one press instance's bound `score` and `compress` to record, per layer, what
    kvpress computed. The wrapped methods are called unchanged and their results returned
    unchanged."""

    def __init__(self, press):
        self.press = press
        self.records: dict[int, dict[str, torch.Tensor]] = {}
        orig_score, orig_compress = press.score, press.compress

        def score(module, hidden_states, keys, values, attentions, kwargs):
            s = orig_score(module, hidden_states, keys, values, attentions, kwargs)
            self.records.setdefault(module.layer_idx, {})["scores"] = s.detach().clone()
            return s

        def compress(module, hidden_states, keys, values, attentions, kwargs):
            rec = self.records.setdefault(module.layer_idx, {})
            rec["keys_in"] = keys.detach().clone()
            rec["values_in"] = values.detach().clone()
            k_out, v_out = orig_compress(module, hidden_states, keys, values, attentions, kwargs)
            rec["keys_out"] = k_out.detach().clone()
            rec["values_out"] = v_out.detach().clone()
            return k_out, v_out

        # Instance attributes shadow the class methods; ScorerPress.compress calls self.score,
        # so it goes through the observer too.
        press.score = score
        press.compress = compress


def match_rows(out: torch.Tensor, inp: torch.Tensor) -> list[int]:
    """For each row of out (n, d), the unique row index of inp (L, d) that is bitwise equal."""
    eq = (out[:, None, :] == inp[None, :, :]).all(dim=-1)  # (n, L)
    counts = eq.sum(dim=1)
    assert bool((counts == 1).all()), f"kept rows matching 0 or >1 input rows: {counts.tolist()}"
    return eq.int().argmax(dim=1).tolist()


# --------------------------------------------------------------------------------------------


@torch.no_grad()
def run_case(model, ids: list[int], ratio: float, ref_keys: list[torch.Tensor]):
    from kvpress import KnormPress
    from kvpress.utils import compute_n_kept
    from transformers import DynamicCache

    n_layer = model.config.num_hidden_layers
    q_len = len(ids)
    n_kept = compute_n_kept(q_len, ratio)
    assert n_kept == max(1, int(q_len * (1 - ratio)))
    assert 0 < n_kept < q_len

    press = KnormPress(compression_ratio=ratio)
    obs = PressObserver(press)
    cache = DynamicCache()
    with press(model):
        model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)

    assert sorted(obs.records) == list(range(n_layer)), "press did not run on every layer"
    kept, gaps, near = [], [], []
    for layer in range(n_layer):
        rec = obs.records[layer]
        k_in, v_in, k_out, v_out, s = (rec[n] for n in
                                       ("keys_in", "values_in", "keys_out", "values_out", "scores"))
        b, n_kv, L, hd = k_in.shape
        assert (b, L) == (1, q_len)
        assert k_out.shape == (1, n_kv, n_kept, hd) and v_out.shape == k_out.shape
        assert s.shape == (1, n_kv, q_len)
        assert s.dtype == torch.promote_types(k_in.dtype, torch.float32)
        # the press saw the same keys as a forward without any press
        assert torch.equal(k_in, ref_keys[layer]), f"layer {layer}: press input keys differ"
        # the cache after the press holds exactly what compress returned: n_kept per head
        cl = cache.layers[layer]
        assert tuple(cl.keys.shape) == (1, n_kv, n_kept, hd), tuple(cl.keys.shape)
        assert torch.equal(cl.keys, k_out) and torch.equal(cl.values, v_out)
        # sanity: KnormPress's score is minus the key norm
        assert torch.allclose(s, -torch.linalg.vector_norm(k_in, dim=-1), rtol=1e-6, atol=0)
        layer_kept, layer_gaps = [], []
        for h in range(n_kv):
            pos = match_rows(k_out[0, h], k_in[0, h])
            # values carry no position (no RoPE), so repeated tokens can share one in layer 0:
            # check them at the positions the keys identified
            assert torch.equal(v_out[0, h], v_in[0, h][pos]), "values gathered elsewhere"
            assert sorted(pos) == sorted(s[0, h].topk(n_kept).indices.tolist())
            srt = torch.sort(s[0, h], descending=True).values
            gap = float(srt[n_kept - 1] - srt[n_kept])
            assert gap >= 0
            # positions whose key norm lies within NEAR_REL of the boundary, if the band holds
            # both kept and evicted ones (a selection another fp32 implementation may flip)
            norms = -s[0, h]
            mid = float(-(srt[n_kept - 1] + srt[n_kept]) / 2)
            band = torch.nonzero((norms - mid).abs() <= NEAR_REL * mid).flatten().tolist()
            kept_set = set(pos)
            if any(p in kept_set for p in band) and any(p not in kept_set for p in band):
                band.sort(key=lambda p: (float(norms[p]), p))
                near.append([layer, h, [[p, f32(norms[p]), int(p in kept_set)] for p in band]])
            layer_kept.append(sorted(pos))
            layer_gaps.append(f32(gap))
        kept.append(layer_kept)
        gaps.append(layer_gaps)

    flat = [(g, l, h) for l, row in enumerate(gaps) for h, g in enumerate(row)]
    gmin, lmin, hmin = min(flat)
    scores = torch.stack([obs.records[l]["scores"][0] for l in range(n_layer)])  # (L, kv, q)
    return scores, {
        "compression_ratio": ratio,
        "q_len": q_len,
        "n_kept": n_kept,
        "kept": kept,
        "boundary_gap": gaps,
        "min_boundary_gap": gmin,
        "min_boundary_gap_at": [lmin, hmin],
        "n_exact_ties": sum(1 for g, _, _ in flat if g == 0.0),
        "near_boundary": near,
    }


def dump(obj: dict) -> str:
    """Pretty top level, one compact line per case."""
    head = {k: v for k, v in obj.items() if k != "cases"}
    text = json.dumps(head, indent=1, ensure_ascii=False)
    assert text.endswith("\n}")
    cases = ",\n".join("  " + json.dumps(c, separators=(",", ":"), ensure_ascii=False)
                       for c in obj["cases"])
    text = text[:-2] + ',\n "cases": [\n' + cases + "\n ]\n}\n"
    assert json.loads(text) == json.loads(json.dumps(obj))
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dump-scores", type=Path, help="also write kvpress's scores to this .npz")
    args = ap.parse_args()

    t0 = time.perf_counter()
    import transformers
    transformers.utils.logging.disable_progress_bar()
    import kvpress  # noqa: F401  (fail early when the venv lacks it)

    tok, model = load_reference(args.model, args.threads)
    model_sha = sha256_file(args.model)
    cfg = model.config
    assert type(model).__name__ == "LlamaForCausalLM"
    assert gguf_add_bos(args.model) is False
    n_tok_checked = check_tokenizer_against_golden(tok)
    default_adds_bos = (list(tok("x")["input_ids"])
                        != list(tok("x", add_special_tokens=False)["input_ids"]))
    # The same model in float64, for the cross-check below (kvpress scores float64 caches in
    # float64): how far fp32 rounding moves key norms, and whether it changes kvpress's choice.
    model64 = copy.deepcopy(model).double()
    t_load = time.perf_counter()

    def prefill_keys(m, ids):
        with torch.no_grad():
            past = m(input_ids=torch.tensor([ids]), use_cache=True).past_key_values
        return [past.layers[l].keys.clone() for l in range(cfg.num_hidden_layers)]

    cases, dumped, checks = [], {}, {}
    for rel in PROMPT_FILES:
        text = (REPO_ROOT / rel).read_bytes().decode("utf-8")
        ids = encode(tok, text)
        ref_keys, ref64_keys = prefill_keys(model, ids), prefill_keys(model64, ids)
        rel_err = max(float(((torch.linalg.vector_norm(a.double(), dim=-1)
                              - torch.linalg.vector_norm(b, dim=-1)).abs()
                             / torch.linalg.vector_norm(b, dim=-1)).max())
                      for a, b in zip(ref_keys, ref64_keys))
        checks.setdefault("key_norm_max_rel_err_f32_vs_f64", {})[rel] = f32(rel_err)
        assert rel_err * 10 < NEAR_REL, "near_boundary band too narrow for fp32 noise"
        for ratio in COMPRESSION_RATIOS:
            scores, c = run_case(model, ids, ratio, ref_keys)
            _, c64 = run_case(model64, ids, ratio, ref64_keys)
            # where float64 keeps another set, the difference must lie inside the band
            c["f64_kept_differs"] = []
            band = {(l, h): {e[0] for e in entries} for l, h, entries in c["near_boundary"]}
            for l in range(cfg.num_hidden_layers):
                for h in range(cfg.num_key_value_heads):
                    diff = set(c["kept"][l][h]) ^ set(c64["kept"][l][h])
                    if diff:
                        assert diff <= band.get((l, h), set()), (rel, ratio, l, h, diff)
                        c["f64_kept_differs"].append([l, h])
            if args.dump_scores:
                dumped[f"{Path(rel).stem}_{ratio}"] = scores.numpy()
            print(f"{rel}: q_len {c['q_len']}, ratio {ratio}, n_kept {c['n_kept']}, "
                  f"min boundary gap {c['min_boundary_gap']} at {c['min_boundary_gap_at']}, "
                  f"{c['n_exact_ties']} exact ties, {len(c['near_boundary'])} heads near, "
                  f"f64 differs in {c['f64_kept_differs']}",
                  file=sys.stderr)
            cases.append({"prompt_file": rel, "text": text, "ids": ids, **c})

    out = {
        "schema_version": SCHEMA_VERSION,
        "generator": "tools/make_kvpress_knorm_golden.py",
        "model": {
            "file": args.model.name,
            "sha256": model_sha,
            "n_layer": cfg.num_hidden_layers,
            "n_head": cfg.num_attention_heads,
            "n_head_kv": cfg.num_key_value_heads,
            "head_dim": cfg.hidden_size // cfg.num_attention_heads,
        },
        "reference": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "kvpress": pkg_version("kvpress"),
            "accelerate": pkg_version("accelerate"),
            "gguf": pkg_version("gguf"),
            "tokenizers": pkg_version("tokenizers"),
            "numpy": np.__version__,
            "torch_threads": args.threads,
            "tokenizer": f"{type(tok).__name__} built by transformers from the GGUF; ids with "
                         f"add_special_tokens=False (GGUF add_bos_token false; this "
                         f"transformers {'prepends' if default_adds_bos else 'does not prepend'} "
                         f"BOS by default); agrees with tests/fixtures/golden on its "
                         f"{n_tok_checked} plain-text prompts",
            "press": "kvpress.KnormPress(compression_ratio=r), applied with `with press(model): "
                     "model(input_ids, past_key_values=DynamicCache())`",
            "load": "AutoModelForCausalLM.from_pretrained(dir, gguf_file=file, "
                    "dtype=torch.float32, attn_implementation='eager'), CPU",
        },
        "conventions": CONVENTIONS,
        "checks": checks,
        "cases": cases,
    }
    if args.dump_scores:
        np.savez(args.dump_scores, **dumped)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(dump(out), encoding="utf-8")
    t_end = time.perf_counter()
    print(f"wrote {args.out} ({len(cases)} cases); load {t_load - t0:.1f} s, "
          f"cases {t_end - t_load:.1f} s, total {t_end - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
