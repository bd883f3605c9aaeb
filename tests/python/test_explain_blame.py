"""`kvscope explain` (issue 35, Blame) against numbers computed here with numpy and h5py alone.

A trace of one prompt with a needle in the middle is recorded under the full cache and StreamingLLM at a budget far
smaller than the distance to the needle (--record qk=on). The evaluation's run attributes and evidence spans
(issue 35; docs/evaluation.md, "Why did it fail") are added with h5py, the evidence found by searching the decoded
prompt for the needle. Then, from the stored float16 queries and keys, the log-sum-exp and the kept masks:
  - the lost attention mass p = exp(score_scale * q.k - lse) summed over the evicted set, and the mass on the
    evidence, of every (layer, query head), equal `explain --json` to 1e-5;
  - the full run against itself has blame 0 and keeps all its evidence;
  - StreamingLLM keeps none of the needle at the first answer step, and explain reports every needle token evicted;
  - with appended question tokens the query and the kept-mask step move as the contract says;
  - a trace without a full run, without q/k, a missing run name and a damaged file are refused with messages that
    say so; a run without evidence still gets its blame and is told the evidence is unknown.
"""
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

from checks import check, run_in_temp_folder

BINARY = os.environ.get("KVSCOPE_BINARY")
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
NEEDLE = "7421"
PROMPT = FILLER * 6 + f"The special magic number is {NEEDLE}. " + FILLER * 6 + \
    "What is the special magic number? Answer: The special magic number is"
POLICY = "streaming_llm_b32"
TOLERANCE = 1e-5


def kvscope(*args):
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=1800)


def text(v):
    return v.decode("utf-8") if isinstance(v, (bytes, np.bytes_)) else v


def token_spans(strings, needle, first_only=False):
    """Token positions [first, last] of every occurrence of `needle` in the concatenated decoded tokens."""
    pieces = [s.encode("utf-8") for s in strings]
    starts = np.cumsum([0] + [len(p) for p in pieces])
    joined, target, spans, at = b"".join(pieces), needle.encode("utf-8"), [], 0
    while (i := joined.find(target, at)) >= 0:
        first = int(np.searchsorted(starts, i, side="right") - 1)
        last = int(np.searchsorted(starts, i + len(target) - 1, side="right") - 1)
        spans.append((first, last))
        at = i + len(target)
        if first_only:
            break
    return spans


def mark_as_evaluation(path, appended):
    """The eval_* attributes and evidence group `eval --traces` writes, on both runs; returns the spans."""
    with h5py.File(path, "r+") as f:
        strings = list(f[f"runs/{POLICY}/tokens/prompt_strings"].asstr()[()])
        spans = [(s, "needle value") for s in token_spans(strings, NEEDLE)] + \
                [(s, "needle key") for s in token_spans(strings, "special magic number", first_only=True)]
        for run, role in ((POLICY, "policy"), ("full", "full")):
            g = f[f"runs/{run}"]
            gen = list(g["tokens/generated_strings"].asstr()[()])
            n_prefill = int(np.sum(g["steps/phase"][()] == 0))
            g.attrs["eval_task"] = np.bytes_("needle_test")
            g.attrs["eval_sample"] = np.int64(3)
            g.attrs["eval_score"] = np.float64(1.0 if role == "full" else 0.0)
            g.attrs["eval_prediction"] = np.bytes_("".join(gen[appended:]).encode("utf-8"))
            g.attrs["eval_references"] = np.bytes_(json.dumps([NEEDLE]).encode("utf-8"))
            g.attrs["eval_role"] = np.bytes_(role)
            g.attrs["eval_first_answer_step"] = np.int64(n_prefill - 1 + appended)
            g.attrs["eval_prompt_tokens"] = np.int64(g.attrs["prompt_length"])
            g.attrs["eval_appended_tokens"] = np.int64(appended)
            if role == "policy":
                g.attrs["eval_reference_run"] = np.bytes_("full")
            if "evidence" in g:
                del g["evidence"]
            ev = g.create_group("evidence")
            ev.create_dataset("positions", data=np.array([s for s, _ in spans], dtype=np.int32).reshape(-1, 2))
            width = max(len(k.encode("utf-8")) for _, k in spans)
            ev.create_dataset("kinds", data=np.array([k.encode("utf-8") for _, k in spans], dtype=h5py.string_dtype("utf-8", width)))
    return spans


