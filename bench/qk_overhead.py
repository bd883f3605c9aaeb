#!/usr/bin/env python3
"""Cost of recording exact attention's inputs (`--record qk=on`: post-RoPE queries and keys in float16 and each
row's log-sum-exp) against today's default recording, at several prompt lengths, on the default model: one prompt
of N tokens plus 64 decode steps, run three ways with the same policy:
  off      `kvscope generate` (nothing recorded)
  default  `kvscope trace` with the default record options (pooled maps, statistics, similarity, kept mask)
  qk       `kvscope trace --record qk=on` (the same plus qk/)

Prints per length: wall and CPU seconds, the recorder's own milliseconds (`recorder_ms`), file sizes, and the
bytes the qk/ group takes on disk (h5py's storage size, compressed) against its raw float16 size.

    bench/qk_overhead.py [--build build] [--tokens 1024,4096,8192] [--policy full]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trace_overhead import ROOT, timed, write_prompt_of  # noqa: E402


def qk_bytes(trace_file):
    """(stored, raw) bytes of every dataset under /runs/*/qk, through h5py (run with .deps/venv/bin/python)."""
    import h5py

    stored = raw = 0
    with h5py.File(trace_file, "r") as f:
        for run in f["runs"].values():
            if "qk" not in run:
                continue

            def visit(_, obj):
                nonlocal stored, raw
                if isinstance(obj, h5py.Dataset):
                    stored += obj.id.get_storage_size()
                    raw += obj.size * obj.dtype.itemsize

            run["qk"].visititems(visit)
    return stored, raw


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--tokens", default="1024,4096,8192")
    ap.add_argument("--policy", default="full")
    ap.add_argument("--new-tokens", type=int, default=65)
    args = ap.parse_args()
    binary = os.path.join(args.build, "app", "kvscope")
    if not os.path.exists(binary):
        sys.exit(f"no kvscope binary at {binary}; build first or pass --build")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        prompt_file = os.path.join(tmp, "prompt.txt")
        for tokens in (int(t) for t in args.tokens.split(",")):
            common = ["--prompt-file", prompt_file, "--max-new-tokens", str(args.new_tokens), "--ignore-eos",
                      "--policy", args.policy]
            n_prompt, off_wall, _, off_cpu = write_prompt_of(binary, prompt_file, tokens, common)
            row = {"tokens": n_prompt, "off_wall": off_wall, "off_cpu": off_cpu}
            for label, record in (("default", []), ("qk", ["--record", "qk=on"])):
                trace_file = os.path.join(tmp, f"{label}.h5")
                _, wall, rss, cpu = timed([binary, "trace", "--quiet", "--force", "--out", trace_file, *common, *record])
                info = json.loads(subprocess.run([binary, "inspect", "--json", trace_file], capture_output=True,
                                                 text=True, check=True).stdout)["runs"][0]["attributes"]
                row[label] = {"wall": wall, "cpu": cpu, "rss": rss, "mb": os.path.getsize(trace_file) / 1e6,
                              "recorder_ms": float(info["recorder_ms"]), "writer_wait_ms": float(info["writer_wait_ms"]),
                              "qk": qk_bytes(trace_file)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"\npolicy {args.policy}, {args.new_tokens - 1} decode steps, {os.cpu_count()} cores")
    print("| prompt tokens | file, default | file, qk=on | of which qk/ (raw f16) | wall off / default / qk=on | "
          "CPU off / default / qk=on | recorder default / qk=on |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        d, q = r["default"], r["qk"]
        print(f"| {r['tokens']} | {d['mb']:.1f} MB | {q['mb']:.1f} MB | {q['qk'][0] / 1e6:.1f} MB ({q['qk'][1] / 1e6:.1f} MB) | "
              f"{r['off_wall']:.1f} / {d['wall']:.1f} / {q['wall']:.1f} s | {r['off_cpu']:.1f} / {d['cpu']:.1f} / {q['cpu']:.1f} s | "
              f"{d['recorder_ms'] / 1000:.1f} / {q['recorder_ms'] / 1000:.1f} s |")


if __name__ == "__main__":
    main()
