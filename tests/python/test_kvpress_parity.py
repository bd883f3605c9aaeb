"""kvpress's presses ported to shipped policy files keep kvpress's own entries (issue 36, item 3).

Each tests/fixtures/kvpress_<press>/golden.json (a shipped file's press, a built-in's such as SnapKVPress, or a
wrapper such as AdaKVPress around one, kvscope's `selection=`; PerLayerCompressionPress, kvscope's
`allocation=per_layer`; ComposedPress of two, kvscope's `compose:`, also with a second SnapKVPress that recomputes
its attention over the first's keys) (tools/make_kvpress_goldens.py: NVIDIA kvpress 0.5.5's press on
the same GGUF through transformers) lists, per prompt and compression ratio, the positions the press kept in every
(layer, KV head) after the prefill, and the near-tie bands where another implementation may choose otherwise. Here
kvscope traces the golden's prompt (`--prompt-file` with its exact text; the trace's prompt ids must be the
golden's) under `python:<the golden's policy file>` (or the golden's built-in `policy`) with the golden's
parameters at `--compression-ratio R`, and the kept mask after the
prefill, read with h5py, must equal kvpress's set in every (layer, KV head), except for swaps inside that head's
band (counted and printed per press and ratio). The files of the presses that draw from torch's generator
(RandomPress, LeverageScorePress, CompactorPress) replay it from the golden's seed, so they are held to the same.
BlockPress (kvpress_block_*) is one exact pass scored in blocks; DecodingPress (kvpress_decoding_*) compresses
every N decode steps (kvpress_decoding_expected_attention: below the prompt too, prefill_evict=false, and around a press
that reads DecodingPress's buffered hidden states, one case with a smaller buffer, decode_buffer;
kvpress_decoding_snapkv and kvpress_decoding_tova: the built-ins around attention presses, which kvpress under sdpa
attention recomputes from the buffered steps): its cases trace at --budget (the golden's budget_tokens) with
decode steps, must generate kvpress's tokens, and compare the kept sets after the last step (heads with a near-tie
boundary at any compression excused, at least min_exact_share of heads exact); PrefillDecodingPress
(kvpress_prefill_decoding_*) likewise, with the prefill evicting too (decode_evict=true at --budget the prefill's count).
ChunkPress (kvpress_chunk_*) and EntropyGatedChunkKVPress (kvpress_entropy_chunkkv_*) are kvscope's selection=chunk and
selection=entropy_chunkkv. Some goldens hold one case of each kind (HELD_CASES in the generator; the others measured
once, docs/policies.md). Cases that differ only in their specs share one trace. A case's measured_params are further kvscope specs whose
agreement is printed, not required (the documented differences: kvscope's block= chunked prefill, decode_evict
without decode_interval); a measured_only case holds no spec to kvpress's set.

Needs neither torch nor kvpress. Run by ctest with the project venv; KVSCOPE_BINARY points at the executable.
"""
import collections
import glob
import json
import os
import subprocess
import sys
import time

import h5py
import numpy as np

from checks import check, run_in_temp_folder

