#!/usr/bin/env python3
"""Golden RULER full-cache answers from Hugging Face transformers, for tests/python/test_ruler_vs_transformers.py.

An independent reference for `kvscope eval ruler`'s full-cache scores: kvscope only supplies the samples (the
exact token ids it prefills, chat template included); the answers come from transformers' own greedy
`generate` on the f32 Hugging Face folder of the same model, and the scores from RULER's string_match_all
restated below from NVIDIA/RULER (scripts/eval/evaluate.py postprocess_pred, scripts/eval/synthetic/constants.py
string_match_all).

How to run (from the repository root; the venv is the kvpress one, tools/requirements-kvpress.txt):

    /tmp/kvpress-venv/bin/python tools/make_ruler_transformers_golden.py
    # -> tests/fixtures/ruler_transformers/golden.json   (about 2-3 minutes on one CPU thread)

Options: --kvscope PATH (default build/app/kvscope), --hf DIR (default build/fixtures/smollm2-hf/f32, made by
the build from the GGUF with tools/gguf_to_hf_folder.py), --out FILE.

What it does:
  1. Runs `kvscope eval ruler --length 768 --samples 3 --seed 7 --tasks <all but vt, cwe> --write-samples TMP
     --json` and the same with `--length 1024 --tasks vt,cwe` (their worked examples need the room): full cache,
     query-aware, the default chat template, OMP_NUM_THREADS=1; 33 samples. Reads every sample's prompt_ids.
  2. Loads the f32 folder with transformers (torch.float32, attn_implementation="eager", CPU,
     torch.set_num_threads(1)) and, per sample, runs `model.generate` from exactly those prompt_ids with
     do_sample=False, num_beams=1, max_new_tokens = the sample's.
  3. Stopping: kvscope stops at the model's end-of-generation tokens, i.e. the GGUF's EOS (id 2, <|im_end|>)
     and every control token spelled like an end of turn (core/model/tokenizer_bpe.cpp is_end_of_turn_text:
     <|im_end|>, <|endoftext|>, <|eot_id|>, <|eom_id|>, <|end|>, </s>, <end_of_turn>, <|end_of_text|>); on
     SmolLM2 that is {2 <|im_end|>, 0 <|endoftext|>}. The folder's generation_config.json names only
     eos_token_id 2, so the script passes eos_token_id = generation_config's id(s) plus the special tokens of
     the folder's tokenizer with those spellings: [2, 0] here (recorded as `stop_ids`).
  4. The prediction is the new tokens decoded with skip_special_tokens=False (clean_up_tokenization_spaces
     False), after dropping a final stop token; it is scored with string_match_all on RULER's 0-1 per-sample
     scale (RULER's task score is the mean x 100).
  5. Near ties: for every generated token the script records the top-1 minus top-2 raw logit margin; per
     sample the smallest margin and its step go to the golden. Where kvscope's own prediction of that run
     differs from transformers', the first differing step is located and its margin recorded; a sample whose
     margin there is < 1e-3 is a genuine near tie and is listed in `near_ties` (the test accepts exactly
     those); any other difference makes the script stop with a report instead of writing a golden.

Reruns with the same versions, CPU and binary give the same file.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference_model import sha256_file  # noqa: E402  (tools/ is not a package)

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_KVSCOPE = REPO_ROOT / "build" / "app" / "kvscope"
DEFAULT_HF = REPO_ROOT / "build" / "fixtures" / "smollm2-hf" / "f32"
DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "ruler_transformers" / "golden.json"
GGUF = REPO_ROOT / ".deps" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
# Everything after the binary; the test runs the same arguments (plus --write-samples FILE). cwe and vt need
# more room than 768 tokens (their worked examples: cwe's list, vt's 500-token chain, which kvscope leaves out
# below about 900 tokens), so they run at 1024; the other nine tasks at 768.
TASKS_SHORT = ["niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2",
             "niah_multikey_3", "niah_multivalue", "niah_multiquery", "fwe"]
KVSCOPE_RUNS = [
    ["eval", "ruler", "--length", "768", "--samples", "3", "--seed", "7", "--tasks", ",".join(TASKS_SHORT), "--json"],
    ["eval", "ruler", "--length", "1024", "--samples", "3", "--seed", "7", "--tasks", "vt,cwe", "--json"],
]
END_OF_TURN_TEXTS = ["<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "</s>",
                     "<end_of_turn>", "<|end_of_text|>"]
NEAR_TIE = 1e-3
SCHEMA_VERSION = 1


# ---------------------------------------------------------------------------------------------------------
# RULER's scoring, restated: evaluate.py cleans a prediction (strip, every character in \x00-\x1f becomes a
# newline, strip again); string_match_all gives each sample the share of its expected outputs that occur in
# the cleaned prediction, both sides lower-cased with Python's str.lower; the task score is the mean x 100.
# ---------------------------------------------------------------------------------------------------------
_CONTROL = re.compile(r"[\x00-\x1f]")


def ruler_clean(prediction: str) -> str:
    return _CONTROL.sub("\n", prediction.strip()).strip()


def string_match_all(prediction: str, outputs: list[str]) -> float:
    text = ruler_clean(prediction).lower()
    return sum(1.0 for r in outputs if r.lower() in text) / len(outputs)




def run_kvscope(kvscope: Path, tmp: Path) -> tuple[list[dict], float]:
    env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
    samples = []
    start = time.perf_counter()
    for i, args in enumerate(KVSCOPE_RUNS):
        jsonl = tmp / f"samples{i}.jsonl"
        res = subprocess.run([str(kvscope), *args, "--write-samples", str(jsonl)], capture_output=True, text=True,
                             env=env)
        if res.returncode != 0:
            sys.exit(f"kvscope {' '.join(args)} failed (exit {res.returncode}): {res.stderr[-2000:]}")
        samples += [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]
    return samples, time.perf_counter() - start


def stop_ids_for(tokenizer, generation_config) -> list[int]:
    eos = generation_config.eos_token_id
    ids = list(eos) if isinstance(eos, (list, tuple)) else ([] if eos is None else [eos])
    for tid, added in sorted(tokenizer.added_tokens_decoder.items()):
        if added.special and added.content in END_OF_TURN_TEXTS and tid not in ids:
            ids.append(tid)
    return ids


def first_difference(tokenizer, new_ids: list[int], theirs: str) -> int | None:
    """The first step whose token makes transformers' decoded answer stop being a prefix of `theirs` (None when
    transformers' answer is a prefix of it, i.e. only the length differs, or they are equal)."""
    for k in range(1, len(new_ids) + 1):
        text = tokenizer.decode(new_ids[:k], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        text = text.rstrip("\ufffd")  # a token that ends inside a UTF-8 sequence decodes to U+FFFD
        if not theirs.startswith(text):
            return k - 1
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvscope", type=Path, default=DEFAULT_KVSCOPE)
    ap.add_argument("--hf", type=Path, default=DEFAULT_HF)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()

    os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' weight-loading progress bar
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    torch.set_num_threads(1)
    torch.manual_seed(0)
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ruler_golden_") as tmp:
        samples, kv_seconds = run_kvscope(args.kvscope, Path(tmp))
    print(f"kvscope: {len(samples)} samples in {kv_seconds:.1f} s", flush=True)

    tokenizer = AutoTokenizer.from_pretrained(args.hf)
    model = AutoModelForCausalLM.from_pretrained(args.hf, dtype=torch.float32, attn_implementation="eager").eval()
    stop_ids = stop_ids_for(tokenizer, model.generation_config)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop_ids[0]
    print(f"stop ids {stop_ids} ({tokenizer.convert_ids_to_tokens(stop_ids)})", flush=True)

    records, near_ties, differences = [], [], []
    t_gen = time.perf_counter()
    for s in samples:
        if s["appended_ids"]:
            sys.exit(f"{s['task']} #{s['index']}: appended_ids should be empty under query-aware")
        ids = torch.tensor([s["prompt_ids"]], dtype=torch.long)
        config = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=s["max_new_tokens"],
                                  eos_token_id=stop_ids, pad_token_id=pad_id, output_logits=True,
                                  return_dict_in_generate=True)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)
        new = out.sequences[0, ids.shape[1]:].tolist()
        margins = []
        for step, logits in enumerate(out.logits):
            top = torch.topk(logits[0].to(torch.float64), 2)
            if float(logits[0, new[step]]) != float(top.values[0]):  # greedy picks a (the) largest logit
                sys.exit(f"{s['task']} #{s['index']} step {step}: generate's token is not the argmax")
            margins.append(float(top.values[0] - top.values[1]))
        stopped = bool(new) and new[-1] in stop_ids
        answer = new[:-1] if stopped else new
        prediction = tokenizer.decode(answer, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        score = string_match_all(prediction, s["outputs"])
        min_step = min(range(len(margins)), key=margins.__getitem__)
        rec = {"task": s["task"], "index": s["index"], "prompt_ids": s["prompt_ids"], "outputs": s["outputs"],
               "max_new_tokens": s["max_new_tokens"], "generated_ids": new,
               "stop": "end_of_generation" if stopped else "max_new_tokens", "prediction": prediction,
               "score": score, "min_margin": round(margins[min_step], 6), "min_margin_step": min_step}
        records.append(rec)
        same = prediction == s["prediction"]
        line = (f"{s['task']:16s} #{s['index']} {len(s['prompt_ids'])} ids -> {len(new)} new "
                f"({time.perf_counter() - t0:.1f} s) score {score:.2f} kvscope {s['score']:.2f} "
                f"{'same text' if same else 'TEXT DIFFERS'} min margin {margins[min_step]:.4f}")
        print(line, flush=True)
        if not same:
            step = first_difference(tokenizer, answer, s["prediction"])
            if step is None:  # transformers' text is a prefix of kvscope's: kvscope went on where it stopped
                step = len(answer)
            margin = margins[step] if step < len(margins) else None
            diff = {"task": s["task"], "index": s["index"], "first_differing_step": step,
                    "transformers_token": new[step] if step < len(new) else None,
                    "margin": None if margin is None else round(margin, 9),
                    "transformers_prediction": prediction, "kvscope_prediction": s["prediction"],
                    "transformers_score": score, "kvscope_score": s["score"]}
            differences.append(diff)
            if margin is not None and margin < NEAR_TIE:
                near_ties.append({k: diff[k] for k in ("task", "index", "first_differing_step", "margin",
                                                       "transformers_score", "kvscope_score")})
    gen_seconds = time.perf_counter() - t_gen

    genuine = {(n["task"], n["index"]) for n in near_ties}
    bugs = [d for d in differences if (d["task"], d["index"]) not in genuine]
    for d in differences:
        print(f"DIFFERENCE {json.dumps(d)}", flush=True)
    if bugs:
        print(f"{len(bugs)} prediction(s) differ from kvscope without a near tie (margin >= {NEAR_TIE}); "
              "no golden written", file=sys.stderr)
        return 1

    by_task: dict[str, list[float]] = {}
    for r in records:
        by_task.setdefault(r["task"], []).append(r["score"])
    golden = {
        "schema_version": SCHEMA_VERSION,
        "generator": "tools/make_ruler_transformers_golden.py",
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__},
        "model": {"gguf": GGUF.name, "gguf_sha256": sha256_file(GGUF) if GGUF.exists() else None,
                  "hf_folder": "build/fixtures/smollm2-hf/f32 (tools/gguf_to_hf_folder.py, float32)"},
        "reference": ("transformers AutoModelForCausalLM.from_pretrained(f32 folder, dtype=float32, "
                      "attn_implementation='eager'), CPU, torch.set_num_threads(1); model.generate(prompt_ids, "
                      "do_sample=False, num_beams=1, max_new_tokens=sample's, eos_token_id=stop_ids); the "
                      "prediction is the new tokens without a final stop token, decoded with "
                      "skip_special_tokens=False; score = RULER string_match_all on the 0-1 scale"),
        "kvscope_commands": [["kvscope", *a, "--write-samples", "FILE"] for a in KVSCOPE_RUNS],
        "env": {"OMP_NUM_THREADS": "1"},
        "stop_ids": stop_ids,
        "near_tie_threshold": NEAR_TIE,
        "near_ties": near_ties,
        "task_means": {t: sum(v) / len(v) for t, v in by_task.items()},
        "identical_predictions": len(records) - len(differences),
        "samples": records,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        f.write("{\n")
        items = list(golden.items())
        for i, (k, v) in enumerate(items):
            comma = "," if i + 1 < len(items) else ""
            if k == "samples":  # one line per sample keeps the file small and diffable
                f.write(f'  "samples": [\n')
                f.write(",\n".join("    " + json.dumps(r, ensure_ascii=False) for r in v))
                f.write(f"\n  ]{comma}\n")
            else:
                f.write(f"  {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}{comma}\n")
        f.write("}\n")
    with open(args.out) as f:
        if json.load(f) != json.loads(json.dumps(golden)):
            sys.exit(f"{args.out} does not read back as written")
    print(f"{len(records)} samples, {len(records) - len(differences)} identical predictions, "
          f"{len(near_ties)} near ties; kvscope {kv_seconds:.1f} s, transformers {gen_seconds:.1f} s, "
          f"total {time.perf_counter() - t_all:.1f} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
