"""Reads a trace written by `kvscope trace` with h5py, independently of the C++ reader, and checks the
layout docs/trace-format.md promises: groups, shapes, dtypes (float16 maps), attributes, and that the
events table and the kept mask tell the same story.

Run by ctest with the project venv; KVSCOPE_BINARY points at the kvscope executable. Exits non-zero on
any failure and prints one line per check.
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

from checks import FAILURES, check, passed


def run_trace(out, policies, budget, extra=()):
    binary = os.environ.get("KVSCOPE_BINARY")
    if not binary or not os.path.exists(binary):
        print(f"KVSCOPE_BINARY is not set to an executable (got {binary!r})")
        sys.exit(2)
    cmd = [binary, "trace", "--out", out, "--budget", budget, "--max-new-tokens", "12", "--quiet",
           "--prompt", PROMPT, *extra]
    for p in policies:
        cmd += ["--policy", p]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if res.returncode != 0:
        print(f"kvscope trace failed ({res.returncode}):\n{res.stderr}")
        sys.exit(1)
    return res


def available_policies():
    binary = os.environ["KVSCOPE_BINARY"]
    res = subprocess.run([binary, "policies"], capture_output=True, text=True)
    names = res.stdout if res.returncode == 0 else ""
    return [p for p in ("h2o", "kvmerger") if p in names]


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


PROMPT = ("In the old harbour town the fishermen mended their nets every morning while the gulls argued over "
          "scraps. The lighthouse keeper, who had not left his tower in eleven years, counted the boats as they "
          "went out and again as they came back. One evening a boat did not return. The keeper lit every lamp. "
          "Question: what did the keeper do when a boat did not return? Answer:")


def text_attrs(obj):
    """Attributes with strings as str: kvscope writes fixed-length strings, which h5py returns as bytes."""
    return {k: v.decode("utf-8") if isinstance(v, (bytes, np.bytes_)) else v for k, v in obj.attrs.items()}


def string_objects(f):
    """(path, h5py type id) of every string attribute and string dataset in the file."""
    found = []

    def visit(name, obj):
        for key in obj.attrs:
            t = obj.attrs.get_id(key).get_type()
            if isinstance(t, h5py.h5t.TypeStringID):
                found.append((f"{name}@{key}", t))
        if isinstance(obj, h5py.Dataset) and isinstance(obj.id.get_type(), h5py.h5t.TypeStringID):
            found.append((name, obj.id.get_type()))

    visit("/", f)
    f.visititems(visit)
    return found


def make_vlen_copy(src, dst):
    """A copy of src with every string attribute and string dataset rewritten as h5py's default variable-length
    strings: the layout of traces written before kvscope switched to fixed-length strings."""
    import shutil
    shutil.copy(src, dst)
    with h5py.File(dst, "r+") as f:
        def rewrite(name, obj):
            for key, value in list(text_attrs(obj).items()):
                if isinstance(value, str):
                    del obj.attrs[key]
                    obj.attrs[key] = value  # h5py writes a Python str as a variable-length UTF-8 string
            if isinstance(obj, h5py.Dataset) and obj.dtype.kind == "S":
                values = [v.decode("utf-8") for v in obj[()]]
                parent, leaf = obj.parent, name.rsplit("/", 1)[-1]
                del parent[leaf]
                parent.create_dataset(leaf, data=values, dtype=h5py.string_dtype())
        rewrite("/", f)
        f.visititems(rewrite)


def check_old_vlen_traces_read(binary, out, tmp):
    old = os.path.join(tmp, "vlen.h5")
    make_vlen_copy(out, old)
    with h5py.File(old, "r") as f:
        vlen = [p for p, t in string_objects(f) if t.is_variable_str()]
        check(len(vlen) > 20, f"the copy holds variable-length strings ({len(vlen)})")
        want_root = text_attrs(f)
        want_runs = {n: text_attrs(f["runs"][n]) for n in f["runs"]}
    res = subprocess.run([binary, "inspect", "--json", old], capture_output=True, text=True)
    check(res.returncode == 0, f"kvscope inspect reads a variable-length-string trace ({res.stderr.strip()[-300:]})")
    if res.returncode != 0:
        return
    got = json.loads(res.stdout)
    check(got["attributes"]["format"] == want_root["format"] and got["attributes"]["created_by"] == want_root["created_by"],
          "root string attributes read back from variable-length strings")
    for run in got["runs"]:
        want = {k: v for k, v in want_runs[run["name"]].items() if isinstance(v, str)}
        same = all(run["attributes"].get(k) == v for k, v in want.items())
        check(same and len(want) > 10, f"{run['name']}: {len(want)} variable-length string attributes read back")
        check(run["datasets"]["tokens/prompt_strings"]["dtype"] == "string", f"{run['name']}: prompt_strings is a string dataset")
    png = os.path.join(tmp, "vlen.png")
    res = subprocess.run([binary, "figure", old, "--view", "attention", "--out", png, "--size", "320x240"],
                         capture_output=True, text=True)
    check(res.returncode == 0 and os.path.getsize(png) > 0, f"kvscope figure reads the whole variable-length-string trace ({res.stderr.strip()[-300:]})")


def check_run(f, name, policy, budget_attr):
    r = f["runs"][name]
    a = text_attrs(r)
    for key in ("model", "model_sha256", "policy", "policy_params", "budget", "prompt", "kvscope_version",
                "git_commit", "start_time", "host", "stop_reason", "record_options"):
        check(key in a, f"{name}: attribute {key} present")
    check(a["complete"] == 1, f"{name}: complete == 1")
    check(a["policy"] == policy, f"{name}: policy attribute is {policy} (got {a.get('policy')})")
    check(a["budget"] == budget_attr, f"{name}: budget attribute is {budget_attr!r} (got {a.get('budget')!r})")
    check(len(a["model_sha256"]) == 64, f"{name}: model_sha256 is a hex digest")
    check(a["model_sha256"] == file_sha256(a["model"]), f"{name}: model_sha256 equals hashlib's digest of the model file")
    check(a["model_architecture"] == "llama", f"{name}: model_architecture is llama (got {a.get('model_architecture')!r})")
    sizes = json.loads(a["model_config"])
    check(sizes["n_layers"] == int(a["n_layers"]) and sizes["vocab_size"] == 49152 and sizes["dim"] == 576,
          f"{name}: model_config holds the model's sizes (got {sizes})")
    check(a["tokenizer"].startswith("gpt2") and "49152 tokens" in a["tokenizer"],
          f"{name}: tokenizer describes the GGUF tokenizer (got {a.get('tokenizer')!r})")
    check(isinstance(json.loads(a["policy_params"]), dict), f"{name}: policy_params is a JSON object")
    check(a["source"] == "kvscope trace", f"{name}: source is kvscope trace")
    L, H, KV, P = int(a["n_layers"]), int(a["n_heads"]), int(a["n_kv_heads"]), int(a["prompt_length"])
    check((L, H, KV) == (30, 9, 3), f"{name}: SmolLM2 shape 30 layers, 9 heads, 3 kv heads (got {L}, {H}, {KV})")
    maxpos = int(a["max_positions"])
    check(maxpos == P + 12, f"{name}: max_positions = prompt + max new tokens")

    for g in ("tokens", "attention", "similarity/keys", "similarity/values", "stats", "steps", "kept_mask",
              "decode_attention"):
        check(g in r, f"{name}: group {g}")
    check(r["tokens/prompt_ids"].shape == (P,), f"{name}: prompt_ids shape")
    check(r["tokens/prompt_ids"].dtype == np.int32, f"{name}: prompt_ids int32")
    strings = r["tokens/prompt_strings"].asstr()[()]
    check(len(strings) == P and "In the old harbour" in "".join(strings),
          f"{name}: prompt strings decode to the prompt")
    n_gen = r["tokens/generated_ids"].shape[0]
    check(1 <= n_gen <= 12, f"{name}: 1..12 generated tokens (got {n_gen})")
    check(r["tokens/logprobs"].shape == (n_gen,) and np.all(r["tokens/logprobs"][()] <= 0), f"{name}: logprobs <= 0")

    att = r["attention/layer_00/head_00"]
    check(att.dtype == np.float16, f"{name}: attention maps are float16 (got {att.dtype})")
    check(att.shape == (P, P), f"{name}: attention map {P} x {P} (short prompt, full resolution)")
    check(att.compression == "gzip" and att.shuffle, f"{name}: attention map is gzip + shuffle")
    check([d.label for d in att.dims] == ["query", "key"], f"{name}: attention dims labelled")
    check(text_attrs(att)["units"] == "probability", f"{name}: attention units")
    m = att[()].astype(np.float64)
    check(np.allclose(m.sum(axis=1), 1.0, atol=5e-3), f"{name}: attention rows sum to 1")
    check(np.all(np.triu(m, 1) == 0), f"{name}: attention is causal")
    check(len(r["attention"]) == 30 and len(r["attention/layer_29"]) == 9, f"{name}: 30 layers x 9 heads of maps")

    ks = r["similarity/keys/layer_03/kv_head_01"]
    check(ks.dtype == np.float16 and ks.shape == (P, P), f"{name}: key similarity float16 {P} x {P}")
    check(text_attrs(ks)["stored"] == "lower_triangle", f"{name}: similarity stored as its lower triangle")
    km = ks[()].astype(np.float64)
    check(np.all(np.triu(km, 1) == 0), f"{name}: similarity upper triangle is empty")
    check(np.allclose(np.diag(km), 1.0, atol=2e-3), f"{name}: key similarity diagonal is 1")
    check(np.all(np.abs(km) <= 1.0 + 1e-3), f"{name}: cosine similarity within [-1, 1]")
    check(len(r["similarity/values"]) == 30, f"{name}: value similarity for every layer")

    for s in ("cake_window_entropy", "cake_column_variance", "d2o_colsum_variance", "mean_row_entropy"):
        check(r["stats"][s].shape == (L, H) and r["stats"][s].dtype == np.float64, f"{name}: stats/{s} [{L}][{H}]")
        check("definition" in r["stats"][s].attrs, f"{name}: stats/{s} has a definition")
    for s in ("cake_layer_entropy", "cake_layer_variance", "d2o_layer_variance"):
        check(r["stats"][s].shape == (L,), f"{name}: stats/{s} [{L}]")
    check(np.all(r["stats/cake_window_entropy"][()] > 0), f"{name}: CAKE entropy > 0 with a prompt longer than 32")

    steps = r["steps/step"].shape[0]
    phases = r["steps/phase"][()]
    check(steps >= 1 and phases[-1] in (0, 1), f"{name}: steps recorded")
    n_prefill = int(np.sum(phases == 0))
    check(steps == n_prefill + (n_gen - 1), f"{name}: steps = prefill blocks + generated - 1 ({steps})")
    dec = r["decode_attention/layer_10"]
    check(dec.dtype == np.float16 and dec.shape == (steps - n_prefill, H, maxpos),
          f"{name}: decode attention [{steps - n_prefill}][{H}][{maxpos}] float16 (got {dec.shape})")
    if dec.shape[0]:
        check(np.allclose(dec[()].astype(np.float64).sum(axis=2), 1.0, atol=2e-2), f"{name}: decode rows sum to 1")

    # The events table and the kept mask must agree: each event is the moment its entry leaves.
    events = r["events"][()]
    check(h5py.check_enum_dtype(r["events"].dtype["action"]) == {"evicted": 0, "merged": 1}, f"{name}: action enum")
    masks = [r[f"kept_mask/layer_{l:02d}"][()] for l in range(L)]
    check(all(mk.shape == (KV, maxpos, steps) and mk.dtype == np.uint8 for mk in masks),
          f"{name}: kept mask [{KV}][{maxpos}][{steps}] uint8")
    seq_len = r["steps/seq_len"][()]
    bad = 0
    seen_before = 0
    for e in events:
        mk = masks[e["layer"]]
        want = 2 if e["action"] == 1 else 0
        row = int(e["step"]) if e["phase"] == 0 else n_prefill + int(e["step"])  # (phase, step) -> steps row
        if mk[e["kv_head"], e["position"], row] != want:
            bad += 1
        # Entries that arrived in the same prefill block they left in were never marked kept.
        if row > 0 and e["position"] < seq_len[row - 1]:
            seen_before += 1
            if mk[e["kv_head"], e["position"], row - 1] != 1:
                bad += 1
    check(bad == 0, f"{name}: every event matches a 1 -> 0/2 transition of the kept mask ({bad} mismatches)")
    # ... and every 1 -> 0/2 transition has its event.
    transitions = sum(int(((mk[:, :, :-1] == 1) & (mk[:, :, 1:] != 1)).sum()) for mk in masks)
    check(transitions == seen_before, f"{name}: {transitions} kept-mask transitions vs {seen_before} events")
    entries = r["steps/cache_entries"][()]
    kept_last = sum(int((mk[:, :, -1] == 1).sum()) for mk in masks)
    check(kept_last == entries[-1], f"{name}: kept mask at the last step counts the cache entries ({kept_last} vs {entries[-1]})")
    return events


def main():
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run.h5")
        extra_policies = available_policies()
        policies = ["full"] + extra_policies[:1]
        budget = "24"
        run_trace(out, policies, budget)
        with h5py.File(out, "r") as f:
            check(text_attrs(f)["format"] == "kvscope-trace", "root attribute format = kvscope-trace")
            strings = string_objects(f)
            # Dimension labels stay variable-length (H5DSget_label reads only those); kvscope never reads them.
            vlen = [p for p, t in strings if t.is_variable_str() and not p.endswith("@DIMENSION_LABELS")]
            check(len(strings) > 50 and not vlen,
                  f"all {len(strings)} string attributes and datasets but dimension labels are fixed-length "
                  f"(variable: {vlen[:5]})")
            check(int(f.attrs["format_version"]) == 1, "format_version 1")
            expected = ["full"] + [f"{p}_b{budget}" for p in extra_policies[:1]]
            check(sorted(f["runs"].keys()) == sorted(expected), f"runs {expected} (got {list(f['runs'].keys())})")
            full_events = check_run(f, "full", "full", "")
            check(len(full_events) == 0, "the full policy evicts nothing")
            for p in extra_policies[:1]:
                events = check_run(f, f"{p}_b{budget}", p, budget)
                check(len(events) > 0, f"{p} at budget {budget} evicts or merges something")
                check("budgets" in f["runs"][f"{p}_b{budget}"], f"{p}: budgets group")
                attrs = f["runs"][f"{p}_b{budget}"].attrs
                check(isinstance(json.loads(attrs["policy_warnings"]), list), f"{p}: policy_warnings is a JSON list")
                settings = json.loads(attrs["effective_settings"])
                if p == "h2o":
                    # The parameters as given, the protocol switches as used, and a uniform budget of 24 tokens
                    # on each of SmolLM2's 30 layers.
                    check(settings.get("recent_ratio") == "0.5", f"h2o: effective recent_ratio (got {settings})")
                    check(settings.get("block") == 0 and settings.get("decode_evict") is True and
                          settings.get("trim") == "after_output", f"h2o: protocol switches (got {settings})")
                    check(settings.get("layer_budgets") == [24] * 30, f"h2o: layer budgets (got {settings})")

        # A second file exercises the recording switches: pooling and NMSE.
        out2 = os.path.join(tmp, "pooled.h5")
        policy = (extra_policies or ["full"])[0]
        run_trace(out2, [policy], "24", ["--record", "size=16;pooling=mean;layers=2;heads=0", "--record-nmse"])
        with h5py.File(out2, "r") as f:
            name = list(f["runs"].keys())[0]
            r = f["runs"][name]
            P = int(r.attrs["prompt_length"])
            pooled = r["attention/layer_00/head_00"]
            check(pooled.shape[0] <= 16 and text_attrs(pooled)["pooling"] == "mean", "size=16 pools maps to <= 16")
            full = r["attention/layer_02/head_00"]
            check(full.shape == (P, P), "layers=2;heads=0 keeps that map at full resolution")
            if policy != "full":
                check("nmse" in r and r["nmse"].shape[1] == 30, "nmse [decode steps][30]")
                check(np.all(r["nmse"][()] >= 0), "nmse >= 0")

        # Exact attention (--record qk=on): the qk/ datasets rebuild the recorded full-resolution maps by the rule
        # docs/trace-format.md states, computed here with numpy alone (prefill rows and decode rows, which attend
        # over the kept mask of the previous step plus their own position).
        out3 = os.path.join(tmp, "qk.h5")
        run_trace(out3, ["h2o"], "24", ["--record", "qk=on;layers=2"])
        with h5py.File(out3, "r") as f:
            r = f["runs"]["h2o_b24"]
            P, H, G = int(r.attrs["prompt_length"]), int(r.attrs["n_heads"]), int(r.attrs["n_kv_heads"])
            qk = r["qk/layer_02"]
            scale = float(r["qk"].attrs["score_scale"])
            n = qk["queries"].shape[0]
            check(qk["queries"].dtype == np.float16 and qk["keys"].shape == (n, G, qk["queries"].shape[2]) and
                  qk["lse"].shape == (n, H), "qk/layer_02: float16 queries and keys, float32 lse, one row per position")
            check(n == P + 11, f"qk rows = prompt + fed decode tokens ({n} vs {P} + 11)")
            kept = r["kept_mask/layer_02"][()]  # [kv_head][position][step]
            worst = 0.0
            for h in (0, 4, 8):
                g = h // (H // G)
                q = qk["queries"][:, h, :].astype(np.float64)
                k = qk["keys"][:, g, :].astype(np.float64)
                lse = qk["lse"][:, h].astype(np.float64)
                p = np.exp(scale * q @ k.T - lse[:, None])
                bound = np.expm1(scale * np.abs(q) @ np.abs(k).T * 2.0 ** -10 + 1e-5)
                visible = np.tril(np.ones((n, n), dtype=bool))
                for s in range(n - P):  # decode row P+s saw the cache kept at the end of step row s (prefill is row 0)
                    visible[P + s, :P + s] &= kept[g, :P + s, s] == 1
                p = np.where(visible, p, 0.0)
                recorded = np.zeros((n, n))
                recorded[:P, :P] = r[f"attention/layer_02/head_{h:02d}"][()]
                recorded[P:, :] = r["decode_attention/layer_02"][:, h, :n]
                tol = np.maximum(p, recorded) * (bound + 2.0 ** -11) + 6e-8
                worst = max(worst, float(np.max(np.abs(p - recorded) - tol)))
            check(worst <= 0.0, f"numpy exp(scale q.k - lse) over the kept keys equals the recorded maps (worst excess {worst:.3g})")

        # Refuses to overwrite without --force.
        binary = os.environ["KVSCOPE_BINARY"]
        res = subprocess.run([binary, "trace", "--out", out, "--prompt", "hi", "--max-new-tokens", "1", "--quiet"],
                             capture_output=True, text=True)
        check(res.returncode != 0 and "already exists" in res.stderr, "an existing file is refused without --force")
        res = subprocess.run([binary, "inspect", out], capture_output=True, text=True)
        check(res.returncode == 0 and "events" in res.stdout, "kvscope inspect summarises the file")
        check_old_vlen_traces_read(binary, out, tmp)

    print(f"test_trace_h5py: {passed()} checks passed, {len(FAILURES)} failed")
    if FAILURES:
        for f in FAILURES:
            print(f"  failed: {f}")
        sys.exit(1)


if __name__ == "__main__":
    main()