BINARY = os.environ.get("KVSCOPE_BINARY", "")
SOURCE = os.environ.get("KVSCOPE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
RECORD = "attention=off;similarity=off;decode=off;stats=off;qk=off;nmse=off"
# Shipped files with a built-in C++ twin (issue 36, item 4): the twin is held to the file's goldens too.
BUILTIN_TWINS = {"examples/policies/expected_attention.py": "expected_attention",
                 "examples/policies/non_causal_attn.py": "non_causal_attn",
                 "examples/policies/compactor.py": "compactor"}


def goldens():
    """(press, golden) of every golden file, and of a shipped file's prefill golden once more as its built-in twin's."""
    for path in sorted(glob.glob(os.path.join(SOURCE, "tests", "fixtures", "kvpress_*", "golden.json"))):
        with open(path, encoding="utf-8") as f:
            press, golden = os.path.basename(os.path.dirname(path))[len("kvpress_"):], json.load(f)
        yield press, golden
        twin = BUILTIN_TWINS.get(golden.get("policy_file", "")) if "policy" not in golden else None
        # the twins are held to the prefill goldens (DecodingPress needs decode_evict, which they do not take; they take
        # block_scoring, measured equal to the file's once, docs/policies.md)
        if twin and not any("decode_steps" in case or "block_scoring" in case["policy_params"] for case in golden["cases"]):
            yield f"{press} (built-in {twin})", {**golden, "policy": twin}


def spec_of(golden, case, params=None):
    """A shipped file's spec (`python:PATH,k=v`), or a built-in's (`snapkv:k=v,...`) for a press kvscope has, with
    the case's parameters (or `params`, one of its measured_params)."""
    # compose's first= and then= may name a shipped file, python:PATH relative to the repository
    given = case["policy_params"] if params is None else params
    params = [f"{k}=python:{os.path.join(SOURCE, v[len('python:'):])}" if str(v).startswith("python:") else f"{k}={v}"
              for k, v in sorted(given.items())]
    if "policy" in golden:
        return golden["policy"] + (":" + ",".join(params) if params else "")
    return "python:" + os.path.join(SOURCE, golden["policy_file"]) + "".join("," + p for p in params)


def trace(root, name, text, ratio, specs, budget_tokens=None, decode_steps=0):
    """{spec: kept mask after the prefill, or after the last of `decode_steps` decode steps, (n_layers, n_kv_heads,
    positions) bool}, the prompt ids and {spec: generated ids}. The budget is `ratio` (--compression-ratio) or
    `budget_tokens` (--budget)."""
    prompt = os.path.join(root, name + ".txt")
    with open(prompt, "wb") as f:
        f.write(text.encode("utf-8"))
    out = os.path.join(root, name + ".h5")
    budget = ["--budget", str(budget_tokens)] if budget_tokens is not None else ["--compression-ratio", repr(ratio)]
    # kvscope's first generated token comes from the prefill; each further one from a decode step
    decode = ["--max-new-tokens", str(decode_steps + 1), "--ignore-eos"] if decode_steps else ["--max-new-tokens", "0"]
    args = [BINARY, "trace", "--prompt-file", prompt, *budget, *decode,
            "--threads", "1", "--record", RECORD, "--quiet", "--out", out]
    for spec in specs:
        args += ["--policy", spec]
    res = subprocess.run(args, capture_output=True, text=True, timeout=600)
    check(res.returncode == 0, f"{name}: trace exits 0 ({res.stderr.strip()[-400:]})")
    if res.returncode != 0:
        return {}, None, {}
    kept, ids, generated = {}, None, {}
    with h5py.File(out, "r") as f:
        for run in f["runs"].values():
            spec = run.attrs["policy_spec"]
            spec = spec.decode() if isinstance(spec, bytes) else spec
            n_layers = int(run.attrs["n_layers"])
            n = int(run.attrs["prompt_length"]) + decode_steps
            step = -1  # the last step: the last prefill block (block=) or decode step
            kept[spec] = np.stack([run[f"kept_mask/layer_{l:02d}"][:, :n, step] == 1 for l in range(n_layers)])
            ids = [int(i) for i in run["tokens/prompt_ids"][()]]
            generated[spec] = [int(i) for i in run["tokens/generated_ids"][()]]
    return kept, ids, generated


def compare(press, golden, case, mask, tally, label="", strict=True):
    """Kept sets against the golden's, head by head; differences allowed only inside the head's band. Not `strict`
    (a measured spec): the heads are counted, nothing is required."""
    ratio = case["compression_ratio"]
    what = f"{press} {golden['prompts'][case['prompt']]['prompt_file']} {case['press_kwargs']} r={ratio}{label}"
    n_layers, n_kv, _ = mask.shape
    check(mask.shape[:2] == (len(case["kept"]), len(case["kept"][0])), f"{what}: layers and heads {mask.shape}")
    counts = mask.sum(axis=-1)
    if not strict:
        pass
    elif "target_size" in case:  # DecodingPress: every head at its target after the last compression
        want = len(case["kept"][0][0])
        check(bool((counts == want).all()), f"{what}: every head holds kvpress's {want} (kvscope {sorted(set(counts.flatten().tolist()))})")
    elif "n_kept_per_layer_head" in case:
        # AdaKVPress: heads keep different counts, heads x n_kept per layer (which head keeps what is the sets')
        check(bool((counts.sum(axis=1) == n_kv * case["n_kept"]).all()),
              f"{what}: every layer keeps {n_kv} x {case['n_kept']} (kvscope {counts.sum(axis=1).tolist()})")
    else:
        # PyramidKVPress and ChunkKVPress keep a number per layer; every other press the ratio's n_kept. ChunkKV's
        # count depends on which chunks win (the last may be short): a layer whose chunks tie may keep another
        # count, and then the sets must differ only inside its heads' bands (below)
        want = np.array(case.get("n_kept_per_layer", [case["n_kept"]] * n_layers))[:, None]
        tied = {l for l, _, _ in case["near_boundary"]} if case["press_kwargs"].get("press") else set()
        off = [l for l in range(n_layers) if (counts[l] != want[l]).any() and l not in tied]
        check(not off, f"{what}: every head keeps kvpress's n_kept {want.flatten().tolist()} "
                       f"(kvscope {counts[:, 0].tolist()}, layers {off} outside any tie)")
    t = tally[(press, json.dumps(case["press_kwargs"]) + label, ratio)]
    bands = {(l, h): {e[0] for e in entries} for l, h, entries in case["near_boundary"]}
    # AdaKV's safeguard and CriticalKV's first stage pick among near-tied scores by torch.topk's order; what they
    # leave competes again, so such a head may differ beyond the final band (the golden lists them)
    stage_ties = {(l, h) for l, h, _ in case.get("stage_ties", [])}
    for l in range(n_layers):
        for h in range(n_kv):
            ours = set(np.flatnonzero(mask[l, h]).tolist())
            diff = ours ^ set(case["kept"][l][h])
            if not diff:
                t["exact"] += 1
            elif diff <= bands.get((l, h), set()):
                t["band"] += 1
            elif (l, h) in stage_ties:
                t["stage_tie"] += 1
            else:
                t["wrong"] += 1
                if strict:
                    check(False, f"{what}: layer {l} KV head {h} differs outside its tie band at {sorted(diff)[:12]}")
    if strict and "min_exact_share" in case:  # decoding: the ties excuse many heads, so most must still be exact
        exact = sum(1 for l in range(n_layers) for h in range(n_kv) if set(np.flatnonzero(mask[l, h]).tolist()) ==
                    set(case["kept"][l][h]))
        check(exact >= case["min_exact_share"] * n_layers * n_kv,
              f"{what}: {exact} of {n_layers * n_kv} heads exact, at least {case['min_exact_share']:.0%} required")


def main(root):
    t0 = time.perf_counter()
    # (prompt text, ratio, budget in tokens, decode steps, k-th use of a spec) -> [(press, golden, case)]: cases that
    # agree in all but their specs share one trace
    runs = collections.defaultdict(list)
    for press, golden in goldens():
        seen = collections.Counter()
        for case in golden["cases"]:
            key = (golden["prompts"][case["prompt"]]["text"], case["compression_ratio"] or 0.0,
                   case.get("budget_tokens", 0), case.get("decode_steps", 0))
            seen[key + (spec_of(golden, case),)] += 1
            runs[key + (seen[key + (spec_of(golden, case),)],)].append((press, golden, case))
    check(len(runs) > 0, "found kvpress goldens under tests/fixtures/kvpress_*/golden.json")
    tally = collections.defaultdict(collections.Counter)
    order = sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][3], kv[0][4], kv[0][0]))
    for i, ((text, ratio, budget, decode_steps, _), items) in enumerate(order):
        # a case's own spec (held to kvpress's set unless measured_only), then the specs it only measures
        checks = [(press, golden, case, None) for press, golden, case in items if not case.get("measured_only")]
        checks += [(press, golden, case, params) for press, golden, case in items
                   for params in case.get("measured_params", [])]
        specs = list(dict.fromkeys(spec_of(g, c, p) for _, g, c, p in checks))
        kept, ids, generated = trace(root, f"t{i}", text, ratio, specs, budget or None, decode_steps)
        for press, golden, case, params in checks:
            prompt = golden["prompts"][case["prompt"]]
            spec = spec_of(golden, case, params)
            strict = params is None
            label = "" if strict else f" [measured: {json.dumps(params)}]"
            check(ids == prompt["ids"], f"{press} {prompt['prompt_file']}: kvscope's prompt ids are the golden's")
            mask = kept.get(spec)
            check(mask is not None, f"{press} r={ratio}: the trace has the run of {spec}")
            if mask is None:
                continue
            if "generated_ids" in case:  # decoding: the same tokens, else the caches hold different entries
                same = generated.get(spec) == case["generated_ids"]
                if strict:
                    check(same, f"{press} {prompt['prompt_file']}: kvscope generates kvpress's tokens "
                                f"({generated.get(spec)} vs {case['generated_ids']})")
                elif not same:
                    label += " (other tokens)"
            compare(press, golden, case, mask, tally, label, strict)
    for (press, kwargs, ratio), t in sorted(tally.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or 0.0)):
        print(f"{press:20s}{'' if kwargs == '{}' else ' ' + kwargs} r={ratio}: {t['exact']} heads exact, {t['band']} differ only inside tie bands, "
              f"{t['stage_tie']} differ after a tie at a first stage, {t['wrong']} wrong")
    print(f"{len(runs)} traces in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    sys.exit(run_in_temp_folder(BINARY, "kvscope_kvpress_parity_", main))
