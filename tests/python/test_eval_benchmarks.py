"""`kvscope eval longbench` and `kvscope eval ruler` end to end on the default model: LongBench-format records
(tests/fixtures/longbench/synthetic.jsonl) scored per task with bootstrap intervals, the query-agnostic
protocol appending the question after compression, LongBench's prediction layout written for its own eval.py;
RULER samples generated, run and scored; paired differences against the full cache; bad input refused with
a clear message.

Run by ctest with the project venv; KVSCOPE_BINARY points at the kvscope executable.
"""
import json
import os
import subprocess
import sys
import tempfile

from checks import FAILURES, check, passed

BINARY = os.environ.get("KVSCOPE_BINARY", "")
ROOT = os.environ.get("KVSCOPE_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
RECORDS = os.path.join(ROOT, "tests", "fixtures", "longbench", "synthetic.jsonl")
TASKS = {"hotpotqa", "passage_retrieval_en", "passage_count", "trec", "lcc", "samsum"}


def kvscope(*args, timeout=900):
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=timeout)


def interval_ok(entry, scale=100.0):
    return (0.0 <= entry["ci_low"] <= entry["score"] + 1e-9 and entry["score"] <= entry["ci_high"] + 1e-9
            and entry["ci_high"] <= scale + 1e-9)


def test_longbench(tmp):
    predictions = os.path.join(tmp, "pred.jsonl")
    res = kvscope("eval", "longbench", "--data", RECORDS, "--policy", "snapkv", "--budget", "50%", "--vs-full",
                  "--predictions", predictions, "--json")
    check(res.returncode == 0, f"eval longbench exits 0 ({res.stderr[-400:]})")
    if res.returncode != 0:
        return
    out = json.loads(res.stdout)
    check(set(out["tasks"]) == TASKS, f"one entry per task ({sorted(out['tasks'])})")
    check(len(out["records"]) == 6, "six records scored")
    for name, t in out["tasks"].items():
        check(interval_ok(t), f"{name}: interval contains the score ({t})")
        check("difference" in t and "full" in t, f"{name}: paired difference against the full cache")
        diff = t["difference"]
        check(abs(diff["score"] - (t["score"] - t["full"]["score"])) < 1e-9, f"{name}: difference = policy - full")
    for r in out["records"]:
        check(0.0 <= r["score"] <= 1.0, f"record {r['index']} scored on 0-1 ({r['score']})")
        check(r["appended_tokens"] == 0, "query-aware appends nothing")
    # The per-record score is the metric on the prediction: recompute it with --score-only.
    hot = next(r for r in out["records"] if r["dataset"] == "hotpotqa")
    rescored = kvscope("eval", "longbench", "--score-only", "--metric", "qa_f1", "--json",
                       "--pairs", json.dumps([[hot["prediction"], "Mara Quill"]]))
    check(rescored.returncode == 0 and abs(json.loads(rescored.stdout)["scores"][0] - hot["score"]) < 1e-12,
          "a record's score is its metric's score of the prediction")
    lines = [json.loads(l) for l in open(predictions)]
    check(len(lines) == 6 and all(set(l) == {"pred", "answers", "all_classes", "length", "prompt_ids", "appended_ids",
                                             "evidence"} for l in lines),
          "--predictions writes LongBench's pred layout (and the prompt ids and evidence spans, which eval.py ignores)")

    agnostic = kvscope("eval", "longbench", "--data", RECORDS, "--dataset", "hotpotqa", "--limit", "1",
                       "--protocol", "query-agnostic", "--policy", "snapkv", "--budget", "50%", "--json")
    check(agnostic.returncode == 0, f"query-agnostic runs ({agnostic.stderr[-300:]})")
    if agnostic.returncode == 0:
        a = json.loads(agnostic.stdout)
        check(a["protocol"] == "query-agnostic", "the protocol is recorded")
        check(a["records"][0]["appended_tokens"] > 5, "the question is appended after compression")


