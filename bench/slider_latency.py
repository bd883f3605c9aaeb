#!/usr/bin/env python3
"""The live budget slider, measured as a user sees it: the real window under Xvfb runs a scripted
session (`kvscope gui --script ... --timing-log ...`), changes the budget of a ~1K-token prompt with 32
new tokens several times, and the window's own timing log gives, per change:
  - decision: from the budget change to the first frame drawn showing what the policy kept (end of prefill),
  - result:   from the budget change to the first frame drawn showing the finished run,
  - fps while a run is in progress (frames per second of wall time, from frame intervals), the lowest
    (from the longest frame interval), and how many frames per second were drawn: the window draws a frame
    only when it differs from the one on screen (viewers/redraw_gate.h); a second session with
    --redraw-every-frame, the window as it was before the gate, is measured in the same run for comparison.
The window records q/k by default (exact attention at any zoom); a third session with `--record qk=off` gives,
in the same run, what that recording costs each change (the "qk off" column).
The peer, measured in the same run: a bare `kvscope generate` of the same job (model load included, as a
user would run it), best of 3. Ratios below 1 mean the window answers faster than a fresh command line run.

Post-prefill policies (snapkv, h2o, tova, ...) replay the prompt's captured prefill ("replayed"); block-wise
policies (caote, h2o:block=N) run their prefill again, taking the blocks computed before their first eviction
from the previous run of the same prompt and block size ("blocks"; engine/block_prefix.h), or all of it
("computed").

Usage: bench/slider_latency.py --kvscope build/app/kvscope [--threads 2] [--repeats 3]
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


def long_prompt():
    # The three shipped sample prompts, twice: about 1,000 tokens of varied text, on one line for the script.
    texts = [p.read_text() for p in sorted((ROOT / "sample_data" / "prompts").glob("*.txt"))]
    return ((" ".join(texts) + " ") * 2).replace("\n", " ").strip()


def bare_generate(kvscope, prompt, policy, budget, threads):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(prompt)
    best = None
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([kvscope, "generate", "--prompt-file", f.name, "--policy", policy, "--budget", budget,
                        "--max-new-tokens", "32", "--ignore-eos", "--threads", str(threads)],
                       check=True, capture_output=True)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    os.unlink(f.name)
    return best


def gui_session(kvscope, prompt, changes, threads, extra=()):
    """changes: [(policy, budget)], the first one warms up (model load, capture). Returns per-change timings."""
    work = pathlib.Path(tempfile.mkdtemp())
    lines = [f"prompt {prompt}", "tokens 32"]
    for policy, budget in changes:
        if policy.startswith("save-file "):  # an editor saves a Python policy file; the window reloads it
            lines += [policy, "frames 3", "wait 600"]
        else:
            lines += [f"policy {policy}", f"budget {budget}", "run", "wait 600"]
    lines.append("quit")
    (work / "s.kvs").write_text("\n".join(lines) + "\n")
    log = work / "timing.jsonl"
    env = dict(os.environ, KVSCOPE_SOURCE_DIR=str(ROOT))
    done = subprocess.run(["xvfb-run", "-a", "-s", "-screen 0 1600x1000x24", kvscope, "gui", "--no-run", "--script",
                           str(work / "s.kvs"), "--timing-log", str(log), "--threads", str(threads), *extra],
                          capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"the scripted window failed ({done.returncode}):\n{done.stderr[-3000:]}")
    events = [json.loads(line) for line in log.read_text().splitlines()]
    out = []
    # Each change: the 'budget' command starts it (policy and budget are set together, then 'run'), or the
    # 'save-file' of a policy file.
    starts = [i for i, e in enumerate(events)
              if e["event"] == "command" and e["text"].startswith(("budget ", "save-file "))]
    for n, i in enumerate(starts):
        t0 = events[i]["t"]
        end = starts[n + 1] if n + 1 < len(starts) else len(events)
        decided = result = None
        prefill = ""
        busy_frames = []
        drawn = 0
        for e in events[i:end]:
            if e["event"] in ("snapshot", "result") and e["slot"] == "live":
                if decided is None and e["decided"]:
                    decided = e["t"]
                if e["event"] == "result" and result is None:
                    result = e["t"]
                    prefill = e.get("prefill", "")
            if e["event"] == "frame" and e["busy"]:
                busy_frames.append(e["interval_ms"])
                drawn += bool(e.get("drawn", True))
        def shown(t):  # the first frame drawn after the update arrived: until then the screen shows the old one
            if t is None:
                return None
            for e in events[i:]:
                if e["event"] == "frame" and e["t"] >= t and e.get("drawn", True):
                    return e["t"] - t0
            return t - t0
        fps = 1000.0 * len(busy_frames) / sum(busy_frames) if busy_frames else float("nan")
        out.append({"policy": changes[n][0], "budget": changes[n][1], "decision_s": shown(decided),
                    "result_s": shown(result), "busy_fps": fps, "min_fps": 1000.0 / max(busy_frames) if busy_frames else float("nan"),
                    "drawn_per_s": 1000.0 * drawn / sum(busy_frames) if busy_frames else float("nan"),
                    "prefill": prefill})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", default=str(ROOT / "build" / "app" / "kvscope"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--worker-nice", type=int, default=None, help="kvscope gui --worker-nice (default: the window's)")
    args = ap.parse_args()
    prompt = long_prompt()
    n_tokens = json.loads(subprocess.run([args.kvscope, "generate", "--prompt", prompt, "--max-new-tokens", "0", "--json"],
                                         check=True, capture_output=True, text=True).stdout)["prompt_tokens"]
    print(f"prompt: {len(n_tokens)} tokens, 32 new tokens, {args.threads} threads; window under Xvfb (software GL)")
    changes = [("snapkv", "20%"),  # warm-up: model load and the prefill capture
               ("snapkv", "10%"), ("snapkv", "30%"), ("h2o", "20%"), ("tova", "10%"), ("pyramidkv", "25%"),
               ("cake", "15%"), ("kvmerger", "50%"),
               ("caote", "20%"), ("caote", "30%"), ("caote", "10%"), ("h2o:block=64", "20%"), ("h2o:block=64", "30%")]
    # A Python policy file edited while the window shows it (issue 22): key norms, then the numpy H2O saved
    # over it. The saved file's run replays the prefill like any post-prefill policy.
    work = pathlib.Path(tempfile.mkdtemp())
    examples = ROOT / "examples" / "policies"
    mine = work / "mine.py"
    mine.write_text((examples / "key_norm.py").read_text())
    changes += [(f"python:{mine}", "20%"), (f"save-file {examples / 'h2o_numpy.py'} {mine}", "20%"),
                (f"save-file {examples / 'snapkv_numpy.py'} {mine}", "20%")]
    nice = [] if args.worker_nice is None else ["--worker-nice", str(args.worker_nice)]
    timings = gui_session(args.kvscope, prompt, changes, args.threads, nice)
    every = gui_session(args.kvscope, prompt, changes, args.threads, nice + ["--redraw-every-frame"])
    no_qk = gui_session(args.kvscope, prompt, changes, args.threads, nice + ["--record", "qk=off"])
    for t in (timings, every, no_qk):
        if len(t) != len(changes) or any(x["result_s"] is None for x in t):
            sys.exit(f"the timing log misses results: {t}")
    peers = {}
    print(f"{'change':<26}{'prefill':<10}{'decision s':>11}{'result s':>9}{'generate s':>11}{'ratio':>6}{'fps':>6}"
          f"{'min fps':>8}{'drawn/s':>8} | every frame drawn: {'result s':>8}{'fps':>6}{'min fps':>8} | qk off: "
          f"{'result s':>8}")
    for t, e, q in zip(timings[1:], every[1:], no_qk[1:]):
        if t["policy"].startswith("save-file "):  # the peer: the saved file, run from the command line
            t["policy"] = e["policy"] = "python:" + t["policy"].split()[1]
        key = (t["policy"], t["budget"])
        if key not in peers:
            peers[key] = bare_generate(args.kvscope, prompt, t["policy"], t["budget"], args.threads)
        ratio = t["result_s"] / peers[key] if t["result_s"] else float("nan")
        kind = ("replayed" if t["prefill"].startswith("replayed") else
                "blocks" if "from a capture" in t["prefill"] else "computed")
        label = ("python:" + pathlib.Path(t["policy"][7:]).stem) if t["policy"].startswith("python:") else t["policy"]
        print(f"{label + ' ' + t['budget']:<26}{kind:<10}{t['decision_s']:>11.2f}{t['result_s']:>9.2f}"
              f"{peers[key]:>11.2f}{ratio:>6.2f}{t['busy_fps']:>6.1f}{t['min_fps']:>8.1f}{t['drawn_per_s']:>8.1f} | "
              f"{'':>19}{e['result_s']:>8.2f}{e['busy_fps']:>6.1f}{e['min_fps']:>8.1f} | {'':>8}{q['result_s']:>8.2f}")
    for label, runs in (("gated", timings), ("every frame drawn", every), ("gated, qk off", no_qk)):
        post = [t["result_s"] for t in runs[1:] if t["prefill"].startswith("replayed")]
        other = [t["result_s"] for t in runs[1:] if not t["prefill"].startswith("replayed")]
        lowest = min(t["min_fps"] for t in runs[1:])
        if post:
            print(f"{label}: post-prefill policies: result median {statistics.median(post):.2f} s, max {max(post):.2f} s "
                  f"(target < 1 s)")
        if other:
            print(f"{label}: block-wise policies:   result median {statistics.median(other):.2f} s, max {max(other):.2f} s "
                  f"(target < 2 s)")
        print(f"{label}: lowest fps during runs {lowest:.1f} (target >= 20)")


if __name__ == "__main__":
    sys.exit(main())
