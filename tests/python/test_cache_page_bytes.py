"""`--cache-page N`: the physical bytes of a cache allocated in N-token pages per (layer, KV head), reported beside
the logical bytes (issue 37, proof "bytes"), equal a closed form computed here from the formats' definitions, the
kept counts and N:

- a fixed-row part (f32, f16, bf16, llama.cpp's q8_0/q4_0/q4_1 blocks): ceil(kept / N) pages of N rows, the row
  sizes from the formats' definitions (as test_quantized_cache_bytes.py);
- a KIVI part: its quantized store and its float32 residual paged apart: key pages hold N / G whole groups
  (D half scales, D half zero points and G code rows each), value pages N quantized rows (D / G half scales and
  zero points and a code row each), residual pages N float32 rows; the residual counts follow the append rule
  (docs/quantized_cache.md).

The paged peak (the most the pages ever held): a full cache's is its end; SnapKV's is, per layer, the whole
prompt in pages (it evicts a layer after that layer's prefill). Checked in `generate --json` (`cache.paged_bytes`,
`cache.layer_paged_bytes`, `paged_peak_bytes`, `layer_paged_peak_bytes`, and the logical
`cache.layer_entry_bytes`), `eval fidelity --json` (`metrics.cache_paged_bytes`, `cache_entry_bytes`), a sweep with
`--cache-page` (rows.csv and eval.h5 columns, a Pareto figure on paged bytes, a resume without it refused), and a
trace's run attributes (`cache_paged_bytes`, `layer_paged_bytes`, `cache_entry_bytes`, `layer_entry_bytes`). A KIVI
key page size that is no multiple of G is refused, naming the option and the group. The model's shape is read
from its GGUF header with the gguf package, not from kvscope.

Run by ctest with the project venv; KVSCOPE_BINARY points at the kvscope executable. Exits 77 (skipped) without
the default model.
"""
import csv
import json
import os
import shutil
import subprocess
import sys

import h5py

from checks import check, run_in_temp_folder
from test_quantized_cache_bytes import MODEL, NEW_TOKENS, PROMPT, model_shape, row_bytes

BINARY = os.environ.get("KVSCOPE_BINARY", "")
HALF = 2


