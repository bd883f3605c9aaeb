"""Evidence spans (issue 35) regenerated independently and compared, span by span, on every task.

kvscope writes, per sample, the prompt ids it ran and the evidence as token positions ([first, last, kind],
inclusive, over the prompt then the appended tokens). This test rebuilds every span without kvscope's code: it
decodes the ids with Hugging Face `tokenizers` (the GGUF's vocabulary and merges in SmolLM2's pipeline, or a
Hugging Face folder's tokenizer.json), checks that the decoded text encodes back to the same ids, searches the
decoded text for what the answer needs (knowing it from the written sample: the expected outputs, the needle
template, the LongBench answers) and maps the characters found to tokens with the tokenizer's offsets: a
token holds a stretch when its offsets meet it. Covered: all eleven RULER tasks (a sample each, chat template),
query-agnostic without the template, the needle test, LongBench records with and without the chat template,
middle truncation (a cut-out answer is dropped), and a Hugging Face folder (transformers' tokenizer, Llama 2's
template, SentencePiece-style pieces).

`tokenizers` lives in the embedded venv (.deps/embedded-venv) and `gguf` in the project venv: run by ctest with
the project venv, the test reads the GGUF's vocabulary there and runs its checks under the embedded venv's
Python. Exits 77 (skipped) without the binary, the default model or either venv's package.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

from checks import FAILURES, check, passed

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("KVSCOPE_SOURCE_DIR") or os.path.normpath(os.path.join(HERE, "..", ".."))
BINARY = os.environ.get("KVSCOPE_BINARY") or os.path.join(ROOT, "build", "app", "kvscope")
MODEL = os.path.join(ROOT, ".deps", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
EMBEDDED_PYTHON = os.path.join(ROOT, ".deps", "embedded-venv", "bin", "python")
LONGBENCH = os.path.join(ROOT, "tests", "fixtures", "longbench", "synthetic.jsonl")
HF_LLAMA2 = os.path.join(ROOT, "tests", "fixtures", "hf_synthetic", "llama2")
NEEDLE = json.load(open(os.path.join(ROOT, "sample_data", "needle", "needle.json")))["needle"]
TASKS = ["niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2",
         "niah_multikey_3", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe"]


def kvscope(*args, timeout=1200):
    res = subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=timeout)
    check(res.returncode == 0, f"kvscope {' '.join(args[:3])} ... exits 0 ({res.stderr.strip()[-400:]})")
    return res


def jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


# --- the independent tokenizers ------------------------------------------------------------------------------
def gguf_vocabulary(path):
    """The GGUF's tokenizer arrays (run under the project venv, which has gguf)."""
    import gguf
    reader = gguf.GGUFReader(path)

    def strings(name):
        f = reader.fields[name]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    f = reader.fields["tokenizer.ggml.token_type"]
    return {"tokens": strings("tokenizer.ggml.tokens"), "merges": strings("tokenizer.ggml.merges"),
            "token_type": [int(f.parts[i][0]) for i in f.data]}


