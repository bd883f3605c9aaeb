#!/usr/bin/env python3
"""kvscope's quantized KV cache against llama.cpp's, each against its own f16 cache (issue 37's proof item).

For every prompt (default: the three of sample_data/prompts) and both engines, on the same GGUF and the same
prompt token ids (kvscope's, handed to llama.cpp as ids), with the full cache:
  1. f16 cache, free greedy, N new tokens: the reference tokens and logits of that engine;
  2. the quantized cache (--type, default q8_0), free greedy: its tokens;
  3. the quantized cache teacher-forced on the engine's own f16 tokens: its logits on the same contexts.
Prints per prompt and engine: the greedy tokens' agreement (quantized vs f16 of the same engine, and kvscope vs
llama.cpp at the quantized type), and per step of 3 against 1: max |logit difference| and KL(P_f16 || P_quant)
of the next-token distribution (nats), summarised as max and mean over the steps. Where two runs' greedy tokens
part, it prints the top-2 margin of each run at that step: a near-tie (margin within the logit noise) is a
rounding difference, a wide margin a real one. Last, llama.cpp is also run teacher-forced on kvscope's f16 tokens
(at f16 and at the quantized type), and the engines' top-1 tokens and logits are compared at every step of that
one context: how far apart the two engines are before any cache type enters.

kvscope: `generate --cache-type T --force-tokens ... --logits-out F.npy`. llama.cpp (llama-cpp-python, the
version in bench/requirements.txt): `type_k`/`type_v` = GGML_TYPE_<T>, and flash attention on in both of its
runs, since llama.cpp stores a quantized V cache only with flash attention. With a quantized cache this
llama.cpp rotates each head's keys and queries, and its values (rotating the attention output back), by a 64 x 64
Hadamard matrix before it quantizes them (its log: `attn_rot_k = 1`, `attn_rot_v = 1`), which spreads a row's
outlier dimensions over all its blocks; kvscope stores the rows as they are unless --kvscope-rotation hadamard,
which gives its quantized parts (`--cache-type-k q4_0:rot=hadamard`, not its f16 runs) the same rotation, as
llama.cpp turns it on for quantized parts only. --llama-attn-rot off sets LLAMA_ATTN_ROT_DISABLE=1 for the
llama.cpp runs: the same block formats on the same rows in both engines (docs/quantized_cache.md, "Against
llama.cpp at q4_0 and q4_1").

Not part of make test (it needs llama.cpp): run it with the benchmarks' venv, e.g.
  .deps/bench-venv/bin/python bench/cache_type_vs_llamacpp.py --kvscope build/app/kvscope [--type q8_0] [--json out.json]
      [--llama-attn-rot off] [--kvscope-rotation hadamard] [--part keys|values]
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# One llama.cpp run in a child process (so a crash in llama.cpp names its run): prompt ids in, per-step logits out.
LLAMA_CHILD = r"""
import json, sys
import numpy as np
import llama_cpp
from llama_cpp import Llama
req = json.load(open(sys.argv[1]))
type_k, type_v = (getattr(llama_cpp, "GGML_TYPE_" + req[part].upper()) for part in ("type_k", "type_v"))
llm = Llama(model_path=req["model"], n_ctx=req["n_ctx"], n_batch=512, n_ubatch=512, n_threads=req["threads"],
            n_threads_batch=req["threads"], type_k=type_k, type_v=type_v, flash_attn=True, verbose=False,
            logits_all=True)  # scores are kept only with logits_all (0.3.36)
llm.eval(req["prompt"])
steps, tokens = [], []
forced = req["forced"]
for i in range(req["new_tokens"]):
    logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
    steps.append(logits)
    tok = forced[i] if forced else int(np.argmax(logits))
    tokens.append(tok)
    if i + 1 < req["new_tokens"]:
        llm.eval([tok])
