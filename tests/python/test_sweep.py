"""`kvscope eval` and `kvscope sweep` end to end on the default model: a small fidelity grid persists one CSV line per cell
and the same numbers in eval.h5 (read here with h5py, independently of the C++ writer); a sweep killed
mid-way and run again has every cell exactly once with the same numbers as an uninterrupted run;
`--workers 2` gives the same rows as one process; bad input fails with a clear message and changes nothing.

Run by ctest with the project venv; KVSCOPE_BINARY points at the kvscope executable.
"""
import csv
import os
import signal
import subprocess
import sys
import time

import h5py

from checks import check, run_in_temp_folder
BINARY = os.environ.get("KVSCOPE_BINARY", "")
PROMPT = ("The old ferry left the harbour at eleven. The deckhand hooked the chain, the engines deepened their "
          "note, and the lights of the town slid away behind the breakwater while the passengers slept.")
GRID = ["--policies", "full,streaming_llm,h2o", "--budgets", "25%,50%", "--eval", "fidelity",
        "--max-new-tokens", "4", "--prompt", PROMPT]
CELLS = 6
TIMING = {"run_ms"}  # differs between runs; every other column must be identical



def sweep(out, *extra, wait=True):
    cmd = [BINARY, "sweep", "--out", out, *GRID, *extra]
    if not wait:
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900)


def read_rows(out):
    with open(os.path.join(out, "rows.csv"), newline="") as f:
        return list(csv.DictReader(f))


def comparable(rows):
    return {int(r["cell"]): {k: v for k, v in r.items() if k not in TIMING} for r in rows}


def check_summary(out, rows):
    """summary.csv and /eval/summary: per (policy, budget, metric) the mean over prompts (recomputed here from
    rows.csv), an interval around it within the values' range, and the paired difference to the full cache."""
    with open(os.path.join(out, "summary.csv"), newline="") as f:
        summary = list(csv.DictReader(f))
    cells = {(r["policy"], r["budget"]) for r in rows}
    metrics = [c for c in rows[0] if c not in ("cell", "prompt", "policy", "budget")]
    check(len(summary) == len(cells) * len(metrics), f"one summary line per cell and metric ({len(summary)})")
    for s in summary:
        values = [float(r[s["metric"]]) for r in rows if (r["policy"], r["budget"]) == (s["policy"], s["budget"])]
        mean = sum(values) / len(values)
        check(abs(float(s["mean"]) - mean) <= 1e-9 * max(1.0, abs(mean)), f"summary mean of {s['policy']} {s['budget']} "
              f"{s['metric']} is the rows' mean")
        check(min(values) - 1e-12 <= float(s["ci_low"]) <= float(s["mean"]) + 1e-12 <= float(s["ci_high"]) + 2e-12
              <= max(values) + 3e-12, f"interval of {s['policy']} {s['budget']} {s['metric']} inside the values' range")
        if s["policy"] == "full":
            check(s["diff"] == "", "no difference of the full cache to itself")
        else:
            full = {r["prompt"]: float(r[s["metric"]]) for r in rows if (r["policy"], r["budget"]) == ("full", s["budget"])}
            mine = {r["prompt"]: float(r[s["metric"]]) for r in rows if (r["policy"], r["budget"]) == (s["policy"], s["budget"])}
            diff = sum(mine[p] - full[p] for p in mine) / len(mine)
            check(abs(float(s["diff"]) - diff) <= 1e-9 * max(1.0, abs(diff)), "paired difference = mean of differences")
    with h5py.File(os.path.join(out, "eval.h5"), "r") as f:
        g = f["eval/summary"]
        check(len(g["mean"]) == len(summary) and g.attrs["bootstrap_resamples"] == 2000,
              "/eval/summary holds the same entries, with the bootstrap settings")


