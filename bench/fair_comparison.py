#!/usr/bin/env python3
"""Agreement with the full cache under each policy: for every prompt in bench/prompts/fair_*.txt, generate
greedily under the full cache and under each policy at the same budget, and count the generated tokens that
equal the full cache's before the first divergence. Prints one line per policy: the count per prompt and
the sum (of prompts x max_new_tokens).

  bench/fair_comparison.py build/app/kvscope [--budget 50%] [--tokens 32] [--threads 1] [policy specs...]
"""
import argparse
import json
import pathlib
import subprocess
import sys

DEFAULT_POLICIES = [
    "streaming_llm", "h2o", "tova", "snapkv", "pyramidkv", "snapkv:allocation=pyramid", "d2o",
    "d2o:variance_norm=per_n", "d2o:variance_norm=raw", "dynamickv", "caote", "kvmerger",
    "kvmerger:mode=threshold", "cake",
]


def generate(binary, prompt_file, policy, budget, tokens, threads):
    cmd = [binary, "generate", "--json", "--chat", "--temperature", "0", "--ignore-eos", "--max-new-tokens",
           str(tokens), "--prompt-file", str(prompt_file), "--policy", policy, "--threads", str(threads)]
    if policy != "full":
        cmd += ["--budget", budget]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)["generated_tokens"]


def agreeing_prefix(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binary")
    parser.add_argument("policies", nargs="*", default=DEFAULT_POLICIES)
    parser.add_argument("--budget", default="50%")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    prompts = sorted((pathlib.Path(__file__).parent / "prompts").glob("fair_*.txt"))
    if not prompts:
        sys.exit("no prompts bench/prompts/fair_*.txt")
    full = {p: generate(args.binary, p, "full", args.budget, args.tokens, args.threads) for p in prompts}
    print(f"budget {args.budget}, {args.tokens} tokens, prompts: {', '.join(p.stem for p in prompts)}")
    for policy in args.policies:
        try:
            counts = [agreeing_prefix(full[p], generate(args.binary, p, policy, args.budget, args.tokens, args.threads))
                      for p in prompts]
        except subprocess.CalledProcessError as e:
            print(f"{policy:40s} failed: {e.stderr.strip().splitlines()[-1] if e.stderr else e}")
            continue
        print(f"{policy:40s} {' '.join(f'{c:3d}' for c in counts)}   total {sum(counts):3d} / "
              f"{len(prompts) * args.tokens}", flush=True)


if __name__ == "__main__":
    main()