np.save(req["logits"], np.stack(steps))
json.dump({"tokens": tokens}, open(req["out"], "w"))
"""


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def compare(reference, other):
    """Per step: max |dlogit| and KL(P_reference || P_other) in nats."""
    steps = min(len(reference), len(other))
    dmax = np.abs(reference[:steps].astype(np.float64) - other[:steps]).max(axis=1)
    lp, lq = log_softmax(reference[:steps]), log_softmax(other[:steps])
    kl = (np.exp(lp) * (lp - lq)).sum(axis=1)
    return dmax, kl


def top2_margin(logits):
    top = np.sort(logits.astype(np.float64))[-2:]
    return top[1] - top[0]


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


class Runner:
    def __init__(self, args, tmp):
        self.args, self.tmp, self.count = args, tmp, 0
        self.child = os.path.join(tmp, "llama_child.py")
        with open(self.child, "w") as f:
            f.write(LLAMA_CHILD)

    def path(self, suffix):
        self.count += 1
        return os.path.join(self.tmp, f"run{self.count}{suffix}")

    def kvscope(self, prompt_file, types, forced=None):
        logits = self.path(".npy")
        if self.args.kvscope_rotation == "hadamard":
            types = tuple(t if t == "f16" else f"{t}:rot=hadamard" for t in types)
        argv = [self.args.kvscope, "generate", "--model", self.args.model, "--prompt-file", prompt_file, "--json",
                "--ignore-eos", "--max-new-tokens", str(self.args.new_tokens), "--threads", str(self.args.threads),
                "--cache-type-k", types[0], "--cache-type-v", types[1], "--logits-out", logits]
        if forced:
            argv += ["--force-tokens", ",".join(map(str, forced))]
        res = subprocess.run(argv, capture_output=True, text=True)
        if res.returncode != 0:
            sys.exit(f"kvscope failed ({' '.join(argv)}):\n{res.stderr[-2000:]}")
        j = json.loads(res.stdout)
        return j["prompt_tokens"], j["generated_tokens"], np.load(logits)

    def llama(self, prompt_ids, types, forced=None):
        req_path, out_path, logits = self.path(".json"), self.path(".out.json"), self.path(".npy")
        req = {"model": self.args.model, "type_k": types[0], "type_v": types[1], "threads": self.args.threads,
               "prompt": prompt_ids,
               "new_tokens": self.args.new_tokens, "forced": forced or [], "logits": logits, "out": out_path,
               "n_ctx": len(prompt_ids) + self.args.new_tokens + 16}
        with open(req_path, "w") as f:
            json.dump(req, f)
        env = dict(os.environ)
        env.pop("LLAMA_ATTN_ROT_DISABLE", None)
        if self.args.llama_attn_rot == "off":
            env["LLAMA_ATTN_ROT_DISABLE"] = "1"
        res = subprocess.run([sys.executable, self.child, req_path], capture_output=True, text=True, env=env)
        if res.returncode != 0:
            sys.exit(f"llama.cpp (keys {types[0]}, values {types[1]}) failed:\n{res.stderr[-2000:]}")
        return json.load(open(out_path))["tokens"], np.load(logits)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvscope", default=os.path.join(ROOT, "build", "app", "kvscope"))
    models = sorted(glob.glob(os.path.join(ROOT, ".deps", "models", "*.gguf")))
    ap.add_argument("--model", default=models[0] if models else "")
    ap.add_argument("--prompts", default=os.path.join(ROOT, "sample_data", "prompts"))
    ap.add_argument("--type", default="q8_0", help="the quantized cache type both engines have (q8_0, q4_0, q4_1)")
    ap.add_argument("--part", choices=("both", "keys", "values"), default="both",
                    help="quantize keys and values (both), or only keys or only values (the other part f16), in "
                         "both engines: which part carries the quantized cache's effect")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--json", default="", help="also write every number to this file")
    ap.add_argument("--llama-attn-rot", choices=("on", "off"), default="on",
                    help="llama.cpp's Hadamard rotation of a quantized cache's rows (its default: on); off sets "
                         "LLAMA_ATTN_ROT_DISABLE=1 for its runs, so that both engines quantize the same rows")
    ap.add_argument("--kvscope-rotation", choices=("none", "hadamard"), default="none",
                    help="hadamard: kvscope stores its quantized parts Hadamard-rotated (`:rot=hadamard`), as "
                         "llama.cpp does by default; its f16 runs stay unrotated")
    args = ap.parse_args()
    if not args.model:
        sys.exit("no --model and no .deps/models/*.gguf")
    prompts = sorted(glob.glob(os.path.join(args.prompts, "*.txt")))
    if not prompts:
        sys.exit(f"no .txt prompts in {args.prompts}")

    tmp = tempfile.mkdtemp(prefix="kvscope-cachetype-")
    run = Runner(args, tmp)
    q = args.type
    f16 = ("f16", "f16")
    quant = (q if args.part != "values" else "f16", q if args.part != "keys" else "f16")
    report = {"model": args.model, "type": q, "part": args.part, "new_tokens": args.new_tokens,
              "llama_attn_rot": args.llama_attn_rot, "kvscope_rotation": args.kvscope_rotation, "prompts": {}}
    parts = "keys and values" if args.part == "both" else f"{args.part} only, the other part f16"
    print(f"model {os.path.basename(args.model)}, cache {q} ({parts}) against each engine's own f16 cache, "
          f"{args.new_tokens} new tokens, full cache, {args.threads} threads, llama.cpp's rotation of quantized "
          f"rows {args.llama_attn_rot}, kvscope's {args.kvscope_rotation}")
    print(f"{'prompt':<18} {'engine':<9} {'tokens':>6} {q + ' = f16 greedy':>16} "
          f"{'max|dlogit| max':>16} {'mean':>7} {'KL max':>9} {'KL mean':>9}")
    for prompt_file in prompts:
        name = os.path.splitext(os.path.basename(prompt_file))[0]
        prompt_ids, k16_tokens, k16_logits = run.kvscope(prompt_file, f16)
        _, kq_tokens, kq_free = run.kvscope(prompt_file, quant)
        _, _, kq_forced = run.kvscope(prompt_file, quant, forced=k16_tokens)
        l16_tokens, l16_logits = run.llama(prompt_ids, f16)
        lq_tokens, lq_free = run.llama(prompt_ids, quant)
        _, lq_forced = run.llama(prompt_ids, quant, forced=l16_tokens)
        # llama.cpp on kvscope's f16 tokens, so the two engines can be compared step by step on one context.
        _, l16_on_k = run.llama(prompt_ids, f16, forced=k16_tokens)
        _, lq_on_k = run.llama(prompt_ids, quant, forced=k16_tokens)
        entry = {"prompt_tokens": len(prompt_ids)}
        for engine, f16_tokens, q_tokens, ref, forced in (("kvscope", k16_tokens, kq_tokens, k16_logits, kq_forced),
                                                          ("llama.cpp", l16_tokens, lq_tokens, l16_logits, lq_forced)):
            dmax, kl = compare(ref, forced)
            diff = first_difference(q_tokens, f16_tokens)
            same = args.new_tokens if diff is None else diff
            entry[engine] = {"f16_tokens": f16_tokens, "quant_tokens": q_tokens, "quant_equals_f16_for": same,
                             "max_abs_dlogit": dmax.tolist(), "kl": kl.tolist()}
            print(f"{name:<18} {engine:<9} {len(prompt_ids):>6} {f'{same} of {args.new_tokens}':>16} "
                  f"{dmax.max():>16.4f} {dmax.mean():>7.4f} {kl.max():>9.2e} {kl.mean():>9.2e}")
        for cache, a, b, la, lb, ka, kb in ((q, kq_tokens, lq_tokens, kq_free, lq_free, kq_forced, lq_on_k),
                                            ("f16", k16_tokens, l16_tokens, k16_logits, l16_logits, k16_logits, l16_on_k)):
            # Free greedy runs: equal up to `diff`, so their logits there are on one context.
            diff = first_difference(a, b)
            cross = {"free_equal_for": args.new_tokens if diff is None else diff}
            if diff is None:
                line = f"free greedy tokens equal for all {args.new_tokens}"
            else:
                ma, mb = top2_margin(la[diff]), top2_margin(lb[diff])
                cross.update({"free_top2_margin_kvscope": ma, "free_top2_margin_llama": mb})
                line = (f"free greedy tokens equal for the first {diff}, then {a[diff]} vs {b[diff]} (top-2 margins "
                        f"there: kvscope {ma:.4f}, llama.cpp {mb:.4f})")
            # Teacher-forced on kvscope's f16 tokens: the engines' top-1 at every step on the same context.
            steps = min(len(ka), len(kb))
            top_a, top_b = ka[:steps].argmax(axis=1), kb[:steps].argmax(axis=1)
            between = np.abs(ka[:steps].astype(np.float64) - kb[:steps]).max(axis=1)
            parted = [int(i) for i in np.nonzero(top_a != top_b)[0]]
            cross.update({"forced_top1_equal": steps - len(parted), "forced_steps": steps,
                          "forced_max_abs_dlogit_between": between.tolist(),
                          "forced_parted": [{"step": i, "top2_margin_kvscope": top2_margin(ka[i]),
                                             "top2_margin_llama": top2_margin(kb[i])} for i in parted]})
            margins = ", ".join(f"step {d['step']}: {d['top2_margin_kvscope']:.4f} / {d['top2_margin_llama']:.4f}"
                                for d in cross["forced_parted"])
            print(f"{'':<18} {cache} kvscope vs llama.cpp: {line}; teacher-forced top-1 equal at "
                  f"{steps - len(parted)} of {steps} steps (max |dlogit| between engines {between.max():.3f}, mean "
                  f"{between.mean():.3f})" + (f"; top-2 margins (kvscope / llama.cpp) where they part: {margins}"
                                              if parted else ""))
            entry[f"cross_{cache}"] = cross
        report["prompts"][name] = entry
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
