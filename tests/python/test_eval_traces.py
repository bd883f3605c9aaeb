"""`kvscope eval needle --traces DIR` (issue 35): per-sample traces and evidence retention, checked with h5py alone.

The needle's tokens are found independently: a first run records the full cache's trace of the case
(--traces-for all, with no evidence: --test-evidence ';'), whose token strings are searched for the needle's value.
Then, with exactly those tokens given as the evidence (--test-evidence), so that the numbers below do not rest on
the generator's own spans (tests/python/test_evidence_spans.py checks those):
  - StreamingLLM with a budget far smaller than the distance from the needle (mid-prompt) to the end keeps none
    of it: evidence_kept 0, and the retention recomputed from the trace's kept masks at eval_first_answer_step
    equals the JSON's numbers (mean, least-kept layer, every (layer, KV head)); where each token first left
    equals the first event of its position in the events table;
  - the full cache keeps all of it (1.0 in every layer and KV head), never loses a token;
  - the attributes and evidence/ datasets are those docs/trace-format.md lists;
  - --traces-for failed keeps no file for a right answer (and leaves no temporary folder), and an existing
    trace file is refused without --force and left as it was.
"""
import hashlib
import json
import os
import subprocess
import sys

import h5py
import numpy as np

from checks import check, run_in_temp_folder

BINARY = os.environ.get("KVSCOPE_BINARY")
LENGTH, DEPTH, BUDGET = "512", "50", "64"


def eval_needle(folder, policy, budget, extra):
    cmd = [BINARY, "eval", "needle", "--lengths", LENGTH, "--depths", DEPTH, "--policy", policy, "--json",
           "--traces", os.path.join(folder, "traces"), *extra]
    if budget:
        cmd += ["--budget", budget]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1800)


def text(v):
    return v.decode("utf-8") if isinstance(v, (bytes, np.bytes_)) else v


def needle_span(trace_path, value):
    """First and last token positions of the needle's value in the recorded prompt (character offsets mapped to
    tokens through the token strings, which concatenate to the prompt)."""
    with h5py.File(trace_path, "r") as f:
        strings = [s for s in f["runs/full/tokens/prompt_strings"].asstr()[:]]
    starts, at = [], 0
    for s in strings:
        starts.append(at)
        at += len(s)
    prompt = "".join(strings)
    begin = prompt.find(value)
    assert begin >= 0 and prompt.find(value, begin + 1) < 0, "the value occurs once in the prompt"
    end = begin + len(value) - 1
    first = max(i for i, s in enumerate(starts) if s <= begin)
    last = max(i for i, s in enumerate(starts) if s <= end)
    return first, last


def retention_from_trace(run, positions):
    """kept[layer][kv_head] from the kept masks at the first answer token's step: the share of positions whose mask is 1."""
    step = int(run.attrs["eval_first_answer_step"])
    layers = int(run.attrs["n_layers"])
    kept = []
    for layer in range(layers):
        mask = run[f"kept_mask/layer_{layer:02d}"][:, :, step]  # [kv_head][position]
        kept.append([float(np.mean(mask[h, positions] == 1)) for h in range(mask.shape[0])])
    return np.array(kept)


def first_events(run, positions):
    """(step row, layer, kv_head, merged) of each position's first event, or None."""
    ev = run["events"][:]
    n_prefill = int(np.sum(run["steps/phase"][:] == 0))
    out = {}
    for e in ev:
        p = int(e["position"])
        if p in positions and p not in out:
            row = int(e["step"]) + (n_prefill if int(e["phase"]) == 1 else 0)
            out[p] = (row, int(e["layer"]), int(e["kv_head"]), bool(e["action"] == 1))
    return out


