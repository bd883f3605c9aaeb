"""Quantize or evict? (issue 37): cache types as a sweep grid dimension and the Pareto view of the answer.

- `kvscope sweep --cache-types f32,q8_0,kivi2:...` runs every (policy, cache type, budget) cell: grid.json records
  the types, rows.csv and eval.h5 (read with h5py) carry each row's type, the type's bytes show in the row
  (a q8_0 full cache's peak is 34/128 of the f32 one's: the same entries, 8.5 bits a value instead of 32), and a
  sweep run again resumes (runs only a cell whose line was removed, with the same numbers).
- `kvscope figure SWEEP --view pareto` draws quality against the cells' real bytes and writes the front beside
  the picture; the front computed here from rows.csv (mean per cell over prompts; a cell is on the front when no
  other cell has as few bytes or fewer and as good a quality or better, one of them strictly) equals the one it
  marks, and the SVG draws one curve per (policy, cache type).
- `eval ruler --cache-type` runs the cell in that type and names it in its record.
- Traces record per layer the relative NMSE of the stored keys and values against float32 (q4_0 above q8_0,
  above 0), and under a merging policy the error re-quantizing the merges added; with --record-nmse the
  attention output's error against a float32 shadow cache, present for a full cache in a quantized type.

Run by ctest with the project venv; KVSCOPE_BINARY points at the kvscope executable. Exits 77 without the model.
"""
import csv
import json
import os
import subprocess
import sys

import h5py

from checks import check, run_in_temp_folder

BINARY = os.environ.get("KVSCOPE_BINARY", "")
MODEL = os.path.join(os.environ.get("KVSCOPE_SOURCE_DIR", "."), ".deps", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
PROMPT = ("The old ferry left the harbour at eleven. The deckhand hooked the chain, the engines deepened their "
          "note, and the lights of the town slid away behind the breakwater while the passengers slept.")
TYPES = ["f32", "q8_0", "kivi2:group=32,residual=16"]
GRID = ["--eval", "fidelity", "--policies", "full,snapkv", "--budgets", "50%,25%", "--cache-types", ",".join(TYPES),
        "--max-new-tokens", "4", "--prompt", PROMPT]
TIMING = {"run_ms"}


def run(*args, timeout=900):
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=timeout)


def read_rows(out):
    with open(os.path.join(out, "rows.csv"), newline="") as f:
        return list(csv.DictReader(f))


def front_of(points, higher_is_better):
    """The cells no other cell beats: as few bytes or fewer and as good or better, one strictly."""
    sign = 1.0 if higher_is_better else -1.0
    front = set()
    for key, (b, q) in points.items():
        dominated = any(b2 <= b and sign * (q2 - q) >= 0 and (b2 < b or sign * (q2 - q) > 0)
                        for other, (b2, q2) in points.items() if other != key)
        if not dominated:
            front.add(key)
    return front


