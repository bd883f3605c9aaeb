#!/usr/bin/env python3
"""RULER cells per minute: `kvscope eval ruler` against NVIDIA kvpress's own pipeline, on the same samples.

A cell is one (policy, compression) evaluated on every sample. Both engines run here, one after the other, on
the CPU with one thread each (kvscope with OMP_NUM_THREADS=1, torch with set_num_threads(1)), on the same model
(kvscope the default GGUF, kvpress the f32 Hugging Face folder made from it) and the same samples:

  * the samples come from kvscope: `eval ruler --length 1024 --samples 4 --seed 42 --tasks
    niah_single_1,niah_multikey_1,vt --protocol query-agnostic --write-samples` (the first, full-cache cell);
  * both use the query-agnostic split: the context (chat template start + the input up to its last line
    break) is prefilled and compressed alone; then the question (the input's last line), the end of the user
    turn, the assistant's turn start and RULER's answer prefix are appended and greedy decoding follows.
    kvpress's `kv-press-text-generation` pipeline does exactly that (`pipe(context, question=...,
    answer_prefix=..., press=...)`); the script checks, per sample, that kvpress's context ids and question
    ids equal kvscope's prompt_ids and appended_ids;
  * policies at a matching compression: kvscope `--budget 50%` keeps half the context (rounded), kvpress
    compression_ratio=0.5 removes half (kept = int(n x 0.5)); parameters set to kvpress's defaults:
      snapkv        `snapkv:window=64,kernel=5`      SnapKVPress(window_size=64, kernel_size=5)
      knorm         `plugin:build/plugins/key_norm_plugin.so` (the KnormPress scorer, no sinks or window)
                                                     KnormPress()
      streaming_llm `streaming_llm:sinks=4,decode_evict=false`  StreamingLLMPress(n_sink=4)
    (decode_evict=false: kvpress compresses the context once and never evicts while decoding); and `full`
    (no press) as the baseline.
  * scores: RULER's string_match_all (tools/make_ruler_transformers_golden.py) on both predictions. kvpress
    stops at generation_config's eos (2, <|im_end|>) only; kvscope also at <|endoftext|>.

Timing: kvscope's seconds per cell are the wall time of the whole `eval ruler` process (start, model load,
sample generation, all samples); kvpress's are the pipeline calls over all samples with the model already
loaded (its one-off load is printed separately).

  /tmp/kvpress-venv/bin/python bench/ruler_vs_kvpress.py [--samples 4] [--ratios 0.5] [--policies ...]
    [--json OUT.json]

About 8 minutes with the defaults on one core (12 samples, 4 policies, 2 engines).
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tools"))
from make_ruler_transformers_golden import string_match_all  # noqa: E402  RULER's metric, restated there

TASKS = "niah_single_1,niah_multikey_1,vt"
KNORM_PLUGIN = REPO_ROOT / "build" / "plugins" / "key_norm_plugin.so"


def policies(ratio):
    from kvpress import KnormPress, SnapKVPress, StreamingLLMPress

    return {
        "full": ("full", None),
        "snapkv": ("snapkv:window=64,kernel=5", SnapKVPress(compression_ratio=ratio, window_size=64, kernel_size=5)),
        "knorm": (f"plugin:{KNORM_PLUGIN}", KnormPress(compression_ratio=ratio)),
        "streaming_llm": ("streaming_llm:sinks=4,decode_evict=false", StreamingLLMPress(compression_ratio=ratio, n_sink=4)),
    }


def run_kvscope(binary, args, spec, budget, out_jsonl):
    cmd = [str(binary), "eval", "ruler", "--length", str(args.length), "--samples", str(args.samples), "--seed",
           str(args.seed), "--tasks", args.tasks, "--protocol", "query-agnostic", "--policy", spec,
           "--write-samples", str(out_jsonl), "--json"]
    if budget:
        cmd += ["--budget", budget]
    env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
    start = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO_ROOT)
    seconds = time.perf_counter() - start
    if res.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr[-1500:]}")
    samples = [json.loads(line) for line in out_jsonl.read_text().splitlines() if line.strip()]
    return samples, seconds


def split(sample):
    """The input's context and question: the question is the input's last line, with its line break."""
    at = sample["input"].rfind("\n")
    return sample["input"][:at], sample["input"][at:]


def run_kvpress(pipe, samples, press):
    preds = []
    start = time.perf_counter()
    for s in samples:
        context, question = split(s)
        out = pipe(context, question=question, answer_prefix=s["answer_prefix"], press=press,
                   max_new_tokens=s["max_new_tokens"])
        preds.append(out["answer"])
    return preds, time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvscope", type=Path, default=REPO_ROOT / "build" / "app" / "kvscope")
    ap.add_argument("--hf", type=Path, default=REPO_ROOT / "build" / "fixtures" / "smollm2-hf" / "f32")
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--tasks", default=TASKS)
    ap.add_argument("--ratios", default="0.5", help="kvpress compression ratios (kvscope budget = 1 - ratio)")
    ap.add_argument("--policies", default="full,snapkv,knorm,streaming_llm")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()

    import torch
    import transformers
    import kvpress  # noqa: F401  registers the kv-press-text-generation pipeline
    from importlib.metadata import version
    from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(args.hf, dtype=torch.float32, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(args.hf)
    pipe = pipeline("kv-press-text-generation", model=model, tokenizer=tokenizer, device="cpu")
    load_seconds = time.perf_counter() - t0
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, kvpress {version('kvpress')}, "
          f"torch threads {torch.get_num_threads()}; kvpress model load {load_seconds:.1f} s", flush=True)

    rows = []
    wanted = args.policies.split(",")
    ratios = [float(r) for r in args.ratios.split(",")]
    with tempfile.TemporaryDirectory(prefix="ruler_vs_kvpress_") as tmp:
        tmp = Path(tmp)
        cells = [("full", None)] if "full" in wanted else []
        cells += [(p, r) for r in ratios for p in wanted if p != "full"]
        reference = None
        for name, ratio in cells:
            spec, press = policies(ratio or 0.0)[name]
            budget = None if ratio is None else f"{round((1 - ratio) * 100)}%"
            samples, kv_seconds = run_kvscope(args.kvscope, args, spec, budget, tmp / f"{name}_{ratio}.jsonl")
            if reference is None:
                reference = samples
                same_ids = 0
                for s in samples:  # the pipeline's own tokenization of the split equals kvscope's ids
                    context, question = split(s)
                    ids = pipe.preprocess(context, questions=[question], answer_prefix=s["answer_prefix"],
                                          max_context_length=10**9)
                    same_ids += (ids["context_ids"][0].tolist() == s["prompt_ids"]
                                 and ids["questions_ids"][0][0].tolist() == s["appended_ids"])
                print(f"{len(samples)} samples; kvpress's context and question ids equal kvscope's prompt and "
                      f"appended ids for {same_ids} of them", flush=True)
            elif [s["input"] for s in samples] != [s["input"] for s in reference]:
                sys.exit("kvscope generated different samples for another policy")
            preds, kp_seconds = run_kvpress(pipe, reference, None if ratio is None else press)
            kv_scores = [s["score"] for s in samples]
            kp_scores = [string_match_all(p, s["outputs"]) for p, s in zip(preds, reference)]
            row = {"policy": name, "kvscope_spec": spec, "budget": budget or "100%", "compression_ratio": ratio or 0.0,
                   "samples": len(samples), "kvscope_seconds": round(kv_seconds, 2),
                   "kvpress_seconds": round(kp_seconds, 2), "ratio_kvpress_over_kvscope": round(kp_seconds / kv_seconds, 2),
                   "kvscope_cells_per_minute": round(60 / kv_seconds, 3), "kvpress_cells_per_minute": round(60 / kp_seconds, 3),
                   "kvscope_mean_score": round(100 * sum(kv_scores) / len(kv_scores), 2),
                   "kvpress_mean_score": round(100 * sum(kp_scores) / len(kp_scores), 2),
                   "same_predictions": sum(p == s["prediction"] for p, s in zip(preds, samples)),
                   "same_scores": sum(a == b for a, b in zip(kv_scores, kp_scores))}
            rows.append(row)
            print(json.dumps(row), flush=True)

    print()
    print(f"RULER {args.tasks} at {args.length} tokens, {args.samples} samples per task, query-agnostic, 1 thread each "
          f"({platform.processor() or platform.machine()})")
    head = f"{'policy':14s} {'budget':>6s} {'kvscope s/cell':>14s} {'kvpress s/cell':>14s} {'kvpress/kvscope':>15s} " \
           f"{'kvscope score':>13s} {'kvpress score':>13s} {'same pred':>9s}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['policy']:14s} {r['budget']:>6s} {r['kvscope_seconds']:14.1f} {r['kvpress_seconds']:14.1f} "
              f"{r['ratio_kvpress_over_kvscope']:15.2f} {r['kvscope_mean_score']:13.2f} {r['kvpress_mean_score']:13.2f} "
              f"{r['same_predictions']:>4d}/{r['samples']}")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "kvpress_load_seconds": round(load_seconds, 2),
                                         "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                                                      "kvpress": version("kvpress")}}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
