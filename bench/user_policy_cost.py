#!/usr/bin/env python3
"""What a policy written in Python costs against the same policy built in (issue 22's target: at most 1.3x).

Runs `kvscope generate` for each (built-in, numpy re-implementation) pair on the default prompt and on the
~950-token bench prompt, alternating the two so that a busy moment hurts both, and prints the best of N
whole-run times (prefill + decode, from the run's own --json timings) and their ratio. Also the compiled
H2O plugin. The kept sets are equal (tests/e2e/user_policy_test.cpp), so the ratio is the cost of calling
Python (or the plugin) and nothing else.

    bench/user_policy_cost.py build/app/kvscope [--repeats 5] [--new-tokens 32]
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_ms(binary, prompt_file, policy, budget, new_tokens):
    res = subprocess.run([binary, "generate", "--prompt-file", prompt_file, "--policy", policy, "--budget", budget,
                          "--max-new-tokens", str(new_tokens), "--json"], capture_output=True, text=True,
                         env={**os.environ, "OMP_WAIT_POLICY": "passive"})
    if res.returncode != 0:
        sys.exit(f"{policy}: kvscope failed: {res.stderr.strip()}")
    t = json.loads(res.stdout)["timings"]
    return t["prefill_ms"] + t["decode_ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kvscope")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--budget", default="25%")
    a = ap.parse_args()
    examples = os.path.join(ROOT, "examples", "policies")
    plugin = os.path.join(os.path.dirname(os.path.abspath(a.kvscope)), "..", "plugins", "h2o_plugin.so")
    pairs = [("h2o", "python:" + os.path.join(examples, "h2o_numpy.py")),
             ("snapkv", "python:" + os.path.join(examples, "snapkv_numpy.py")),
             ("h2o", "plugin:" + plugin)]
    prompts = [("default (lighthouse_story)", os.path.join(ROOT, "sample_data", "prompts", "lighthouse_story.txt")),
               ("bench (lathe_manual)", os.path.join(ROOT, "sample_data", "prompts_long", "lathe_manual.txt"))]
    print(f"best of {a.repeats} whole runs (prefill + {a.new_tokens} new tokens), budget {a.budget}, OMP_WAIT_POLICY=passive")
    print(f"{'prompt':28} {'policy':10} {'built-in ms':>11} {'user file':22} {'user ms':>9} {'ratio':>6}")
    for label, prompt in prompts:
        for builtin, user in pairs:
            best_b, best_u = float("inf"), float("inf")
            for _ in range(a.repeats):
                best_b = min(best_b, run_ms(a.kvscope, prompt, builtin, a.budget, a.new_tokens))
                best_u = min(best_u, run_ms(a.kvscope, prompt, user, a.budget, a.new_tokens))
            kind = user.split(":")[0] + ":" + os.path.splitext(os.path.basename(user))[0]
            print(f"{label:28} {builtin:10} {best_b:11.1f} {kind:22} {best_u:9.1f} {best_u / best_b:6.2f}")


if __name__ == "__main__":
    main()