def expected_blame(path, policy, full, evidence):
    """Blame as issue 35's contract defines it, from the file alone (float64 throughout)."""
    with h5py.File(path, "r") as f:
        P, F = f[f"runs/{policy}"], f[f"runs/{full}"]
        appended = int(P.attrs["eval_appended_tokens"])
        prompt = int(P.attrs["prompt_length"])
        pa, fa = list(P["tokens/generated_ids"][()][appended:]), list(F["tokens/generated_ids"][()][appended:])
        t = next((i for i in range(min(len(pa), len(fa))) if pa[i] != fa[i]), None)
        if t is None:
            t = min(len(pa), len(fa)) if len(pa) != len(fa) else 0
        q = prompt + appended - 1 + t
        r = int(P.attrs["eval_first_answer_step"]) + max(0, t - 1)
        processed = int(P["steps/seq_len"][r])
        scale = float(F["qk"].attrs["score_scale"])
        n_layers, n_heads, n_kv = (int(P.attrs[k]) for k in ("n_layers", "n_heads", "n_kv_heads"))
        ev = np.zeros(q + 1, dtype=bool)
        ev[[p for p in evidence if p <= q]] = True
        heads = []
        for layer in range(n_layers):
            mask = P[f"kept_mask/layer_{layer:02d}"][()]  # [kv][position][step]
            qk = F[f"qk/layer_{layer:02d}"]
            queries = qk["queries"][q].astype(np.float64)       # [head][dim]
            keys = qk["keys"][: q + 1].astype(np.float64)       # [position][kv][dim]
            lse = qk["lse"][q].astype(np.float64)               # [head]
            for h in range(n_heads):
                g = h // (n_heads // n_kv)
                p = np.exp(scale * keys[:, g, :] @ queries[h] - lse[h])
                lost = mask[g, : q + 1, r] != 1
                lost[processed:] = False
                heads.append({"layer": layer, "head": h, "lost": p[lost].sum(), "evidence": p[ev].sum(),
                              "evidence_lost": p[lost & ev].sum(), "total": p.sum()})
        return {"t": t, "q": q, "r": r, "heads": heads}


def expected_layer_kept(path, run, evidence):
    with h5py.File(path, "r") as f:
        g = f[f"runs/{run}"]
        step = int(g.attrs["eval_first_answer_step"])
        return [float(np.mean(g[f"kept_mask/layer_{l:02d}"][:, evidence, step] == 1)) for l in range(int(g.attrs["n_layers"]))]


def explain_json(path, *extra):
    res = kvscope("explain", path, "--json", *extra)
    check(res.returncode == 0, f"explain --json {' '.join(extra)} exits 0 (got {res.returncode}: {res.stderr.strip()})")
    return json.loads(res.stdout) if res.returncode == 0 else None


def compare_blame(label, got, want):
    check(got["blame"]["divergence"] == want["t"], f"{label}: divergence {got['blame']['divergence']} == {want['t']}")
    check(got["blame"]["query"] == want["q"], f"{label}: query position {got['blame']['query']} == {want['q']}")
    check(got["blame"]["mask_step"] == want["r"], f"{label}: kept-mask step {got['blame']['mask_step']} == {want['r']}")
    heads = {(h["layer"], h["head"]): h for h in got["blame"]["heads"]}
    check(len(heads) == len(want["heads"]), f"{label}: explain reports every (layer, head) ({len(heads)} of {len(want['heads'])})")
    worst = 0.0
    for w in want["heads"]:
        g = heads.get((w["layer"], w["head"]))
        if g is None:
            continue
        for key, ours in (("lost_mass", "lost"), ("evidence_mass", "evidence"), ("evidence_lost_mass", "evidence_lost")):
            worst = max(worst, abs(g[key] - w[ours]))
    check(worst <= TOLERANCE, f"{label}: lost and evidence masses of every (layer, head) within {TOLERANCE} of numpy (worst {worst:.2e})")
    totals = np.array([w["total"] for w in want["heads"]])
    # float16 q and k move each score by up to ~2^-11 of its size, so a whole row sums to 1 only to about 1e-2.
    check(np.all(np.abs(totals - 1.0) < 1e-2), f"{label}: the full cache's rebuilt rows sum to 1 (worst {np.max(np.abs(totals - 1)):.2e})")
    top = sorted(want["heads"], key=lambda h: -h["lost"])[:5]
    got_top = [(h["layer"], h["head"]) for h in got["blame"]["largest"]]
    check(len(got_top) == 5 and all(abs(heads[k]["lost_mass"] - t["lost"]) <= TOLERANCE for k, t in zip(got_top, top)),
          f"{label}: the five largest lost masses are numpy's five largest")


