"""`kvscope eval ruler` with the full cache against Hugging Face transformers, sample by sample.

The reference is tests/fixtures/ruler_transformers/golden.json (tools/make_ruler_transformers_golden.py): the
same RULER samples (3 per task, seed 7, the default chat template; nine tasks at 768 tokens, vt and cwe, whose worked
examples need the room, at 1024) answered by transformers' own greedy generate on the f32 Hugging Face folder of the default
model (float32, eager attention, CPU), stopping at the ids kvscope stops at, and scored with RULER's
string_match_all restated in that script. Here the binary runs the golden's two commands again and, for every sample:
  - the prompt ids it prefilled equal the golden's (the samples are deterministic: a difference means the
    generator, the chat template or the tokenizer changed, and the golden must be remade on purpose);
  - its score equals transformers' score exactly (0-1 scale); a sample listed in the golden's `near_ties`
    (transformers' top-2 logit margin below 1e-3 at the first token where the two answers part) may differ,
    and only those;
and every task's mean score in the JSON equals the mean of transformers' scores (within 1e-9: the means are
summed in another order). It also reports how many predictions are identical, character for character.

Run by ctest with the project venv; KVSCOPE_BINARY points at the kvscope executable. Exits 77 (skipped)
without the binary, the default model or the golden. About 75 s on one thread.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

from checks import FAILURES, check, passed

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("KVSCOPE_SOURCE_DIR") or os.path.normpath(os.path.join(HERE, "..", ".."))
BINARY = os.environ.get("KVSCOPE_BINARY") or os.path.join(ROOT, "build", "app", "kvscope")
GOLDEN = os.path.join(ROOT, "tests", "fixtures", "ruler_transformers", "golden.json")
MODEL = os.path.join(ROOT, ".deps", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
TASKS = ["niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2",
         "niah_multikey_3", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe"]
TASKS_SHORT = [t for t in TASKS if t not in ("vt", "cwe")]  # their worked examples need 1024 tokens
RUNS = [["eval", "ruler", "--length", "768", "--samples", "3", "--seed", "7", "--tasks", ",".join(TASKS_SHORT), "--json"],
        ["eval", "ruler", "--length", "1024", "--samples", "3", "--seed", "7", "--tasks", "vt,cwe", "--json"]]
MEAN_TOLERANCE = 1e-9


def main():
    for path, what in ((BINARY, "the kvscope binary (KVSCOPE_BINARY)"), (MODEL, "the default model"),
                       (GOLDEN, "the golden (tools/make_ruler_transformers_golden.py)")):
        if not path or not os.path.exists(path):
            print(f"SKIP: {what} is missing: {path!r}")
            return 77
    with open(GOLDEN) as f:
        golden = json.load(f)
    check([c[1:-2] for c in golden["kvscope_commands"]] == RUNS,
          f"the golden was made with this test's commands ({golden['kvscope_commands']})")
    expected = {(s["task"], s["index"]): s for s in golden["samples"]}
    ties = {(t["task"], t["index"]): t for t in golden.get("near_ties", [])}
    check(len(expected) == 3 * len(TASKS) and {t for t, _ in expected} == set(TASKS),
          f"the golden has 3 samples of each of the {len(TASKS)} tasks (got {len(expected)})")

    samples, records, task_scores = [], {}, {}
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kvscope_ruler_tf_") as tmp:
        for i, args in enumerate(RUNS):
            jsonl = os.path.join(tmp, f"samples{i}.jsonl")
            res = subprocess.run([BINARY, *args, "--write-samples", jsonl], capture_output=True, text=True,
                                 timeout=1800, env=env)
            check(res.returncode == 0, f"kvscope {' '.join(args)} exits 0 (got {res.returncode}: {res.stderr[-600:]})")
            if res.returncode != 0:
                continue
            report = json.loads(res.stdout)
            check(report["policy"] == "full" and report["protocol"] == "query-aware" and report["chat"] is True,
                  f"full cache, query-aware, chat template ({report['policy']}, {report['protocol']}, {report['chat']})")
            records.update({(r["task"], r["index"]): r for r in report["records"]})
            task_scores.update({t: v["score"] for t, v in report["tasks"].items()})
            with open(jsonl) as f:
                samples += [json.loads(line) for line in f if line.strip()]
    seconds = time.perf_counter() - start

    got = {(s["task"], s["index"]): s for s in samples}
    check(set(got) == set(expected), f"the same {len(expected)} samples (kvscope wrote {len(got)})")
    identical = 0
    for key in sorted(expected, key=lambda k: (TASKS.index(k[0]), k[1])):
        g, s = expected[key], got.get(key)
        name = f"{key[0]} #{key[1]}"
        if s is None:
            continue
        check(s["prompt_ids"] == g["prompt_ids"], f"{name}: prompt ids equal the golden's "
              f"({len(s['prompt_ids'])} vs {len(g['prompt_ids'])} ids)")
        check(s["appended_ids"] == [] and s["max_new_tokens"] == g["max_new_tokens"] and s["outputs"] == g["outputs"],
              f"{name}: nothing appended, same max_new_tokens and expected outputs")
        check(key in records and records[key]["score"] == s["score"], f"{name}: the JSON record and the JSONL agree")
        identical += s["prediction"] == g["prediction"]
        if s["prediction"] != g["prediction"]:
            print(f"note {name}: the prediction differs from transformers' (score {s['score']} vs {g['score']})")
        if key in ties:
            t = ties[key]
            print(f"near tie {name}: transformers' margin {t['margin']} at step {t['first_differing_step']}; "
                  f"kvscope {s['score']} vs transformers {g['score']} (accepted)")
            continue
        check(s["score"] == g["score"],
              f"{name}: kvscope's score {s['score']} equals transformers' {g['score']}\n"
              f"    kvscope:      {s['prediction'][:300]!r}\n    transformers: {g['prediction'][:300]!r}")

    for task in TASKS:
        keys = [k for k in expected if k[0] == task]
        if any(k in ties for k in keys):
            continue  # a near tie may move this task's mean; its samples were reported above
        want = 100.0 * sum(expected[k]["score"] for k in keys) / len(keys)
        have = task_scores.get(task)
        check(have is not None and abs(have - want) <= MEAN_TOLERANCE,
              f"{task}: kvscope's mean {have} equals transformers' {want}")
    print(f"{identical} of {len(expected)} predictions identical to transformers' character for character; "
          f"{len(ties)} near tie(s) in the golden; kvscope ran {seconds:.1f} s")
    print(f"{passed()} checks passed, {len(FAILURES)} failed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
