#!/usr/bin/env python3
"""Sweep throughput: `kvscope sweep --eval fidelity` over policies x budgets on one ~1K-token prompt with 32
new tokens, against the sum of the bare `kvscope generate` times of the same cells, measured in the same
run (issue 12's goal: sweep wall time <= 1.2x that sum with --workers 1), then the same sweep with
--workers 2.

    bench/sweep_speed.py [--build build] [--policies all] [--budgets 5%,10%,25%,50%] [--new-tokens 32]
                         [--prompt-file sample_data/texts/kitchen_science.txt] [--max-prompt-words 780]

The bare generate times include each process's model load, as a researcher scripting `generate` per cell
would pay it; the sweep loads once and adds the full-cache reference and the fidelity bookkeeping.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALL = ("full,streaming_llm,h2o,tova,snapkv,pyramidkv,d2o,dynamickv,caote,kvmerger,cake")


def run(cmd):
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        sys.exit(f"command failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr[-2000:]}")
    return wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--policies", default=ALL)
    ap.add_argument("--budgets", default="5%,10%,25%,50%")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--prompt-file", default=os.path.join(ROOT, "sample_data", "texts", "kitchen_science.txt"))
    ap.add_argument("--max-prompt-words", type=int, default=780, help="cut the text to ~1K tokens")
    args = ap.parse_args()
    kvscope = os.path.join(args.build, "app", "kvscope")
    tmp = tempfile.mkdtemp(prefix="kvscope_sweep_bench_")
    try:
        prompt = os.path.join(tmp, "prompt.txt")
        with open(args.prompt_file) as f:
            words = f.read().split()
        with open(prompt, "w") as f:
            f.write(" ".join(words[: args.max_prompt_words]))
        policies, budgets = args.policies.split(","), args.budgets.split(",")
        cells = len(policies) * len(budgets)
        grid = ["--policies", args.policies, "--budgets", args.budgets, "--eval", "fidelity", "--max-new-tokens",
                str(args.new_tokens), "--prompt-file", prompt]
        bare = 0.0
        for p in policies:
            for b in budgets:
                bare += run([kvscope, "generate", "--prompt-file", prompt, "--policy", p, "--budget", b,
                             "--max-new-tokens", str(args.new_tokens), "--ignore-eos", "--json"])
        one = run([kvscope, "sweep", *grid, "--out", os.path.join(tmp, "w1"), "--workers", "1"])
        two = run([kvscope, "sweep", *grid, "--out", os.path.join(tmp, "w2"), "--workers", "2"])
        print(f"cells: {cells} ({len(policies)} policies x {len(budgets)} budgets), {args.new_tokens} new tokens, "
              f"prompt {args.max_prompt_words} words of {os.path.basename(args.prompt_file)}, {os.cpu_count()} cores")
        print(f"bare generate, sum over cells: {bare:8.1f} s")
        print(f"sweep --workers 1:             {one:8.1f} s  ({one / bare:.2f}x the sum; goal <= 1.2x)  "
              f"{cells / one * 60:.1f} cells/min")
        print(f"sweep --workers 2:             {two:8.1f} s  ({one / two:.2f}x faster than 1 worker)  "
              f"{cells / two * 60:.1f} cells/min")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