def all_checks(root):
    out = os.path.join(root, "sweep")
    res = run("sweep", "--out", out, *GRID)
    check(res.returncode == 0, f"the sweep exits 0 ({res.stderr.strip()[-400:]})")
    if res.returncode != 0:
        return
    with open(os.path.join(out, "grid.json")) as f:
        grid = json.load(f)
    check(grid.get("cache_types") == TYPES, f"grid.json records the cache types ({grid.get('cache_types')})")
    rows = read_rows(out)
    check(len(rows) == 2 * len(TYPES) * 2, f"one row per (policy, cache type, budget): {len(rows)}")
    check(list(rows[0].keys())[:5] == ["cell", "prompt", "policy", "budget", "cache_type"],
          f"rows.csv's key columns: {list(rows[0].keys())[:5]}")
    cells = {(r["policy"], r["cache_type"], r["budget"]) for r in rows}
    check(cells == {(p, t, b) for p in ("full", "snapkv") for t in TYPES for b in ("50%", "25%")},
          "every (policy, cache type, budget) cell has its row")
    with h5py.File(os.path.join(out, "eval.h5"), "r") as h5:
        group = h5["eval"]
        types = [t.decode() if isinstance(t, bytes) else t for t in group["cache_type"][()]]
        cells_h5 = [int(c) for c in group["cell"][()]]
    by_cell = {int(r["cell"]): r for r in rows}
    check(all(by_cell[c]["cache_type"] == t for c, t in zip(cells_h5, types)) and len(types) == len(rows),
          "eval.h5's /eval/cache_type equals rows.csv's")
    peak = {(r["policy"], r["cache_type"], r["budget"]): float(r["cache_peak_bytes"]) for r in rows}
    kl = {(r["policy"], r["cache_type"], r["budget"]): float(r["kl_mean"]) for r in rows}
    check(peak[("full", "q8_0", "50%")] * 128 == peak[("full", "f32", "50%")] * 34,
          f"the q8_0 full cache's peak is 34/128 of the f32 one's ({peak[('full', 'q8_0', '50%')]} vs "
          f"{peak[('full', 'f32', '50%')]})")
    # On this short prompt KIVI's float32 residual (16 keys and values, up to 47 keys) is most of the cache.
    check(peak[("full", "kivi2:group=32,residual=16", "50%")] < peak[("full", "f32", "50%")],
          "kivi2 holds fewer bytes than f32 on the full cache")
    check(kl[("full", "f32", "50%")] == 0.0 and kl[("full", "q8_0", "50%")] > 0.0,
          f"the f32 full cache is the reference (KL 0), q8_0 is not exact ({kl[('full', 'q8_0', '50%')]})")

    # Resume: nothing to run; a removed line runs again with the same numbers.
    res = run("sweep", "--out", out, *GRID)
    check(res.returncode == 0 and "0 to run" in res.stderr, f"a finished sweep resumes with nothing to run ({res.stderr[-300:]})")
    with open(os.path.join(out, "rows.csv")) as f:
        lines = f.readlines()
    with open(os.path.join(out, "rows.csv"), "w") as f:
        f.writelines(lines[:-1])
    res = run("sweep", "--out", out, *GRID)
    check(res.returncode == 0 and "1 to run" in res.stderr, f"a removed row runs again ({res.stderr[-300:]})")
    again = {int(r["cell"]): {k: v for k, v in r.items() if k not in TIMING} for r in read_rows(out)}
    first = {int(r["cell"]): {k: v for k, v in r.items() if k not in TIMING} for r in rows}
    check(again == first, "the resumed sweep has the same rows")
    res = run("sweep", "--out", out, *GRID[:-6], "--cache-types", "f32,q8_0", *GRID[-4:])
    check(res.returncode != 0 and "cache_types" in res.stderr, f"another set of cache types is another grid ({res.stderr[-300:]})")

    # The Pareto view and its front.
    for metric, higher in (("kl_mean", False), ("top1_agreement", True)):
        svg = os.path.join(root, f"pareto_{metric}.svg")
        res = run("figure", out, "--view", "pareto", "--metric", metric, "--out", svg)
        check(res.returncode == 0 and os.path.exists(svg) and os.path.exists(svg + ".front.json"),
              f"figure --view pareto ({metric}) writes the SVG and its front ({res.stderr.strip()[-300:]})")
        if res.returncode != 0:
            continue
        with open(svg + ".front.json") as f:
            marked = json.load(f)
        points = {}
        for policy, ctype, budget in cells:
            rs = [r for r in rows if (r["policy"], r["cache_type"], r["budget"]) == (policy, ctype, budget)]
            points[(f"{policy} @{ctype}", budget)] = (sum(float(r[marked["bytes_metric"]]) for r in rs) / len(rs),
                                                      sum(float(r[metric]) for r in rs) / len(rs))
        expected = front_of(points, higher)
        got = {(p["series"], p["budget"]) for p in marked["front"]}
        check(got == expected, f"{metric}: the marked front {sorted(got)} equals the one computed from rows.csv "
                               f"{sorted(expected)}")
        check(marked["higher_is_better"] == higher and marked["bytes_metric"] == "cache_bytes",
              f"{metric}: direction {marked['higher_is_better']}, bytes {marked['bytes_metric']}")
        check(len(marked["points"]) == len(points), f"{metric}: every cell is a point ({len(marked['points'])})")
        with open(svg) as f:
            text = f.read()
        for series in {s for s, _ in points}:
            check(series.replace("&", "&amp;") in text, f"{metric}: the SVG names the curve '{series}'")
        check("Pareto front" in text, f"{metric}: the SVG's legend names the front")
    res = run("figure", out, "--view", "pareto", "--metric", "kl_mean", "--out", os.path.join(root, "pareto_kl_mean.svg"))
    check(res.returncode != 0, "an existing figure is not replaced without --force")
    res = run("figure", out, "--view", "pareto", "--metric", "nonsense", "--out", os.path.join(root, "x.svg"))
    check(res.returncode != 0 and "nonsense" in res.stderr, f"an unknown metric is refused ({res.stderr.strip()[-200:]})")

    # Traces: per-layer storage error, merge re-quantization error, attention output error against float32.
    nmse = {}
    for ctype, policy in (("q8_0", "full"), ("q4_0", "full"), ("q8_0", "kvmerger")):
        path = os.path.join(root, f"trace_{ctype}_{policy}.h5")
        res = run("trace", "--out", path, "--prompt", PROMPT, "--max-new-tokens", "4", "--quiet", "--cache-type", ctype,
                  "--policy", policy, *(["--budget", "50%"] if policy != "full" else []), "--record", "nmse=on")
        check(res.returncode == 0, f"trace {ctype} {policy} exits 0 ({res.stderr.strip()[-300:]})")
        if res.returncode != 0:
            continue
        with h5py.File(path, "r") as f:
            run_group = f["runs"][list(f["runs"].keys())[0]]
            attrs = {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in run_group.attrs.items()}
            layers = int(run_group.attrs["n_layers"])
            keys = [float(x) for x in attrs.get("storage_nmse_keys", "").split(",") if x]
            values = [float(x) for x in attrs.get("storage_nmse_values", "").split(",") if x]
            check(len(keys) == layers and len(values) == layers and all(0 < x < 1 for x in keys + values),
                  f"{ctype} {policy}: storage_nmse_keys/values, one value in (0, 1) per layer ({keys[:3]} ...)")
            nmse[(ctype, policy)] = (sum(keys) / max(1, len(keys)), sum(values) / max(1, len(values)))
            if policy == "kvmerger":
                merged = [float(x) for x in attrs.get("merge_storage_nmse_keys", "").split(",") if x]
                check(len(merged) == layers and any(x > 0 for x in merged),
                      f"{ctype} {policy}: merge_storage_nmse_keys per layer, some above 0 ({merged[:3]} ...)")
            else:
                check("merge_storage_nmse_keys" not in attrs, f"{ctype} {policy}: no merge error without merges")
                check("nmse" in run_group and float(run_group["nmse"][()].max()) > 0,
                      f"{ctype} {policy}: the attention output's error against the float32 shadow is recorded")
    if ("q8_0", "full") in nmse and ("q4_0", "full") in nmse:
        check(nmse[("q4_0", "full")][0] > nmse[("q8_0", "full")][0] and nmse[("q4_0", "full")][1] > nmse[("q8_0", "full")][1],
              f"q4_0 stores with more error than q8_0 ({nmse[('q4_0', 'full')]} vs {nmse[('q8_0', 'full')]})")
        print(f"storage NMSE (keys, values), mean over layers: q8_0 {nmse[('q8_0', 'full')]}, q4_0 {nmse[('q4_0', 'full')]}")

    # eval ruler in a cache type.
    res = run("eval", "ruler", "--length", "512", "--samples", "1", "--tasks", "niah_single_1", "--cache-type", "q8_0",
              "--json")
    check(res.returncode == 0, f"eval ruler --cache-type q8_0 exits 0 ({res.stderr.strip()[-300:]})")
    if res.returncode == 0:
        record = json.loads(res.stdout)
        check(record.get("cache_type") == "q8_0", f"the RULER record names the cache type ({record.get('cache_type')})")


if __name__ == "__main__":
    if not os.path.exists(MODEL):
        print(f"default model {MODEL} missing; run make")
        sys.exit(77)
    sys.exit(run_in_temp_folder(BINARY, "kvscope_quantize_or_evict_", all_checks))
