#!/usr/bin/env python3
"""Cost of `--traces` on a RULER run (issue 35): the same `kvscope eval ruler` run without and with
`--traces DIR --traces-for all` (every sample's file kept: the most a run can cost), printing the wall time of
each, the ratio, and the traces' size on disk in total, per sample and per 1K prompt tokens.

    bench/eval_traces_cost.py [--build build | --binary PATH] [--policy snapkv] [--budget 25%] [--length 4096] [--samples 50]
                              [--tasks niah_single_1] [--record SPEC]

The run with traces also runs the full cache on every sample (a trace holds both runs), so the run without
them is given --vs-full: both run the same engine work, and the difference is the recording and the writing.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd):
    t0 = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    if res.returncode != 0:
        sys.exit(f"command failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr[-3000:]}")
    return json.loads(res.stdout), seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--binary", help="the kvscope executable (default BUILD/app/kvscope); give a copy when the build "
                                     "may change while the two runs go")
    ap.add_argument("--policy", default="snapkv")
    ap.add_argument("--budget", default="25%")
    ap.add_argument("--length", type=int, default=4096)
    ap.add_argument("--samples", type=int, default=50)
    ap.add_argument("--tasks", default="niah_single_1")
    ap.add_argument("--record", default=None, help="--traces-record SPEC (default: the evaluation's)")
    a = ap.parse_args()
    binary = a.binary or os.path.join(a.build, "app", "kvscope")
    common = [binary, "eval", "ruler", "--policy", a.policy, "--budget", a.budget, "--length", str(a.length),
              "--samples", str(a.samples), "--tasks", a.tasks, "--json", "--vs-full"]
    folder = tempfile.mkdtemp(prefix="kvscope-traces-cost-")
    try:
        plain, t_plain = run(common)
        extra = ["--traces", os.path.join(folder, "traces"), "--traces-for", "all"]
        if a.record:
            extra += ["--traces-record", a.record]
        traced, t_traced = run(common + extra)
        files = [r["trace"] for r in traced["records"] if r.get("trace")]
        sizes = [os.path.getsize(f) for f in files]
        tokens = sum(r["prompt_tokens"] + r["appended_tokens"] for r in traced["records"])
        same = [r["prediction"] for r in plain["records"]] == [r["prediction"] for r in traced["records"]]
        n = len(traced["records"])
        print(f"RULER {a.tasks} at {a.length} tokens, {a.policy} at {a.budget}, {n} samples (each with the full cache)")
        print(f"  without --traces   {t_plain:8.1f} s")
        print(f"  with --traces all  {t_traced:8.1f} s   x{t_traced / t_plain:.2f}")
        print(f"  trace files        {len(files)}, {sum(sizes) / 1e6:.1f} MB in all, {sum(sizes) / max(len(sizes), 1) / 1e6:.1f} MB "
              f"per sample, {sum(sizes) / max(tokens, 1) * 1000 / 1e6:.1f} MB per 1K prompt tokens (both runs)")
        print(f"  predictions the same with and without traces: {same}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
