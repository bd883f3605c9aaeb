#!/usr/bin/env python3
"""Trace size with q/k of every layer, of a few layers (`--record qk=layers:...`) and without, and what deflate
(shuffle + gzip, the writer's default level 1) saves on the float16 q/k: one prompt of N tokens plus a few decode
steps, policy `full`, default model, `kvscope trace` four ways:
  off        the default recording (no q/k)
  layers     --record qk=layers:LAYERS
  all        --record qk=on
  all_raw    --record qk=on --gzip 0 (nothing compressed)

Prints per way the file size, the qk/ group's stored and raw bytes (h5py), and both per 1K positions.
Run with .deps/venv/bin/python (h5py).

    bench/qk_layers_size.py [--build build] [--tokens 1024] [--layers 0-3,14]
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qk_overhead import qk_bytes  # noqa: E402
from trace_overhead import ROOT, timed, write_prompt_of  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--layers", default="0-3,14")
    ap.add_argument("--new-tokens", type=int, default=17)
    args = ap.parse_args()
    binary = os.path.join(args.build, "app", "kvscope")
    ways = [("off", []), ("layers", ["--record", "qk=layers:" + args.layers]), ("all", ["--record", "qk=on"]),
            ("all_raw", ["--record", "qk=on", "--gzip", "0"])]
    with tempfile.TemporaryDirectory() as tmp:
        prompt_file = os.path.join(tmp, "prompt.txt")
        common = ["--prompt-file", prompt_file, "--max-new-tokens", str(args.new_tokens), "--ignore-eos", "--policy", "full"]
        n_prompt, *_ = write_prompt_of(binary, prompt_file, args.tokens, common)
        positions = n_prompt + args.new_tokens - 1  # q/k rows: the prompt, then one per decode step
        rows = []
        for label, record in ways:
            path = os.path.join(tmp, label + ".h5")
            _, wall, _, _ = timed([binary, "trace", "--quiet", "--force", "--out", path, *common, *record])
            stored, raw = qk_bytes(path)
            rows.append({"way": label, "record": " ".join(record) or "(default)", "file_mb": os.path.getsize(path) / 1e6,
                         "qk_stored_mb": stored / 1e6, "qk_raw_mb": raw / 1e6, "wall_s": wall})
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n{n_prompt} prompt tokens + {args.new_tokens - 1} decode steps = {positions} positions, {os.cpu_count()} cores")
    print("| recording | file | qk/ stored (raw) | qk/ per 1K positions, stored (raw) | wall |")
    print("|---|---|---|---|---|")
    for r in rows:
        k = 1000.0 / positions
        print(f"| `{r['record']}` | {r['file_mb']:.1f} MB | {r['qk_stored_mb']:.1f} MB ({r['qk_raw_mb']:.1f} MB) | "
              f"{r['qk_stored_mb'] * k:.1f} MB ({r['qk_raw_mb'] * k:.1f} MB) | {r['wall_s']:.1f} s |")


if __name__ == "__main__":
    main()