def pages(count, per_page):
    return -(-count // per_page)


def fixed_head_bytes(kept, key_type, value_type, head_dim, n):
    """One (layer, KV head) with `kept` entries: logical and paged bytes."""
    row = row_bytes(key_type, head_dim) + row_bytes(value_type, head_dim)
    return kept * row, pages(kept, n) * n * row


def kivi_head_bytes(tokens, bits, group, residual, head_dim, n):
    """One (layer, KV head) of a full KIVI cache that was given `tokens` entries: logical and paged bytes."""
    codes, full = head_dim * bits // 8, 4 * head_dim
    key_residual = tokens if tokens < residual + group else residual + (tokens - residual) % group
    groups = (tokens - key_residual) // group
    group_bytes = 2 * HALF * head_dim + group * codes
    value_residual = min(tokens, residual)
    value_row = 2 * HALF * (head_dim // group) + codes
    logical = groups * group_bytes + key_residual * full + (tokens - value_residual) * value_row + value_residual * full
    per_page = n // group
    paged = (pages(groups, per_page) * per_page * group_bytes + pages(key_residual, n) * n * full +
             pages(tokens - value_residual, n) * n * value_row + pages(value_residual, n) * n * full)
    return logical, paged


def generate(args):
    res = subprocess.run([BINARY, "generate", "--json", "--prompt", PROMPT, "--max-new-tokens", str(NEW_TOKENS),
                          "--ignore-eos", *args], capture_output=True, text=True, timeout=600)
    return res, (json.loads(res.stdout) if res.returncode == 0 else None)


def all_checks(root):
    layers, kv_heads, head_dim = model_shape()
    # Fixed-row types, full cache and SnapKV (uneven kept counts across heads), pages that divide nothing.
    for key_type, value_type, n in (("f32", "f32", 16), ("f16", "f16", 7), ("q8_0", "q8_0", 16), ("q4_0", "q4_0", 5),
                                    ("q4_1", "q4_1", 64), ("q8_0", "q4_0", 3)):
        for policy in ("full", "snapkv"):
            label = f"{policy}, keys {key_type}, values {value_type}, pages of {n}"
            args = ["--policy", policy, "--cache-type-k", key_type, "--cache-type-v", value_type, "--cache-page", str(n)]
            if policy != "full":
                args += ["--budget", "40%"]
            res, record = generate(args)
            check(res.returncode == 0, f"{label}: generate exits 0 ({res.stderr.strip()[-300:]})")
            if not record:
                continue
            cache = record["cache"]
            expected_layers = [[fixed_head_bytes(k, key_type, value_type, head_dim, n) for k in heads]
                               for heads in cache["kept"]]
            logical = [sum(h[0] for h in layer) for layer in expected_layers]
            paged = [sum(h[1] for h in layer) for layer in expected_layers]
            check(cache["page_tokens"] == n, f"{label}: page_tokens {cache['page_tokens']}")
            check(cache["layer_entry_bytes"] == logical and sum(logical) == cache["entry_bytes"],
                  f"{label}: layer_entry_bytes {cache['layer_entry_bytes'][:3]}... == kept x row bytes {logical[:3]}...")
            check(cache["layer_paged_bytes"] == paged,
                  f"{label}: layer_paged_bytes {cache['layer_paged_bytes'][:3]}... == ceil(kept / {n}) x {n} x row "
                  f"bytes {paged[:3]}...")
            check(cache["paged_bytes"] == sum(paged), f"{label}: paged_bytes {cache['paged_bytes']} == {sum(paged)}")
            # The peak: a full cache only grows, so its peak is its end; SnapKV evicts a layer right after that
            # layer's prefill, so each layer's peak is the whole prompt in pages, and the whole cache's lies
            # between its end and the sum of those.
            prompt = len(record["prompt_tokens"])
            whole_prompt = kv_heads * fixed_head_bytes(prompt, key_type, value_type, head_dim, n)[1]
            if policy == "full":
                check(cache["layer_paged_peak_bytes"] == paged and cache["paged_peak_bytes"] == sum(paged),
                      f"{label}: the paged peak is the end ({cache['paged_peak_bytes']} == {sum(paged)})")
            else:
                check(cache["layer_paged_peak_bytes"] == [whole_prompt] * layers,
                      f"{label}: layer_paged_peak_bytes {cache['layer_paged_peak_bytes'][:3]}... == the {prompt}-token "
                      f"prompt in pages, {whole_prompt} per layer")
                check(max(sum(paged), whole_prompt) <= cache["paged_peak_bytes"] <= layers * whole_prompt,
                      f"{label}: paged_peak_bytes {cache['paged_peak_bytes']} lies between the end {sum(paged)} (and "
                      f"one layer's prompt, {whole_prompt}) and every layer's prompt, {layers * whole_prompt}")
            kept = [k for heads in cache["kept"] for k in heads]
            if any(k % n for k in kept):
                check(cache["paged_bytes"] > cache["entry_bytes"],
                      f"{label}: partly filled last pages cost more than the entries ({cache['paged_bytes']} > "
                      f"{cache['entry_bytes']})")
            else:
                check(cache["paged_bytes"] == cache["entry_bytes"], f"{label}: whole pages cost what the entries do")
    # Without --cache-page the record has the logical bytes only.
    res, record = generate(["--cache-type", "q8_0"])
    if record:
        check("paged_bytes" not in record["cache"] and "page_tokens" not in record["cache"],
              "without --cache-page no paged bytes are reported")
    # KIVI, full cache: residual and quantized stores paged apart.
    for spec, bits, group, residual, n in (("kivi2:group=8,residual=8", 2, 8, 8, 16),
                                           ("kivi4:group=32,residual=16", 4, 32, 16, 32),
                                           ("kivi2:group=8,residual=0", 2, 8, 0, 24)):
        label = f"{spec}, pages of {n}"
        res, record = generate(["--cache-type", spec, "--cache-page", str(n)])
        check(res.returncode == 0, f"{label}: generate exits 0 ({res.stderr.strip()[-300:]})")
        if not record:
            continue
        cache = record["cache"]
        tokens = len(record["prompt_tokens"]) + len(record["generated_tokens"]) - 1  # the last token is not cached
        logical, paged = kivi_head_bytes(tokens, bits, group, residual, head_dim, n)
        check(cache["entry_bytes"] == layers * kv_heads * logical,
              f"{label}: entry_bytes {cache['entry_bytes']} == {layers * kv_heads} x {logical}")
        check(cache["layer_paged_bytes"] == [kv_heads * paged] * layers and cache["paged_bytes"] == layers * kv_heads * paged,
              f"{label}: paged_bytes {cache['paged_bytes']} == {layers * kv_heads} heads x {paged} ({tokens} tokens)")
    # A KIVI key page must hold whole groups.
    res, _ = generate(["--cache-type", "kivi2", "--cache-page", "20"])
    check(res.returncode != 0 and "--cache-page 20" in res.stderr and "multiple of 32" in res.stderr,
          f"kivi2 with --cache-page 20 is refused, naming the group ({res.stderr.strip()[-300:]})")
    res, _ = generate(["--cache-page", "0"])
    check(res.returncode != 0 and "--cache-page" in res.stderr, f"--cache-page 0 is refused ({res.stderr.strip()[-200:]})")

    # eval fidelity: the full cache at q4_0 over the prompt and the teacher-forced continuation.
    n = 16
    res = subprocess.run([BINARY, "eval", "fidelity", "--prompt", PROMPT, "--policy", "full", "--max-new-tokens",
                          str(NEW_TOKENS), "--cache-type", "q4_0", "--cache-page", str(n), "--json"],
                         capture_output=True, text=True, timeout=600)
    check(res.returncode == 0, f"eval fidelity --cache-page exits 0 ({res.stderr.strip()[-300:]})")
    if res.returncode == 0:
        record = json.loads(res.stdout)
        metrics = record["metrics"]
        tokens = record["prompt_tokens"] + len(record["continuation_tokens"]) - 1
        logical, paged = fixed_head_bytes(tokens, "q4_0", "q4_0", head_dim, n)
        check(metrics["cache_page_tokens"] == n and metrics["cache_entry_bytes"] == layers * kv_heads * logical and
              metrics["cache_paged_bytes"] == layers * kv_heads * paged,
              f"eval: entry {metrics.get('cache_entry_bytes')} and paged {metrics.get('cache_paged_bytes')} bytes == "
              f"{layers * kv_heads} x ({logical}, {paged}) for {tokens} tokens in pages of {n}")
    res = subprocess.run([BINARY, "eval", "fidelity", "--prompt", PROMPT, "--policy", "full", "--max-new-tokens",
                          str(NEW_TOKENS), "--json"], capture_output=True, text=True, timeout=600)
    if res.returncode == 0:
        check("cache_paged_bytes" not in json.loads(res.stdout)["metrics"],
              "eval without --cache-page keeps its columns (no paged bytes)")

    # A sweep with --cache-page: the paged columns in rows.csv and eval.h5, the full cache's against the closed
    # form, a Pareto figure on paged bytes, and a resume without --cache-page refused.
    sweep_dir, n = os.path.join(root, "sweep"), 16
    grid = ["sweep", "--eval", "fidelity", "--policies", "full,snapkv", "--budgets", "40%", "--cache-types", "f16,q8_0",
            "--max-new-tokens", str(NEW_TOKENS), "--prompt", PROMPT, "--out", sweep_dir]
    res = subprocess.run([BINARY, *grid, "--cache-page", str(n)], capture_output=True, text=True, timeout=900)
    check(res.returncode == 0, f"sweep --cache-page exits 0 ({res.stderr.strip()[-300:]})")
    if res.returncode == 0:
        with open(os.path.join(sweep_dir, "grid.json")) as f:
            check(json.load(f).get("cache_page") == n, "grid.json records cache_page")
        with open(os.path.join(sweep_dir, "rows.csv")) as f:
            rows = list(csv.DictReader(f))
        check(len(rows) == 4 and all(r.get("cache_page_tokens") == str(n) for r in rows),
              f"rows.csv: four cells with cache_page_tokens {n} ({[r.get('cache_page_tokens') for r in rows]})")
        with h5py.File(os.path.join(sweep_dir, "eval.h5"), "r") as f:
            stored = {name: f["eval"][name][()] for name in ("cache_paged_bytes", "cache_paged_peak_bytes")
                      if name in f["eval"]}
        check(len(stored) == 2, f"eval.h5 holds cache_paged_bytes and cache_paged_peak_bytes ({sorted(stored)})")
        for i, r in enumerate(rows):
            label = f"sweep cell {r['policy']} @{r['cache_type']}"
            paged, peak = float(r["cache_paged_bytes"]), float(r["cache_paged_peak_bytes"])
            if len(stored) == 2:
                check(stored["cache_paged_bytes"][i] == paged and stored["cache_paged_peak_bytes"][i] == peak,
                      f"{label}: eval.h5 and rows.csv agree")
            if r["policy"] == "full":
                # the fidelity run: the prompt, then the continuation teacher-forced (its last token not cached)
                ref = subprocess.run([BINARY, "eval", "fidelity", "--prompt", PROMPT, "--policy", "full",
                                      "--max-new-tokens", str(NEW_TOKENS), "--json"], capture_output=True, text=True,
                                     timeout=600)
                if ref.returncode == 0:
                    record = json.loads(ref.stdout)
                    tokens = record["prompt_tokens"] + len(record["continuation_tokens"]) - 1
                    want = layers * kv_heads * fixed_head_bytes(tokens, r["cache_type"], r["cache_type"], head_dim, n)[1]
                    check(paged == want and peak == want,
                          f"{label}: paged {paged} and paged peak {peak} == {want} ({tokens} tokens in pages of {n})")
            else:
                check(peak > paged, f"{label}: SnapKV's paged peak {peak} (the prompt before it evicts) > its end {paged}")
        svg = os.path.join(root, "paged_pareto.svg")
        # from the finished sweep's eval.h5 (which holds /eval/summary beside the rows)
        res = subprocess.run([BINARY, "figure", os.path.join(sweep_dir, "eval.h5"), "--view", "pareto", "--bytes",
                              "cache_paged_peak_bytes",
                              "--out", svg], capture_output=True, text=True, timeout=300)
        check(res.returncode == 0 and "paged peak cache bytes" in open(svg).read(),
              f"figure --view pareto --bytes cache_paged_peak_bytes draws the paged peaks ({res.stderr.strip()[-300:]})")
        res = subprocess.run([BINARY, *grid], capture_output=True, text=True, timeout=300)
        check(res.returncode != 0 and "cache_page" in res.stderr,
              f"resuming a paged sweep without --cache-page is refused, naming it ({res.stderr.strip()[-300:]})")

    # A trace: the run's attributes, per layer too.
    out = os.path.join(root, "paged.h5")
    n = 32
    res = subprocess.run([BINARY, "trace", "--prompt", PROMPT, "--max-new-tokens", str(NEW_TOKENS), "--ignore-eos",
                          "--cache-type", "kivi4:group=32,residual=16", "--cache-page", str(n), "--out", out],
                         capture_output=True, text=True, timeout=600)
    check(res.returncode == 0, f"trace --cache-page exits 0 ({res.stderr.strip()[-300:]})")
    if res.returncode == 0:
        with h5py.File(out, "r") as f:
            runs = list(f["runs"])
            attrs = {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in f["runs"][runs[0]].attrs.items()}
        _, tokens_record = generate(["--cache-type", "kivi4:group=32,residual=16"])
        if tokens_record:
            tokens = len(tokens_record["prompt_tokens"]) + len(tokens_record["generated_tokens"]) - 1
            logical, paged = kivi_head_bytes(tokens, 4, 32, 16, head_dim, n)
            check(attrs.get("cache_page_tokens") == str(n), f"trace: cache_page_tokens {attrs.get('cache_page_tokens')}")
            check(attrs.get("cache_entry_bytes") == str(layers * kv_heads * logical) and
                  attrs.get("layer_entry_bytes") == ",".join([str(kv_heads * logical)] * layers),
                  f"trace: cache_entry_bytes {attrs.get('cache_entry_bytes')} == {layers * kv_heads * logical}, per layer")
            check(attrs.get("cache_paged_bytes") == str(layers * kv_heads * paged) and
                  attrs.get("layer_paged_bytes") == ",".join([str(kv_heads * paged)] * layers),
                  f"trace: cache_paged_bytes {attrs.get('cache_paged_bytes')} == {layers * kv_heads * paged}, per layer")

    window_checks(root, layers, kv_heads, head_dim)


def window_checks(root, layers, kv_heads, head_dim):
    """The window's own runs with a page size (the Set-up form's *cache page*, a script's `cache-page N`): SnapKV at
    40 % with a q8_0 cache and its full-cache baseline, run in the window and saved (the trace is the runs' record
    the Summary reads), carry the paged bytes: equal to generate's for the same run and to the closed form of its
    kept counts. A page size the cache type cannot take is refused by the script, naming it."""
    if shutil.which("xvfb-run") is None:
        print("skip the window's part: xvfb-run not installed")
        return
    n, saved = 16, os.path.join(root, "window.h5")
    script = os.path.join(root, "window.kvs")
    with open(script, "w") as f:
        f.write(f"frames 2\nprompt {PROMPT}\ntokens {NEW_TOKENS}\npolicy snapkv\nbudget 40%\ncache-type q8_0\n"
                f"cache-page {n}\nrun\nwait 600\nsave {saved}\nquit\n")
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    res = subprocess.run(["xvfb-run", "-a", "-s", "-screen 0 1280x800x24", BINARY, "gui", "--no-run", "--width",
                          "1280", "--height", "800", "--script", script], capture_output=True, text=True, timeout=600,
                         env=env)
    check(res.returncode == 0, f"the window's paged runs exit 0 ({res.stderr.strip()[-400:]})")
    if res.returncode != 0:
        return
    with h5py.File(saved, "r") as f:
        runs = {name: {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in f["runs"][name].attrs.items()}
                for name in f["runs"]}
    check(set(runs) == {"snapkv_b40pct_q8_0", "full"}, f"the window saved its two runs ({sorted(runs)})")
    # The same runs from the command line (the window's runs stop at the end of generation, as generate does
    # without --ignore-eos): their kept counts give the closed form.
    for name, args, cache_type in (("snapkv_b40pct_q8_0", ["--policy", "snapkv", "--budget", "40%", "--cache-type", "q8_0"], "q8_0"),
                                   ("full", ["--policy", "full"], "f32")):
        attrs = runs.get(name, {})
        res = subprocess.run([BINARY, "generate", "--json", "--prompt", PROMPT, "--max-new-tokens", str(NEW_TOKENS),
                              "--cache-page", str(n), *args], capture_output=True, text=True, timeout=600)
        check(res.returncode == 0, f"generate for {name} exits 0 ({res.stderr.strip()[-300:]})")
        if res.returncode != 0:
            continue
        cache = json.loads(res.stdout)["cache"]
        heads = [[fixed_head_bytes(k, cache_type, cache_type, head_dim, n) for k in layer] for layer in cache["kept"]]
        logical = [sum(h[0] for h in layer) for layer in heads]
        paged = [sum(h[1] for h in layer) for layer in heads]
        label = f"the window's {name} in pages of {n}"
        check(attrs.get("cache_page_tokens") == str(n), f"{label}: cache_page_tokens {attrs.get('cache_page_tokens')}")
        check(attrs.get("cache_paged_bytes") == str(sum(paged)) == str(cache["paged_bytes"]),
              f"{label}: cache_paged_bytes {attrs.get('cache_paged_bytes')} == generate's {cache['paged_bytes']} == "
              f"ceil(kept / {n}) x {n} x row bytes, {sum(paged)}")
        check(attrs.get("layer_paged_bytes") == ",".join(map(str, paged)), f"{label}: layer_paged_bytes per layer")
        check(attrs.get("cache_entry_bytes") == str(sum(logical)),
              f"{label}: cache_entry_bytes {attrs.get('cache_entry_bytes')} == kept x row bytes, {sum(logical)}")
        check(attrs.get("cache_paged_peak_bytes") == str(cache["paged_peak_bytes"]),
              f"{label}: cache_paged_peak_bytes {attrs.get('cache_paged_peak_bytes')} == generate's "
              f"{cache['paged_peak_bytes']}")
    with open(script, "w") as f:
        f.write("cache-type kivi2\ncache-page 20\nquit\n")
    res = subprocess.run(["xvfb-run", "-a", "-s", "-screen 0 1280x800x24", BINARY, "gui", "--no-run", "--script", script],
                         capture_output=True, text=True, timeout=300, env=env)
    check(res.returncode == 1 and "cache-page" in res.stderr and "--cache-page 20" in res.stderr and
          "multiple of 32" in res.stderr,
          f"the window refuses pages of 20 for kivi2, naming the group ({res.stderr.strip()[-300:]})")


if __name__ == "__main__":
    if not os.path.exists(MODEL):
        print(f"default model {MODEL} missing; run make")
        sys.exit(77)
    sys.exit(run_in_temp_folder(BINARY, "kvscope_cache_page_", all_checks))