def body(folder):
    # 1. The case's prompt tokens, from the full cache's own trace.
    res = eval_needle(folder, "full", None, ["--traces-for", "all", "--test-evidence", ";"])
    check(res.returncode == 0, f"eval needle --traces-for all ran ({res.returncode}): {res.stderr[-400:]}")
    if res.returncode != 0:
        return
    record = json.loads(res.stdout)["cases"][0]
    path = os.path.join(folder, "traces", f"needle_{LENGTH}_{DEPTH}.h5")
    check(record["trace"] == path, f"the record names its trace ({record['trace']})")
    check(record["evidence_kept"] is None and record["evidence"] == [],
          "a sample without evidence reports null, not a kept share")
    first, last = needle_span(path, record["value"])
    n_prompt = None
    with h5py.File(path, "r") as f:
        check(list(f["runs"]) == ["full"], f"a full-cache evaluation's trace holds one run ({list(f['runs'])})")
        n_prompt = int(f["runs/full"].attrs["prompt_length"])
    check(0.3 * n_prompt < first < 0.7 * n_prompt, f"the needle ({first}-{last}) is mid-prompt ({n_prompt} tokens)")
    evidence = f"{first}-{last}:needle value"
    positions = list(range(first, last + 1))

    # 2. The full cache keeps every evidence token; a right answer keeps no trace with --traces-for failed.
    for name in os.listdir(os.path.join(folder, "traces")):
        os.remove(os.path.join(folder, "traces", name))
    res = eval_needle(folder, "full", None, ["--test-evidence", evidence])
    check(res.returncode == 0, f"eval needle full with evidence ran: {res.stderr[-400:]}")
    full = json.loads(res.stdout)
    rec = full["cases"][0]
    check(rec["evidence_kept"] == 1.0, f"full keeps all the evidence ({rec['evidence_kept']})")
    check(rec["evidence_kept_min_layer"]["kept"] == 1.0, "full's least-kept layer keeps it all")
    check(all(d["step"] is None for d in rec["evidence_first_left"]), "full never loses an evidence token")
    if rec["match"]:
        check(rec["trace"] is None, "--traces-for failed keeps no trace of a right answer")
        check(os.listdir(os.path.join(folder, "traces")) == [],
              f"nor any temporary file ({os.listdir(os.path.join(folder, 'traces'))})")

    # 3. StreamingLLM with a small budget loses the needle; the trace's kept masks say the same as the JSON.
    res = eval_needle(folder, "streaming_llm", BUDGET, ["--test-evidence", evidence, "--traces-for", "all"])
    check(res.returncode == 0, f"eval needle streaming_llm ran: {res.stderr[-400:]}")
    out = json.loads(res.stdout)
    rec = out["cases"][0]
    check(rec["evidence_kept"] == 0.0, f"StreamingLLM at {BUDGET} keeps none of a mid-prompt needle ({rec['evidence_kept']})")
    check(rec["evidence_mostly_lost"] is True, "and has lost it in at least half the layers")
    table = out["evidence_retention"]
    check(table["samples"] == 1 and table["correct_if"] == "score >= 0.5", f"the 2 x 2 counts the sample: {table}")
    cell = "lost_correct" if rec["match"] else "lost_wrong"
    check(table["cells"][cell]["count"] == 1, f"in the cell {cell}")
    with h5py.File(rec["trace"], "r") as f:
        runs = sorted(f["runs"])
        check(runs == ["full", "streaming_llm_b64"], f"the trace holds the policy's and the full cache's runs ({runs})")
        pol, ref = f["runs/streaming_llm_b64"], f["runs/full"]
        for run, role in ((pol, "policy"), (ref, "full")):
            a = {k: text(v) for k, v in run.attrs.items()}
            check(a.get("eval_task") == "needle" and a.get("eval_role") == role, f"{role} run: task and role ({a.get('eval_role')})")
            check(run.attrs["eval_sample"].dtype == np.int64 and run.attrs["eval_score"].dtype == np.float64,
                  f"{role} run: eval_sample int64, eval_score float64")
            check(json.loads(a["eval_references"]) == [rec["value"]], f"{role} run: references as a JSON list")
            check(int(a["eval_prompt_tokens"]) == n_prompt and int(a["eval_appended_tokens"]) == 0,
                  f"{role} run: prompt and appended tokens")
            pos = run["evidence/positions"]
            check(pos.dtype == np.int32 and pos.shape == (1, 2) and list(pos[0]) == [first, last],
                  f"{role} run: evidence/positions int32 [n][2] = {pos[:].tolist()}")
            check(list(run["evidence/kinds"].asstr()[:]) == ["needle value"], f"{role} run: evidence/kinds")
        check(text(pol.attrs["eval_prediction"]) == rec["answer"], "the policy run's prediction is the record's")
        check(text(pol.attrs["eval_reference_run"]) == "full", "the policy run names the full run as its reference")
        check("eval_reference_run" not in ref.attrs, "the full run has no reference")

        kept = retention_from_trace(pol, positions)
        stored = pol["evidence/kept"][:]
        check(np.array_equal(kept, stored), "evidence/kept equals the kept masks at the first answer step")
        check(abs(kept.mean() - rec["evidence_kept"]) < 1e-12, f"the JSON's evidence_kept is the masks' ({kept.mean()})")
        layer_kept = kept.mean(axis=1)
        check(int(np.argmin(layer_kept)) == rec["evidence_kept_min_layer"]["layer"]
              and abs(layer_kept.min() - rec["evidence_kept_min_layer"]["kept"]) < 1e-12,
              "the least-kept layer matches")
        full_kept = retention_from_trace(ref, positions)
        check(np.all(full_kept == 1.0) and np.all(ref["evidence/kept"][:] == 1.0),
              "the full run keeps every evidence token in every layer and KV head")

        events = first_events(pol, set(positions))
        left = {d["position"]: d for d in rec["evidence_first_left"]}
        check(sorted(left) == positions, "one first-left entry per evidence token")
        for p in positions:
            e, d = events.get(p), left[p]
            check(e is not None and (d["step"], d["layer"], d["kv_head"], d["merged"]) == e,
                  f"position {p} first left at {e} (events), the JSON says {d}")
        tok = pol["evidence/tokens"][:].tolist()
        check(tok == positions and pol["evidence/left_step"][:].tolist() == [left[p]["step"] for p in positions]
              and pol["evidence/left_layer"][:].tolist() == [left[p]["layer"] for p in positions],
              "evidence/tokens, left_step and left_layer are the JSON's")

    # 4. An existing trace is refused without --force and left as it was.
    with open(rec["trace"], "rb") as fh:
        before = hashlib.sha256(fh.read()).hexdigest()
    res = eval_needle(folder, "streaming_llm", BUDGET, ["--test-evidence", evidence, "--traces-for", "all"])
    check(res.returncode != 0 and "already exists" in res.stderr, f"an existing trace is refused: {res.stderr[-300:]}")
    with open(rec["trace"], "rb") as fh:
        check(hashlib.sha256(fh.read()).hexdigest() == before, "and left untouched")


if __name__ == "__main__":
    sys.exit(run_in_temp_folder(BINARY, "kvscope-eval-traces-", body))
