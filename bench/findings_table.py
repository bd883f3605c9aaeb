#!/usr/bin/env python3
"""Markdown tables of a findings run's intervals (bench/findings_intervals.sh): for each sweep folder, per
(policy, budget) the mean over prompts of the chosen metrics with their 95 % bootstrap intervals, and the paired
difference to the sweep's baseline with its interval (marked * when it excludes zero).

    python3 bench/findings_table.py OUT_DIR [--metrics kl_mean,top1_agreement,output_nmse]
"""
import argparse
import csv
import pathlib


def fmt(x):
    return f"{float(x):.4g}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--metrics", default="kl_mean,top1_agreement,output_nmse,score")
    args = ap.parse_args()
    wanted = args.metrics.split(",")
    for summary in sorted(pathlib.Path(args.out).glob("*/summary.csv")):
        rows = list(csv.DictReader(open(summary, newline="")))
        metrics = [m for m in wanted if any(r["metric"] == m for r in rows)]
        baseline = next((r["baseline"] for r in rows if r["baseline"]), "")
        print(f"\n### {summary.parent.name} (n = {rows[0]['n']} per cell; differences vs {baseline or '-'})\n")
        print("| policy | budget | " + " | ".join(metrics) + " |")
        print("|---|---|" + "---|" * len(metrics))
        cells = []
        for r in rows:
            if (r["policy"], r["budget"]) not in cells:
                cells.append((r["policy"], r["budget"]))
        for policy, budget in cells:
            parts = []
            for m in metrics:
                r = next(x for x in rows if (x["policy"], x["budget"], x["metric"]) == (policy, budget, m))
                text = f"{fmt(r['mean'])} [{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]"
                if r["diff"]:
                    star = " *" if r["diff_excludes_zero"] == "1" else ""
                    text += f"; Δ {float(r['diff']):+.3g} [{float(r['diff_ci_low']):+.3g}, {float(r['diff_ci_high']):+.3g}]{star}"
                parts.append(text)
            print(f"| {policy} | {budget} | " + " | ".join(parts) + " |")


if __name__ == "__main__":
    main()