def body(root):
    trace = os.path.join(root, "needle.h5")
    res = kvscope("trace", "--prompt", PROMPT, "--policy", "full", "--policy", "streaming_llm", "--budget", "32",
                  "--max-new-tokens", "6", "--record", "qk=on;size=64;similarity=off", "--out", trace, "--quiet")
    if res.returncode != 0:
        check(False, f"kvscope trace exits 0 (got {res.returncode}: {res.stderr.strip()})")
        return
    spans = mark_as_evaluation(trace, appended=0)
    evidence = sorted({p for (a, b), _ in spans for p in range(a, b + 1)})
    needle = sorted({p for (a, b), k in spans if k == "needle value" for p in range(a, b + 1)})
    check(len(needle) >= 1, f"the needle {NEEDLE} is found in the decoded prompt (positions {needle})")
    prompt_length = int(h5py.File(trace, "r")[f"runs/{POLICY}"].attrs["prompt_length"])
    check(32 < min(needle) < prompt_length - 32, f"the needle sits in the middle, beyond StreamingLLM's 32 tokens of either end")

    # The policy's run against the full cache.
    got = explain_json(trace)
    if got:
        check(got["run"] == POLICY and got["reference_run"] == "full", f"explain picks {POLICY} against full ({got['run']}, {got['reference_run']})")
        check(got["task"] == "needle_test" and got["sample"] == 3 and got["score"] == 0.0 and got["full_score"] == 1.0,
              "explain reports the task, sample and both scores")
        check(got["references"] == [NEEDLE], "explain reports the references")
        check([(e["first"], e["last"]) for e in got["evidence"]] == [s for s, _ in spans], "explain reports the evidence spans")
        value_text = "".join(e["text"] for e in got["evidence"] if e["kind"] == "needle value")
        check(NEEDLE in value_text, f"the needle value's text is the needle ({value_text!r})")
        compare_blame("streaming_llm", got, expected_blame(trace, POLICY, "full", evidence))
        layer_kept = expected_layer_kept(trace, POLICY, evidence)
        check(np.allclose(got["retention"]["layer_kept"], layer_kept, atol=1e-12), "retention by layer equals the kept masks'")
        needle_fate = [f for f in got["evidence_fate"] if f["position"] in needle]
        check(len(needle_fate) == len(needle) and all(f["kept"] == 0 and f["evicted"] == f["caches"] for f in needle_fate),
              "StreamingLLM holds no needle token in any cache; explain reports each evicted from every cache")
        needle_kept = expected_layer_kept(trace, POLICY, needle)
        check(max(needle_kept) == 0.0, f"the needle's tokens are kept in no layer at the first answer step ({max(needle_kept)})")
        check(got["blame"]["max_lost_mass"] > 0.0, f"StreamingLLM lost some of the full cache's attention ({got['blame']['max_lost_mass']})")

    # The full cache against itself: nothing lost, everything kept.
    got = explain_json(trace, "--run", "full")
    if got:
        check(got["reference_run"] == "full", "the full run is measured against itself")
        check(all(h["lost_mass"] == 0.0 for h in got["blame"]["heads"]), "the full cache against itself has blame 0 in every (layer, head)")
        check(got["retention"]["mean"] == 1.0 and min(got["retention"]["layer_kept"]) == 1.0, "the full cache keeps all its evidence")
        compare_blame("full", got, expected_blame(trace, "full", "full", evidence))

    # Appended question tokens (query-agnostic): the answer starts later, the query and the kept-mask row move.
    with h5py.File(trace, "r") as f:
        pa, fa = f[f"runs/{POLICY}/tokens/generated_ids"][()], f["runs/full/tokens/generated_ids"][()]
    shared = next((i for i in range(min(len(pa), len(fa))) if pa[i] != fa[i]), min(len(pa), len(fa)))
    appended = min(2, shared)
    check(appended >= 1, f"the runs share their first generated tokens, which stand in for an appended question ({shared})")
    if appended >= 1:
        appended_trace = os.path.join(root, "appended.h5")
        shutil.copy(trace, appended_trace)
        mark_as_evaluation(appended_trace, appended=appended)
        got = explain_json(appended_trace)
        if got:
            want = expected_blame(appended_trace, POLICY, "full", evidence)
            part = shared - appended if shared < min(len(pa), len(fa)) else 0
            check(want["t"] == part, f"with {appended} appended tokens the answers part at {part}")
            compare_blame("appended", got, want)

    # Refusals.
    no_full = os.path.join(root, "no_full.h5")
    shutil.copy(trace, no_full)
    with h5py.File(no_full, "r+") as f:
        del f["runs/full"]
        del f[f"runs/{POLICY}"].attrs["eval_reference_run"]
    res = kvscope("explain", no_full)
    check(res.returncode == 1 and "no full-cache run" in res.stderr, f"a trace without a full run is refused ({res.returncode}: {res.stderr.strip()})")
    no_qk = os.path.join(root, "no_qk.h5")
    shutil.copy(trace, no_qk)
    with h5py.File(no_qk, "r+") as f:
        del f["runs/full/qk"]
    res = kvscope("explain", no_qk)
    check(res.returncode == 1 and "holds no queries and keys" in res.stderr, f"a full run without q/k is refused ({res.returncode}: {res.stderr.strip()})")
    res = kvscope("explain", trace, "--run", "h2o_b32")
    check(res.returncode == 2 and "no run 'h2o_b32'" in res.stderr and POLICY in res.stderr,
          f"a run that does not exist is refused, naming the runs ({res.returncode}: {res.stderr.strip()})")
    damaged = os.path.join(root, "damaged.h5")
    with open(trace, "rb") as src, open(damaged, "wb") as dst:
        dst.write(src.read()[: os.path.getsize(trace) // 2])
    res = kvscope("explain", damaged)
    check(res.returncode == 1 and "damaged.h5" in res.stderr and "Traceback" not in res.stderr,
          f"a truncated trace is refused with a message naming it ({res.returncode}: {res.stderr.strip()})")
    no_evidence = os.path.join(root, "no_evidence.h5")
    shutil.copy(trace, no_evidence)
    with h5py.File(no_evidence, "r+") as f:
        del f[f"runs/{POLICY}/evidence"]
    res = kvscope("explain", no_evidence)
    check(res.returncode == 0 and "evidence: unknown" in res.stdout and "largest lost attention" in res.stdout,
          f"a run without evidence still gets its blame, the evidence said to be unknown ({res.returncode}: {res.stderr.strip()})")
    # The evidence figure (a GUI build: `figure` shares the window's renderer).
    png = os.path.join(root, "evidence.png")
    res = kvscope("figure", trace, "--view", "evidence", "--out", png, "--size", "900x500")
    if "built without the GUI" not in res.stderr:
        with open(png, "rb") if os.path.exists(png) else open(os.devnull, "rb") as f:
            signature = f.read(8)
        check(res.returncode == 0 and signature == b"\x89PNG\r\n\x1a\n", f"figure --view evidence writes a PNG ({res.returncode}: {res.stderr.strip()})")
        res = kvscope("figure", no_evidence, "--view", "evidence", "--out", os.path.join(root, "none.png"))
        check(res.returncode == 1 and "no evidence/ group" in res.stderr, f"figure --view evidence refuses a run without evidence ({res.stderr.strip()})")
    res = kvscope("explain", trace)
    check(res.returncode == 0 and "where the evidence went" in res.stdout and NEEDLE[0] in res.stdout,
          f"the text report shows where the evidence went ({res.returncode})")


if __name__ == "__main__":
    sys.exit(run_in_temp_folder(BINARY, "kvscope_explain_", body))
