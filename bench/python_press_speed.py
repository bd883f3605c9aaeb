#!/usr/bin/env python3
"""What each shipped Python press costs (issue 36, item 4: at most 1.3x its C++ twin on the 947-token prompt).

Runs `kvscope generate` of the 947-token prompt (the default model's tokens of bench/slider_latency.py's long
prompt: the three sample_data/prompts twice, on one line) under
every policy file of examples/policies (as `kvscope policies` lists them) at --compression-ratio 0.5, its C++
twin where one exists (h2o_numpy.py: h2o, snapkv_numpy.py: snapkv, expected_attention.py: expected_attention,
non_causal_attn.py: non_causal_attn, compactor.py: compactor), the full cache, and snapkv (a C++
post-prefill press at the same budget, the stand-in for a press that has no twin). All runs go round-robin,
N rounds, so a busy moment hurts every policy; each number is the best whole run (prefill + decode, the run's
own --json timings; the interpreter's start and imports happen before the run and are not in them).
Prints each press's time, its ratio to its twin (or to snapkv and to the full cache), and the extra time per
layer against the full cache ((press - full) / layers), and flags ratios above 1.3.

    bench/python_press_speed.py build/app/kvscope [--rounds 3] [--new-tokens 32] [--compression-ratio 0.5]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from slider_latency import long_prompt

TWINS = {"python:h2o_numpy": "h2o", "python:snapkv_numpy": "snapkv", "python:expected_attention": "expected_attention",
         "python:non_causal_attn": "non_causal_attn", "python:compactor": "compactor"}
STAND_IN = "snapkv"
LIMIT = 1.3


def generate(binary, prompt_file, policy, a):
    cmd = [binary, "generate", "--prompt-file", prompt_file, "--policy", policy, "--max-new-tokens", str(a.new_tokens),
           "--ignore-eos", "--json"]
    if policy != "full":
        cmd += ["--compression-ratio", str(a.compression_ratio)]
    res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_WAIT_POLICY": "passive"})
    if res.returncode != 0:
        sys.exit(f"{policy}: kvscope failed: {res.stderr.strip()[-500:]}")
    out = json.loads(res.stdout)
    t = out["timings"]
    return t["prefill_ms"] + t["decode_ms"], len(out["prompt_tokens"]), len(out["cache"]["layer_bytes"])


def shipped_presses(binary):
    res = subprocess.run([binary, "policies", "--json"], capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"kvscope policies failed: {res.stderr.strip()}")
    files = json.loads(res.stdout).get("files", [])
    broken = [f["name"] + ": " + f["error"] for f in files if "error" in f]
    if broken:
        sys.exit("shipped policy files that do not load:\n  " + "\n  ".join(broken))
    return [(f["name"], "python:" + f["file"], f.get("ports", "")) for f in files]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kvscope")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--compression-ratio", type=float, default=0.5)
    ap.add_argument("--only", nargs="*", help="press names (python:STEM) to time; default all shipped files")
    a = ap.parse_args()
    presses = [p for p in shipped_presses(a.kvscope) if not a.only or p[0] in a.only]
    runs = {"full": "full", STAND_IN: STAND_IN, **{TWINS[n]: TWINS[n] for n, _, _ in presses if n in TWINS}}
    runs.update({name: spec for name, spec, _ in presses})
    best = {name: float("inf") for name in runs}
    tokens = layers = None
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as prompt:
        prompt.write(long_prompt())
        prompt.flush()
        for r in range(a.rounds):
            for name, spec in runs.items():
                ms, tokens, layers = generate(a.kvscope, prompt.name, spec, a)
                best[name] = min(best[name], ms)
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)

    print(f"slider_latency.py's long prompt: {tokens} prompt tokens, {layers} layers, {a.new_tokens} new tokens, "
          f"--compression-ratio {a.compression_ratio}; best of {a.rounds} whole runs (prefill + decode), "
          f"OMP_WAIT_POLICY=passive")
    print(f"full cache {best['full']:.1f} ms; {STAND_IN} (C++) {best[STAND_IN]:.1f} ms")
    print(f"{'press':28} {'ports':32} {'ms':>8} {'against':14} {'its ms':>8} {'ratio':>6} {'/full':>6} "
          f"{'+ms/layer':>9}")
    over = []
    for name, _, ports in presses:
        twin = TWINS.get(name, STAND_IN)
        ratio = best[name] / best[twin]
        per_layer = (best[name] - best["full"]) / layers
        against = twin + (" (twin)" if name in TWINS else "")
        flag = "  > 1.3" if ratio > LIMIT else ""
        print(f"{name:28} {ports or '-':32} {best[name]:8.1f} {against:14} {best[twin]:8.1f} {ratio:6.2f} "
              f"{best[name] / best['full']:6.2f} {per_layer:9.1f}{flag}")
        if ratio > LIMIT:
            over.append(name)
    print("over 1.3x: " + (", ".join(over) if over else "none"))


if __name__ == "__main__":
    main()
