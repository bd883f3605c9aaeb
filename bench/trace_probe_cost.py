#!/usr/bin/env python3
"""What the damaged-file probe (core/trace/trace_probe.h) adds to opening a trace: records the benchmark
trace of bench/trace_overhead.py (a ~2048-token prompt, 64 decode steps, policy full, default record
options), then times, best of --repeat:

  probe      the child alone (`kvscope __probe-trace FILE`: exec, metadata walk, report), which is what
             every open now adds;
  inspect    `kvscope inspect FILE` (probe + summary);
  figure     `kvscope figure FILE --view attention` (probe + full read with maps + render).

    bench/trace_probe_cost.py [--build build] [--trace existing.h5] [--repeat 5]
"""
import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trace_overhead import prompt_text  # noqa: E402  (the same prompt as the recording benchmark)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def best_of(cmd, repeat, env):
    """Best and median wall seconds, and the best CPU seconds (user + system of the process and its
    children: the probe child included), which a shared machine distorts less than wall time."""
    walls, cpus = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        res = subprocess.run(cmd, capture_output=True, text=True, env=env)
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if res.returncode != 0:
            sys.exit(f"failed ({res.returncode}): {' '.join(cmd)}\n{res.stdout[-500:]}{res.stderr[-2000:]}")
    return min(walls), sorted(walls)[len(walls) // 2], min(cpus)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--trace", help="time this trace instead of recording the benchmark one")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--keep", help="keep the recorded trace at this path")
    args = ap.parse_args()
    binary = os.path.join(args.build, "app", "kvscope")
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    with tempfile.TemporaryDirectory() as tmp:
        trace = args.trace
        if not trace:
            trace = os.path.join(tmp, "big.h5")
            prompt = os.path.join(tmp, "prompt.txt")
            with open(prompt, "w", encoding="utf-8") as f:
                f.write(prompt_text(int(2048 * 4.4)))
            subprocess.run([binary, "trace", "--quiet", "--prompt-file", prompt, "--policy", "full", "--max-new-tokens",
                            "65", "--ignore-eos", "--out", trace], check=True, env=env)
            if args.keep:
                shutil.copy(trace, args.keep)
        size_mb = os.path.getsize(trace) / 1e6
        png = os.path.join(tmp, "fig.png")
        probe = best_of([binary, "__probe-trace", trace], args.repeat, env)
        inspect = best_of([binary, "inspect", trace], args.repeat, env)
        figure = best_of([binary, "figure", trace, "--view", "attention", "--out", png, "--force"], args.repeat, env)
        print(f"trace {size_mb:.1f} MB, {args.repeat} runs each, {os.cpu_count()} cores, load average "
              f"{os.getloadavg()[0]:.1f}")
        print(f"{'':8s} {'best wall':>10s} {'median wall':>12s} {'best CPU':>10s}")
        for name, (best, median, cpu) in (("probe", probe), ("inspect", inspect), ("figure", figure)):
            print(f"{name:8s} {best * 1000:8.0f} ms {median * 1000:10.0f} ms {cpu * 1000:8.0f} ms")
        print(f"the probe is {probe[2] / figure[2] * 100:.0f} % of the CPU time of opening and drawing the trace "
              f"(figure), {probe[2] / inspect[2] * 100:.0f} % of inspect's")


if __name__ == "__main__":
    main()