def smollm2_tokenizer(vocabulary):
    """SmolLM2's tokenizer.json pipeline on the GGUF's arrays (as tools/make_tokenizer_golden.py builds it)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    vocab = {t: i for i, t in enumerate(vocabulary["tokens"])}
    merges = [tuple(m.split(" ", 1)) for m in vocabulary["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True)
                            for t, ty in zip(vocabulary["tokens"], vocabulary["token_type"]) if ty == 3])
    return tok


def decoded_with_offsets(tok, parts, what):
    """The text of the token parts (prompt, appended), and per token its characters of that text. Each run of
    tokens between special tokens is decoded on its own (a SentencePiece decoder strips the space a run starts
    with, which encoding the run puts back) and encoded again, which must give the same ids; a special token
    reads as its own text."""
    specials = {i: t.content for i, t in tok.get_added_tokens_decoder().items() if t.special}
    text, offsets = "", []
    for ids in parts:
        runs, run = [], []
        for i in ids:
            if i in specials:
                runs += [run, [i]] if run else [[i]]
                run = []
            else:
                run.append(i)
        if run:
            runs.append(run)
        for run in runs:
            if len(run) == 1 and run[0] in specials:
                offsets.append((len(text), len(text) + len(specials[run[0]])))
                text += specials[run[0]]
                continue
            piece = tok.decode(run, skip_special_tokens=False)
            enc = tok.encode(piece, add_special_tokens=False)
            if enc.ids != run:
                check(False, f"{what}: the decoded prompt encodes back to its ids ({run[:8]} -> {enc.ids[:8]})")
                return None, None
            offsets += [(a + len(text), b + len(text)) for a, b in enc.offsets]
            text += piece
    return text, offsets


def token_span(offsets, begin, end):
    hit = [i for i, (a, b) in enumerate(offsets) if b > a and a < end and b > begin]
    return [hit[0], hit[-1]] if hit else None


def compare(what, tok, record, stretches):
    """stretches: (character begin, end, kind) of the decoded prompt; against record["evidence"]."""
    text, offsets = decoded_with_offsets(tok, [record["prompt_ids"], record.get("appended_ids", [])], what)
    if text is None:
        return
    expected = []
    for begin, end, kind in stretches(text):
        span = token_span(offsets, begin, end)
        if span:
            expected.append([span[0], span[1], kind])
    got = sorted(record["evidence"])
    expected = sorted(expected)
    check(got == expected, f"{what}: evidence spans equal the independent ones "
          f"(kvscope {got[:6]}{'...' if len(got) > 6 else ''}, independent {expected[:6]}"
          f"{'...' if len(expected) > 6 else ''}; {len(got)} vs {len(expected)})")


# --- what each task's answer needs, found in the decoded text ---------------------------------------------------
def ruler_stretches(sample):
    task, outputs = sample["task"], sample["outputs"]

    def find(text):
        out = []
        if task.startswith("niah"):
            for m in re.finditer(r"One of the special magic (?:numbers|words|uuids) for (\S+) is: (\S+)\.", text):
                if m.group(2) in outputs:
                    out += [(m.start(1), m.end(1), "needle key"), (m.start(2), m.end(2), "needle value")]
        elif task == "vt":
            for name in outputs:
                out += [(m.start(), m.end(), "chain") for m in re.finditer(rf"VAR {name} = (?:VAR [A-Z]+|\d+)", text)]
        elif task == "cwe":
            start = text.rindex("Memorize the ones that appear most often.\n")
            end = text.index("\nQuestion:", start)
            out += [(m.start(2), m.end(2), "word") for m in re.finditer(r"(\d+)\. (\S+)", text[:end])
                    if m.start() > start and m.group(2) in outputs]
        elif task == "fwe":
            start = text.index("Find the three most frequently appeared coded words. ")
            end = text.index("\nQuestion:", start)
            out += [(m.start(), m.end(), "word") for m in re.finditer(r"\S+", text[:end])
                    if m.start() > start and m.group() in outputs]
        return out
    return find


def needle_stretches(case):
    sentence = NEEDLE.replace("{key}", case["key"]).replace("{value}", case["value"])
    return lambda text: [(m.start(), m.end(), "needle") for m in re.finditer(re.escape(sentence), text)]


def surviving_context(text, context):
    """Where the context's surviving parts are in the decoded prompt: the longest start of it found there and the
    longest end of it found there (the whole context when it is there whole), as character ranges."""
    def longest(piece_of):
        lo, hi = 0, len(context)  # piece_of(lo) is found (empty), find the longest that is
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if text.find(piece_of(mid)) >= 0:
                lo = mid
            else:
                hi = mid - 1
        return lo
    ranges = []
    head = longest(lambda k: context[:k])
    if head >= 10:
        at = text.find(context[:head])
        ranges.append((at, at + head))
    if head < len(context):
        tail = longest(lambda k: context[len(context) - k:])
        if tail >= 10:
            at = text.rfind(context[len(context) - tail:])
            ranges.append((at, at + tail))
    return ranges


def answer_stretches(answers, context):
    """Occurrences of an answer as a whole word (no letter or digit, nor non-ASCII character, just outside an end
    that is one), ASCII letters in any case, inside what survives of the context."""
    def find(text):
        ranges = surviving_context(text, context)
        out = set()
        for answer in answers:
            answer = answer.strip()
            if not answer:
                continue
            word = "A-Za-z0-9\u0080-\U0010ffff"  # a word's characters; the boundary matters where the answer has one
            before = rf"(?<![{word}])" if re.match(rf"[{word}]", answer[0]) else ""
            after = rf"(?![{word}])" if re.match(rf"[{word}]", answer[-1]) else ""
            pattern = before + re.escape(answer) + after
            # ASCII letters without case (LongBench's F1 lowers both sides); re.ASCII keeps other letters exact.
            out |= {(m.start(), m.end(), "answer") for m in re.finditer(pattern, text, re.IGNORECASE | re.ASCII)
                    if any(lo <= m.start() and m.end() <= hi for lo, hi in ranges)}
        return sorted(out)
    return find


# --- the runs ------------------------------------------------------------------------------------------------
def ruler_runs(tmp, tok):
    samples_path = os.path.join(tmp, "ruler.jsonl")
    res = kvscope("eval", "ruler", "--length", "1024", "--samples", "1", "--write-samples", samples_path, "--json")
    if res.returncode != 0:
        return
    samples = jsonl(samples_path)
    check(sorted({s["task"] for s in samples}) == sorted(TASKS) and len(samples) == len(TASKS),
          f"a sample of every RULER task written ({len(samples)})")
    records = json.loads(res.stdout)["records"]
    check([r["evidence"] for r in records] == [s["evidence"] for s in samples],
          "the --json records carry the same evidence as the written samples")
    for s in samples:
        compare(f"ruler {s['task']} #{s['index']}", tok, s, ruler_stretches(s))
    counts = {s["task"]: len(s["evidence"]) for s in samples if s["index"] == 0}
    check(counts["niah_single_1"] == 2 and counts["niah_multikey_1"] == 2 and counts["niah_multivalue"] == 8
          and counts["niah_multiquery"] == 8 and counts["vt"] == 5 and counts["cwe"] >= 10 and counts["fwe"] >= 3,
          f"each task marks what its answer needs: a key and value per queried needle, 5 chain statements, "
          f"word occurrences ({counts})")

    agnostic_path = os.path.join(tmp, "ruler_agnostic.jsonl")
    res = kvscope("eval", "ruler", "--length", "1024", "--samples", "1", "--tasks", "niah_multiquery,vt,fwe",
                  "--protocol", "query-agnostic", "--no-chat", "--write-samples", agnostic_path)
    if res.returncode == 0:
        for s in jsonl(agnostic_path):
            check(len(s["appended_ids"]) > 0 and not s["chat"], f"ruler {s['task']}: query-agnostic, plain prompt")
            compare(f"ruler {s['task']} query-agnostic without the template", tok, s, ruler_stretches(s))


def needle_runs(tmp, tok, model_args, lengths, what):
    path = os.path.join(tmp, f"needle_{what}.jsonl")
    res = kvscope("eval", "needle", *model_args, "--lengths", lengths, "--depths", "0,50,100", "--write-samples", path,
                  "--json")
    if res.returncode != 0:
        return
    cases = jsonl(path)
    check([c["evidence"] for c in json.loads(res.stdout)["cases"]] == [c["evidence"] for c in cases],
          f"needle ({what}): the --json cases carry the written evidence")
    for c in cases:
        check(len(c["evidence"]) == 1, f"needle {c['case']} ({what}): one span, the needle sentence")
        compare(f"needle {c['case']} ({what})", tok, c, needle_stretches(c))


def longbench_runs(tmp, tok, model_args, records_path, what, extra=(), expect_dropped=False):
    path = os.path.join(tmp, f"longbench_{what}.jsonl")
    res = kvscope("eval", "longbench", *model_args, "--data", records_path, "--predictions", path, "--json", *extra)
    if res.returncode != 0:
        return
    written = jsonl(path)
    out = json.loads(res.stdout)
    check([r["evidence"] for r in out["records"]] == [w["evidence"] for w in written],
          f"longbench ({what}): the --json records carry the evidence written with the predictions")
    records = jsonl(records_path)
    for i, (record, w) in enumerate(zip(records, written)):
        compare(f"longbench {record.get('dataset', '')} #{i} ({what})", tok, w,
                answer_stretches(record["answers"], record["context"]))
    if expect_dropped:
        full = [sum(1 for _ in re.finditer(re.escape(a), r["context"])) for r in records for a in r["answers"]]
        check(sum(len(w["evidence"]) for w in written) < sum(full),
              f"longbench ({what}): answers in the cut-out middle are dropped")


def truncation_records(tmp):
    """One record whose answer occurs near the start, in the middle and near the end of a long context, so middle
    truncation cuts the middle one out."""
    filler = " ".join(f"Line {i} of the archive mentions nothing of use." for i in range(40))
    context = ("The keeper was Zorbulax Quint. " + filler + " Records name Zorbulax Quint again here. " + filler +
               " In the end, Zorbulax Quint retired.")
    path = os.path.join(tmp, "truncation.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps({"dataset": "hotpotqa", "_id": "t1", "context": context, "input": "Who was the keeper?",
                            "answers": ["Zorbulax Quint"], "all_classes": None, "length": 600}) + "\n")
    return path


def checks(tmp, vocabulary_path):
    from tokenizers import Tokenizer
    with open(vocabulary_path) as f:
        smollm2 = smollm2_tokenizer(json.load(f))
    ruler_runs(tmp, smollm2)
    needle_runs(tmp, smollm2, [], "300,600", "SmolLM2")
    longbench_runs(tmp, smollm2, [], LONGBENCH, "SmolLM2")
    cut = truncation_records(tmp)
    longbench_runs(tmp, smollm2, [], cut, "SmolLM2 truncated", ["--max-length", "200"], expect_dropped=True)
    longbench_runs(tmp, smollm2, [], cut, "SmolLM2 truncated, query-agnostic",
                   ["--max-length", "200", "--protocol", "query-agnostic"], expect_dropped=True)
    llama2 = Tokenizer.from_file(os.path.join(HF_LLAMA2, "tokenizer.json"))
    longbench_runs(tmp, llama2, ["--model", HF_LLAMA2], LONGBENCH, "HF llama2", ["--max-length", "100"])
    needle_runs(tmp, llama2, ["--model", HF_LLAMA2], "200", "HF llama2")


def main():
    if "--checks" in sys.argv:  # under the embedded venv: the runs and the comparisons
        tmp, vocabulary_path = sys.argv[sys.argv.index("--checks") + 1:][:2]
        checks(tmp, vocabulary_path)
        print(f"{passed()} checks passed, {len(FAILURES)} failed")
        return 1 if FAILURES else 0
    for path, what in ((BINARY, "the kvscope binary (KVSCOPE_BINARY)"), (MODEL, "the default model"),
                       (EMBEDDED_PYTHON, "the embedded venv's Python (tokenizers)")):
        if not path or not os.path.exists(path):
            print(f"SKIP: {what} is missing: {path!r}")
            return 77
    try:
        vocabulary = gguf_vocabulary(MODEL)
    except ImportError:
        print("SKIP: gguf is not installed in this Python")
        return 77
    with tempfile.TemporaryDirectory(prefix="kvscope_evidence_") as tmp:
        vocabulary_path = os.path.join(tmp, "vocabulary.json")
        with open(vocabulary_path, "w") as f:
            json.dump(vocabulary, f)
        env = dict(os.environ, KVSCOPE_BINARY=BINARY, KVSCOPE_SOURCE_DIR=ROOT)
        return subprocess.run([EMBEDDED_PYTHON, os.path.abspath(__file__), "--checks", tmp, vocabulary_path],
                              env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