def test_small_sweep(root):
    out = os.path.join(root, "one")
    res = sweep(out)
    check(res.returncode == 0, f"sweep exits 0 (got {res.returncode}: {res.stderr[-400:]})")
    rows = read_rows(out)
    check(len(rows) == CELLS, f"{CELLS} rows in rows.csv (got {len(rows)})")
    check(sorted(int(r["cell"]) for r in rows) == list(range(CELLS)), "every cell once")
    for r in rows:
        if r["policy"] == "full":
            check(float(r["top1_agreement"]) == 1.0 and float(r["kl_mean"]) < 1e-6,
                  f"full cache agrees with itself ({r['budget']}: {r['top1_agreement']}, {r['kl_mean']})")
        else:
            check(float(r["cache_peak_bytes"]) < float(r["full_cache_peak_bytes"]),
                  f"{r['policy']} {r['budget']} keeps less than the full cache")
    with h5py.File(os.path.join(out, "eval.h5"), "r") as f:
        g = f["eval"]
        kind = g.attrs["eval"]  # fixed-length string attributes come back as bytes (docs/trace-format.md)
        check((kind.decode() if isinstance(kind, bytes) else kind) == "fidelity", "/eval has attribute eval=fidelity")
        cells = list(g["cell"][()])
        check(len(cells) == CELLS, "/eval/cell has one entry per row")
        by_cell = {int(r["cell"]): r for r in rows}
        for i, c in enumerate(cells):
            r = by_cell[int(c)]
            check(g["policy"][i].decode() == r["policy"] and g["budget"][i].decode() == r["budget"],
                  f"h5 row {i} names the CSV's cell {c}")
            for name in ("top1_agreement", "kl_mean", "logprob_gap", "cache_peak_bytes", "memory_saved"):
                check(float(g[name][i]) == float(r[name]), f"h5 {name} of cell {c} equals the CSV")
    check_summary(out, rows)
    if os.path.exists(os.path.join(out, "quality_kl_mean.png")):
        check(os.path.getsize(os.path.join(out, "quality_kl_mean.svg")) > 0, "quality figure written as SVG too")
    check("streaming_llm" in res.stdout and "25%" in res.stdout, "summary table printed")
    again = sweep(out)
    check(again.returncode == 0 and "0 to run" in again.stderr, "a finished sweep run again runs nothing")
    check(len(read_rows(out)) == CELLS, "and adds no rows")
    return comparable(rows)


def test_kill_and_resume(root, reference):
    out = os.path.join(root, "killed")
    proc = sweep(out, wait=False)
    csv_path = os.path.join(out, "rows.csv")
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        if os.path.exists(csv_path) and len(read_rows(out)) >= 2:
            break
        time.sleep(0.05)
    killed = proc.poll() is None
    if killed:
        proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = len(read_rows(out))
    check(killed and before < CELLS, f"sweep killed part-way ({before} of {CELLS} cells done)")
    res = sweep(out)
    check(res.returncode == 0, f"resumed sweep exits 0 ({res.stderr[-400:]})")
    check(f"{before} done, {CELLS - before} to run" in res.stderr, "resume runs only the missing cells")
    rows = read_rows(out)
    cells = [int(r["cell"]) for r in rows]
    check(sorted(cells) == list(range(CELLS)), f"no duplicated and no missing cells after resume (got {sorted(cells)})")
    check(comparable(rows) == reference, "resumed rows equal an uninterrupted sweep")


def test_workers(root, reference):
    out = os.path.join(root, "workers")
    res = sweep(out, "--workers", "2")
    check(res.returncode == 0, f"--workers 2 exits 0 ({res.stderr[-400:]})")
    check(comparable(read_rows(out)) == reference, "--workers 2 rows equal the one-process rows")


def test_bad_input(root):
    def fails(args, words, what):
        res = subprocess.run([BINARY, "sweep", *args], capture_output=True, text=True, timeout=300)
        check(res.returncode == 2 and all(w in res.stderr for w in words),
              f"{what}: exit 2 naming {words} (got {res.returncode}: {res.stderr.strip()[-300:]})")

    out = os.path.join(root, "bad")
    fails(["--out", out, "--policies", "h2o", "--budgets", "10%", "--eval", "bleu", "--prompt", "x"],
          ["unknown evaluation 'bleu'"], "unknown eval kind")
    fails(["--out", out, "--policies", "", "--budgets", "10%", "--eval", "fidelity", "--prompt", "x"],
          ["policy list"], "empty policy list")
    fails(["--out", out, "--policies", "h2o", "--budgets", "10%,", "--eval", "fidelity", "--prompt", "x"],
          ["budget list"], "empty budget")
    fails(["--out", out, "--policies", "h2o", "--budgets", "10%", "--eval", "fidelity", "--prompts",
           os.path.join(root, "no_such_folder")], ["no_such_folder"], "unreadable prompt folder")
    check(not os.path.exists(out), "no sweep folder is created for bad input")
    # A resumed sweep whose grid differs: refused, files unchanged.
    one = os.path.join(root, "one")
    before = {n: open(os.path.join(one, n), "rb").read() for n in ("grid.json", "rows.csv", "eval.h5")}
    res = subprocess.run([BINARY, "sweep", "--out", one, *GRID[:3], "25%,75%", *GRID[4:]], capture_output=True,
                         text=True, timeout=300)
    check(res.returncode == 2 and "budgets" in res.stderr and "75%" in res.stderr,
          f"different grid refused naming the field ({res.stderr.strip()[-300:]})")
    after = {n: open(os.path.join(one, n), "rb").read() for n in before}
    check(after == before, "a refused resume leaves grid.json, rows.csv and eval.h5 untouched")


