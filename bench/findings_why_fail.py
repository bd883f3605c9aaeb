#!/usr/bin/env python3
"""docs/findings.md, "Why policies fail" (issue 35): a RULER sweep of the nine policies at 25 % and 10 % with
evidence retention, then its tables in Markdown, every number read back from the sweep's files.

    python3 bench/findings_why_fail.py run  OUT [--build build] [--length 1024] [--samples 5] [--workers 2]
    python3 bench/findings_why_fail.py table OUT

`run` is resumable (it is one `kvscope sweep`; run it again to finish). `table` prints, per (policy, budget):
the score with its interval, the full cache's score on the same samples, the 2 x 2 of (evidence mostly kept /
lost) x (correct / wrong) from retention.json, and the share of failures that had lost the evidence; then the
same 2 x 2 per task family (needle tasks, variable tracking, word counts), recomputed from rows.csv.
"""
import argparse
import csv
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
POLICIES = "snapkv,h2o,streaming_llm,pyramidkv,d2o,dynamickv,caote,kvmerger,cake"
BUDGETS = "25%,10%"


def run(args):
    binary = pathlib.Path(args.build) / "app" / "kvscope"
    cmd = [str(binary), "sweep", "--eval", "ruler", "--length", str(args.length), "--samples", str(args.samples),
           "--seed", str(args.seed), "--policies", POLICIES, "--budgets", BUDGETS, "--workers", str(args.workers),
           "--threads", "1", "--out", args.out]
    print(" ".join(cmd), file=sys.stderr)
    return subprocess.call(cmd)


def family(prompt):
    task = prompt.split("#")[0]
    if task.startswith("niah"):
        return "needles (niah_*)"
    return {"vt": "variable tracking (vt)"}.get(task, "word counts (cwe, fwe)")


def pct(x):
    return f"{100 * x:.0f}"


def table(args):
    out = pathlib.Path(args.out)
    rows = list(csv.DictReader(open(out / "rows.csv", newline="")))
    summary = list(csv.DictReader(open(out / "summary.csv", newline="")))
    retention = json.load(open(out / "retention.json"))
    grid = json.load(open(out / "grid.json"))

    def interval(policy, budget, metric):
        r = next(x for x in summary if (x["policy"], x["budget"], x["metric"]) == (policy, budget, metric))
        return f"{float(r['mean']):.2f} [{float(r['ci_low']):.2f}, {float(r['ci_high']):.2f}]", int(r["n"])

    print(f"RULER at {grid['settings']['length']} tokens, {grid['settings']['samples']} samples per task x "
          f"{len(set(r['prompt'].split('#')[0] for r in rows))} tasks, seed {grid['settings']['seed']}\n")
    print("| policy | budget | n | score | full cache | kept, correct | kept, wrong | lost, correct | lost, wrong |"
          " failures that lost the evidence |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for cell in retention["cells"]:
        p, b = cell["policy"], cell["budget"]
        score, n = interval(p, b, "score")
        full, _ = interval(p, b, "full_score")
        c = cell["cells"]

        def share(name):
            x = c[name]
            return f"{x['count']} ({pct(x['share'])} % [{pct(x['ci_low'])}, {pct(x['ci_high'])}])"

        fl = cell["failures_lost"]
        lost = f"{pct(fl['share'])} % [{pct(fl['ci_low'])}, {pct(fl['ci_high'])}] of {fl['n']}" if fl else "-"
        print(f"| {p} | {b} | {n} | {score} | {full} | {share('kept_correct')} | {share('kept_wrong')} | "
              f"{share('lost_correct')} | {share('lost_wrong')} | {lost} |")

    print("\nOnly the samples the full cache answered (full_score >= 0.5), so every failure below is the "
          "policy's: counts kept-correct / kept-wrong / lost-correct / lost-wrong, and the share of failures that "
          "had lost the evidence\n")
    print("| policy | budget | n | counts | failures that lost the evidence |")
    print("|---|---|---|---|---|")
    for cell in retention["cells"]:
        p, b = cell["policy"], cell["budget"]
        mine = [r for r in rows if r["policy"] == p and r["budget"] == b and float(r["full_score"]) >= 0.5
                and r["evidence_lost"] not in ("nan", "")]
        counts = [sum(1 for r in mine if (float(r["evidence_lost"]) == 1.0) == lost
                      and (float(r["score"]) >= 0.5) == correct)
                  for lost, correct in ((False, True), (False, False), (True, True), (True, False))]
        failures = counts[1] + counts[3]
        share = f"{pct(counts[3] / failures)} % of {failures}" if failures else "-"
        print(f"| {p} | {b} | {len(mine)} | {'/'.join(map(str, counts))} | {share} |")

    print("\nBy task family (counts: kept-correct / kept-wrong / lost-correct / lost-wrong; "
          "kept share = mean evidence_kept):\n")
    families = sorted({family(r["prompt"]) for r in rows})
    print("| policy | budget | " + " | ".join(families) + " |")
    print("|---|---|" + "---|" * len(families))
    for cell in retention["cells"]:
        p, b = cell["policy"], cell["budget"]
        parts = []
        for fam in families:
            mine = [r for r in rows if r["policy"] == p and r["budget"] == b and family(r["prompt"]) == fam
                    and r["evidence_lost"] not in ("nan", "")]
            counts = [sum(1 for r in mine if (float(r["evidence_lost"]) == 1.0) == lost
                          and (float(r["score"]) >= 0.5) == correct)
                      for lost, correct in ((False, True), (False, False), (True, True), (True, False))]
            kept = sum(float(r["evidence_kept"]) for r in mine) / len(mine) if mine else float("nan")
            parts.append(f"{'/'.join(map(str, counts))}, kept {kept:.2f}")
        print(f"| {p} | {b} | " + " | ".join(parts) + " |")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["run", "table"])
    ap.add_argument("out")
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    return run(args) if args.what == "run" else table(args)


if __name__ == "__main__":
    sys.exit(main())
