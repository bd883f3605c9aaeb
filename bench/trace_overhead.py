#!/usr/bin/env python3
"""Cost of recording a trace: one ~2048-token prompt plus 64 decode steps on the default model, run with
recording off (`kvscope generate`) and on (`kvscope trace`, default record options), same policy.

Prints wall time of each, the ratio, the trace file size and the peak RSS of each (/usr/bin/time -v).
Targets (issue 5): overhead <= 25 %, file <= 200 MB.

    bench/trace_overhead.py [--build build] [--policy full] [--budget B] [--repeat 2] [--tokens 2048]

Runs alternate off/on and the fastest of each is reported, which damps noise from other load.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed(cmd):
    """Runs cmd under /usr/bin/time -v; returns (stdout, wall seconds, peak RSS in MiB, CPU seconds)."""
    res = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"command failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr[-3000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", res.stderr)
    h, m, s = wall.groups()
    seconds = int(h or 0) * 3600 + int(m) * 60 + float(s)
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", res.stderr).group(1))
    cpu = sum(float(re.search(rf"{k} time \(seconds\): ([\d.]+)", res.stderr).group(1)) for k in ("User", "System"))
    return res.stdout, seconds, rss_kb / 1024.0, cpu


def prompt_text(chars):
    folder = os.path.join(ROOT, "sample_data", "prompts")
    texts = [open(os.path.join(folder, f), encoding="utf-8").read().strip() for f in sorted(os.listdir(folder))]
    out, i = [], 0
    while sum(len(t) + 2 for t in out) < chars:
        out.append(texts[i % len(texts)])
        i += 1
    return "\n\n".join(out)[:chars]


def write_prompt_of(binary, prompt_file, tokens, common):
    """Writes sample prose of about `tokens` tokens (within 1 %) to prompt_file, measured by `kvscope generate
    --json <common>` with it (up to three tries, rescaling). Returns (prompt tokens, wall s, peak RSS MiB, CPU s) of
    the last generate run, which is the recording-off timing."""
    chars = int(tokens * 4.4)  # English prose here runs about 4.4 characters per token
    for _ in range(3):
        with open(prompt_file, "w", encoding="utf-8") as f:
            f.write(prompt_text(chars))
        out, wall, rss, cpu = timed([binary, "generate", "--json", *common])
        n_prompt = len(json.loads(out)["prompt_tokens"])
        if abs(n_prompt - tokens) <= tokens // 100:
            break
        chars = int(chars * tokens / n_prompt)
    return n_prompt, wall, rss, cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--policy", default="full")
    ap.add_argument("--budget", default="")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--record", default="", help="--record spec for the traced run")
    ap.add_argument("--gzip", type=int, default=1, help="deflate level of the trace (kvscope trace --gzip)")
    ap.add_argument("--passive", action="store_true",
                    help="OMP_WAIT_POLICY=passive for both runs: idle OpenMP threads sleep instead of spinning, so "
                         "CPU time measures work, which a shared machine distorts less than wall time")
    args = ap.parse_args()
    binary = os.path.join(args.build, "app", "kvscope")
    if args.passive:
        os.environ["OMP_WAIT_POLICY"] = "passive"
    if not os.path.exists(binary):
        sys.exit(f"no kvscope binary at {binary}; build first or pass --build")

    with tempfile.TemporaryDirectory() as tmp:
        prompt_file = os.path.join(tmp, "prompt.txt")
        trace_file = os.path.join(tmp, "run.h5")
        common = ["--prompt-file", prompt_file, "--max-new-tokens", "65", "--ignore-eos", "--policy", args.policy,
                  "--threads", str(args.threads)]
        if args.budget:
            common += ["--budget", args.budget]
        n_prompt, off_wall, off_rss, off_cpu = write_prompt_of(binary, prompt_file, args.tokens, common)
        off = [(off_wall, off_rss, off_cpu)]
        on = []
        record = (["--record", args.record] if args.record else []) + ["--gzip", str(args.gzip)]
        for i in range(args.repeat):
            if i > 0:
                _, w, r, c = timed([binary, "generate", "--json", *common])
                off.append((w, r, c))
            _, w, r, c = timed([binary, "trace", "--quiet", "--force", "--out", trace_file, *common, *record])
            on.append((w, r, c))
        size_mb = os.path.getsize(trace_file) / 1e6
        info = json.loads(subprocess.run([binary, "inspect", "--json", trace_file], capture_output=True, text=True,
                                         check=True).stdout)["runs"][0]["attributes"]
        run_ms = float(info["prefill_ms"]) + float(info["decode_ms"])
        recorder_ms = float(info.get("recorder_ms", "nan"))
        wait_ms = float(info.get("writer_wait_ms", "nan"))
        off_wall, off_rss, _ = min(off)
        on_wall, on_rss, _ = min(on)
        off_cpu, on_cpu = min(o[2] for o in off), min(o[2] for o in on)
        overhead = (on_wall / off_wall - 1.0) * 100.0
        print(f"prompt {n_prompt} tokens + 64 decode steps, policy {args.policy} {args.budget}, "
              f"{os.cpu_count()} cores, best of {args.repeat}")
        print(f"recording off: {off_wall:8.1f} s   peak RSS {off_rss:7.0f} MiB")
        print(f"recording on : {on_wall:8.1f} s   peak RSS {on_rss:7.0f} MiB")
        print(f"wall ratio   : {on_wall / off_wall:8.3f}   (overhead {overhead:+.1f} %, target <= 25 %)")
        print(f"CPU time     : {off_cpu:8.1f} s off, {on_cpu:.1f} s on, ratio {on_cpu / off_cpu:.3f} "
              f"(user + system; steadier than wall time on a shared machine)")
        print(f"recorder     : {recorder_ms / 1000:8.1f} s inside the recorder, summed over the compute threads, "
              f"during the traced run's {run_ms / 1000:.1f} s (its direct cost, measured inside the run), of which "
              f"{wait_ms / 1000:.1f} s waiting for the writer thread")
        print(f"trace file   : {size_mb:8.1f} MB (target <= 200 MB)")
        print("all runs (off, on) seconds: " + ", ".join(f"{a[0]:.1f}" for a in off) + " | " +
              ", ".join(f"{b[0]:.1f}" for b in on))


if __name__ == "__main__":
    main()