def test_stop_at_end(root):
    """--stop-at-end: a chat answer that ends after a few tokens is scored to its end token, as `eval fidelity
    --stop-at-end` (and the window) score it; without it every one of the 32 steps is scored; the option is part of
    the grid; a sweep that has no end to stop at refuses it."""
    import json
    question = ["--chat", "--prompt", "Answer with one word. What colour is the sky on a clear day?"]
    grid = ["--policies", "h2o", "--budgets", "50%", "--eval", "fidelity", "--max-new-tokens", "32", *question]

    def one_row(out, *extra):
        res = subprocess.run([BINARY, "sweep", "--out", out, *grid, *extra], capture_output=True, text=True, timeout=900)
        check(res.returncode == 0, f"sweep {' '.join(extra)} exits 0 ({res.stderr[-300:]})")
        rows = read_rows(out) if res.returncode == 0 else []
        return rows[0] if len(rows) == 1 else {}

    ended = one_row(os.path.join(root, "ends"), "--stop-at-end")
    full_length = one_row(os.path.join(root, "runs_on"))
    res = subprocess.run([BINARY, "eval", "fidelity", "--policy", "h2o", "--budget", "50%", "--max-new-tokens", "32",
                          "--stop-at-end", "--json", *question], capture_output=True, text=True, timeout=300)
    record = json.loads(res.stdout) if res.returncode == 0 else {"metrics": {}, "continuation_tokens": []}
    steps = len(record["continuation_tokens"])
    check(record.get("reference_stop_reason") == "end_of_generation" and 0 < steps < 32,
          f"the reference answer ends early at its end token ({steps} tokens)")
    check(float(ended.get("steps", -1)) == steps, f"--stop-at-end scores those {steps} steps (got {ended.get('steps')})")
    for metric in ("top1_agreement", "kl_mean", "agreeing_prefix"):
        check(abs(float(ended.get(metric, "nan")) - record["metrics"].get(metric, 0)) <= 1e-12,
              f"sweep --stop-at-end {metric} equals eval fidelity --stop-at-end's")
    check(float(full_length.get("steps", -1)) == 32, "without it all 32 steps are scored, past the end token")
    res = subprocess.run([BINARY, "sweep", "--out", os.path.join(root, "ends"), *grid], capture_output=True, text=True,
                         timeout=300)
    check(res.returncode == 2 and "stop_at_end" in res.stderr, f"resuming without --stop-at-end is another grid "
          f"({res.stderr.strip()[-200:]})")
    res = subprocess.run([BINARY, "sweep", "--out", os.path.join(root, "ppl_end"), "--policies", "h2o", "--budgets",
                          "50%", "--eval", "ppl", "--stop-at-end", "--prompt", PROMPT], capture_output=True, text=True,
                         timeout=300)
    check(res.returncode == 2 and "--stop-at-end" in res.stderr and not os.path.exists(os.path.join(root, "ppl_end")),
          f"--stop-at-end on a ppl sweep is refused, nothing created ({res.stderr.strip()[-200:]})")


def test_eval_subcommands():
    import json

    def run_json(*args):
        res = subprocess.run([BINARY, "eval", *args, "--json"], capture_output=True, text=True, timeout=300)
        check(res.returncode == 0, f"eval {args[0]} exits 0 ({res.stderr[-300:]})")
        return json.loads(res.stdout) if res.returncode == 0 else {"metrics": {}}

    j = run_json("fidelity", "--prompt", PROMPT, "--policy", "streaming_llm", "--budget", "50%", "--max-new-tokens", "3")
    m = j["metrics"]
    check(m.get("steps") == 3 and 0.0 <= m.get("top1_agreement", -1) <= 1.0 and len(j.get("layer_nmse", [])) == 30,
          f"eval fidelity --json: 3 steps, agreement in [0, 1], NMSE per layer ({m})")
    j = run_json("ppl", "--prompt", PROMPT, "--policy", "full", "--prompt-tokens", "20")
    m = j["metrics"]
    check(m.get("ppl", 0) > 1.0 and abs(m.get("ppl", 0) - m.get("ppl_full", -1)) < 1e-6 * m.get("ppl", 1),
          f"eval ppl --json: the full cache's perplexity equals the reference's ({m})")
    j = run_json("needle", "--policy", "full", "--lengths", "160", "--depths", "50", "--answer-tokens", "8")
    cases = j.get("cases", [])
    check(len(cases) == 1 and len(cases[0]["value"]) == 7 and cases[0]["metrics"]["full_exact_match"] == cases[0]["metrics"]["exact_match"],
          f"eval needle --json: one case, a 7-digit value, the full cache scored against itself ({cases})")
    res = subprocess.run([BINARY, "eval", "needle", "--depths", "150"], capture_output=True, text=True, timeout=300)
    check(res.returncode == 2 and "150" in res.stderr, f"needle depth outside 0..100 is a usage error ({res.stderr[-200:]})")


def all_checks(root):
    reference = test_small_sweep(root)
    test_kill_and_resume(root, reference)
    test_workers(root, reference)
    test_bad_input(root)
    test_stop_at_end(root)
    test_eval_subcommands()


def main():
    return run_in_temp_folder(BINARY, "kvscope_sweep_", all_checks)


if __name__ == "__main__":
    sys.exit(main())