def test_longbench_errors(tmp):
    bad = os.path.join(tmp, "bad.jsonl")
    with open(bad, "w") as f:
        f.write(json.dumps({"dataset": "hotpotqa", "context": "x", "input": "y", "answers": ["z"]}) + "\n")
        f.write(json.dumps({"dataset": "hotpotqa", "context": "x", "answers": ["z"]}) + "\n")
    res = kvscope("eval", "longbench", "--data", bad)
    check(res.returncode != 0 and "line 2" in res.stderr and "'input'" in res.stderr,
          f"a record without input names its line ({res.stderr.strip()[-200:]})")
    res = kvscope("eval", "longbench", "--data", RECORDS, "--dataset", "vcsum")
    check(res.returncode != 0 and "Chinese" in res.stderr, f"a Chinese task is refused ({res.stderr.strip()[-200:]})")
    res = kvscope("eval", "longbench", "--data", RECORDS, "--dataset", "nosuchtask")
    check(res.returncode != 0 and "unknown LongBench task 'nosuchtask'" in res.stderr, "an unknown task is named")
    res = kvscope("eval", "longbench", "--data", RECORDS, "--protocol", "sideways")
    check(res.returncode != 0 and "query-aware or query-agnostic" in res.stderr, "an unknown protocol is refused")
    res = kvscope("eval", "longbench", "--data", os.path.join(tmp, "missing.jsonl"))
    check(res.returncode != 0 and "missing.jsonl" in res.stderr, "a missing file is named")


def test_ruler(tmp):
    samples = os.path.join(tmp, "ruler.jsonl")
    res = kvscope("eval", "ruler", "--length", "512", "--samples", "2", "--tasks", "niah_single_1,vt",
                  "--policy", "streaming_llm", "--budget", "50%", "--vs-full", "--write-samples", samples, "--json")
    check(res.returncode == 0, f"eval ruler exits 0 ({res.stderr[-400:]})")
    if res.returncode != 0:
        return
    out = json.loads(res.stdout)
    check(set(out["tasks"]) == {"niah_single_1", "vt"}, "the chosen tasks")
    check(out["length"] == 512 and out["samples"] == 2, "settings recorded")
    for name, t in out["tasks"].items():
        check(interval_ok(t), f"{name}: interval contains the score")
        check(t["n"] == 2, f"{name}: two samples")
    check(interval_ok(out["average"]) and "difference" in out, "average with its interval and the paired difference")
    rows = [json.loads(l) for l in open(samples)]
    check(len(rows) == 4, "every sample written")
    for r in rows:
        check(len(r["prompt_ids"]) + r["max_new_tokens"] <= 512,
              f"{r['task']} {r['index']}: prompt, chat template included, and new tokens fit the length")
        check(all(o in r["input"] for o in r["outputs"]) if r["task"] == "niah_single_1" else True,
              "the needle's value is in the input")
    again = kvscope("eval", "ruler", "--length", "512", "--samples", "2", "--tasks", "niah_single_1,vt", "--json",
                    "--policy", "streaming_llm", "--budget", "50%")
    if again.returncode == 0:
        same = json.loads(again.stdout)
        check([r["prediction"] for r in same["records"]] == [r["prediction"] for r in out["records"]],
              "the same seed gives the same samples and predictions")
    res = kvscope("eval", "ruler", "--tasks", "qa_1")
    check(res.returncode != 0 and "unknown RULER task 'qa_1'" in res.stderr, "an unknown RULER task is named")
    res = kvscope("eval", "ruler", "--length", "100000", "--tasks", "vt")
    check(res.returncode != 0 and "exceeds the model's context" in res.stderr, "a length beyond the context is refused")


def test_ruler_sweep(tmp):
    out = os.path.join(tmp, "ruler_sweep")
    res = kvscope("sweep", "--eval", "ruler", "--length", "512", "--samples", "2", "--tasks", "niah_single_1",
                  "--policies", "full,streaming_llm", "--budgets", "50%", "--out", out)
    check(res.returncode == 0, f"a RULER sweep runs ({res.stderr[-300:]})")
    if res.returncode != 0:
        return
    import csv
    rows = list(csv.DictReader(open(os.path.join(out, "rows.csv"))))
    check(len(rows) == 4 and {r["prompt"] for r in rows} == {"niah_single_1#0", "niah_single_1#1"},
          "one row per (sample, policy)")
    for r in rows:
        if r["policy"] == "full":
            check(r["score"] == r["full_score"], "the full cache's cell scores what its reference scores")
    summary = list(csv.DictReader(open(os.path.join(out, "summary.csv"))))
    check(any(s["metric"] == "score" and s["policy"] == "streaming_llm" and s["diff"] != "" for s in summary),
          "the summary has the policy's paired difference to the full cache")


def main():
    if not BINARY or not os.path.exists(BINARY):
        print("SKIP: KVSCOPE_BINARY not set")
        return 77
    with tempfile.TemporaryDirectory(prefix="kvscope_bench_test_") as tmp:
        test_longbench(tmp)
        test_longbench_errors(tmp)
        test_ruler(tmp)
        test_ruler_sweep(tmp)
    print(f"{passed()} checks passed, {len(FAILURES)} failed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
