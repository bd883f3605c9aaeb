"""A Hugging Face folder's tokenizer.json is checked before transformers reads it (docs/models.md, tokenizer bounds),
and the load itself runs under a time and memory bound.

Each damaged folder is the synthetic Llama folder (tests/fixtures/hf_synthetic/llama3) with one deterministic edit
of tokenizer.json; `kvscope tokenize` must exit 1 within seconds with an error naming tokenizer.json and the field.
The first case is the fuzz mutant that found the defect (tokenizer seed 15, mutant 34: "!" -> 384 and
"^" -> 2147483648 in model.vocab), on which the load grew by ~270 MB/s until the OOM killer acted. The bounds of
the guarded load are checked with KVSCOPE_TOKENIZER_LOAD_MEMORY_MIB lowered to 1 MiB, which any load exceeds.

Run by ctest with the project venv; KVSCOPE_BINARY points at the kvscope executable.
"""
import json
import os
import shutil
import subprocess
import sys
import time

from checks import check, run_in_temp_folder

BINARY = os.environ.get("KVSCOPE_BINARY", "")
ROOT = os.environ.get("KVSCOPE_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
FOLDER = os.path.join(ROOT, "tests", "fixtures", "hf_synthetic", "llama3")
# A runaway load takes the machine's memory in under a minute; a refusal before loading takes about a second.
QUICK_S = 15


def vocab_id(token, value):
    def edit(tok):
        tok["model"]["vocab"][token] = value
    return edit


def seed15_mutant34(tok):
    tok["model"]["vocab"]["!"] = 384
    tok["model"]["vocab"]["^"] = 2147483648


def added_token_id(value):
    def edit(tok):
        tok["added_tokens"][0]["id"] = value
    return edit


def post_processor_ids(tok):
    specials = tok["post_processor"].get("special_tokens") or {}
    for entry in specials.values():
        entry["ids"] = [1 << 31]
    if not specials:  # a Sequence around a TemplateProcessing
        tok["post_processor"] = {"type": "TemplateProcessing", "single": [], "pair": [],
                                 "special_tokens": {"<s>": {"id": "<s>", "ids": [1 << 31], "tokens": ["<s>"]}}}


def merge_of_unknown_token(tok):
    tok["model"]["merges"][0] = "kvscope-not-a-token e"


def run(folder, env=None):
    start = time.monotonic()
    res = subprocess.run([BINARY, "tokenize", "--model", folder, "hello"], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, **(env or {})))
    return res, time.monotonic() - start


def damaged(root, name, edit, keep_config=True):
    folder = os.path.join(root, name)
    shutil.copytree(FOLDER, folder)
    if not keep_config:
        os.remove(os.path.join(folder, "config.json"))
    path = os.path.join(folder, "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        tok = json.load(f)
    edit(tok)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=2)
    return folder


def all_checks(root):
    res, seconds = run(FOLDER)
    check(res.returncode == 0, f"the undamaged folder tokenizes ({res.stderr.strip()[-300:]})")

    vocab_size = json.load(open(os.path.join(FOLDER, "config.json")))["vocab_size"]
    cases = [
        ("seed15_mutant34", seed15_mutant34, True, ["model.vocab", '"^"', "2147483648", "vocab_size"]),
        ("vocab_negative", vocab_id("a", -1), True, ["model.vocab", "-1"]),
        ("vocab_string", vocab_id("a", "7"), True, ["model.vocab", '"7"']),
        ("vocab_past_config", vocab_id("a", vocab_size + 1024), True, ["model.vocab", str(vocab_size + 1024)]),
        # Without config.json only the absolute bound (2^24) applies.
        ("vocab_past_bound", vocab_id("a", 1 << 24), False, ["model.vocab", str(1 << 24)]),
        ("added_token", added_token_id(1 << 40), True, ["added_tokens[0].id", str(1 << 40)]),
        ("post_processor", post_processor_ids, True, ["post_processor", str(1 << 31)]),
        ("merge", merge_of_unknown_token, True, ["model.merges[0]", "kvscope-not-a-token"]),
    ]
    for name, edit, keep_config, words in cases:
        folder = damaged(root, name, edit, keep_config)
        res, seconds = run(folder)
        said = res.stderr.strip()[-400:]
        check(res.returncode == 1 and "tokenizer.json" in res.stderr and all(w in res.stderr for w in words),
              f"{name}: exit 1 naming tokenizer.json and {words} (exit {res.returncode}: {said})")
        check(seconds < QUICK_S, f"{name}: refused in {seconds:.1f} s (< {QUICK_S} s)")

    # Ids within config.json's vocab_size + 1024 stay accepted (added tokens a fine-tune gave no embedding row).
    folder = damaged(root, "vocab_within_excess", vocab_id("a", vocab_size + 1023))
    res, _ = run(folder)
    check(res.returncode == 0, f"an id within vocab_size + 1024 is accepted ({res.stderr.strip()[-300:]})")

    # A tokenizer.json over the size bound is refused without being read (a sparse file: no disk used).
    folder = os.path.join(root, "huge")
    shutil.copytree(FOLDER, folder)
    with open(os.path.join(folder, "tokenizer.json"), "r+b") as f:
        f.truncate((512 << 20) + 1)
    res, seconds = run(folder)
    check(res.returncode == 1 and "tokenizer.json" in res.stderr and "bytes exceed" in res.stderr and seconds < QUICK_S,
          f"a tokenizer.json over 512 MiB is refused by its size in {seconds:.1f} s ({res.stderr.strip()[-300:]})")

    # The guarded load: with the memory bound at 1 MiB the load trips it, exits 1 and names the file.
    res, seconds = run(FOLDER, {"KVSCOPE_TOKENIZER_LOAD_MEMORY_MIB": "1"})
    check(res.returncode == 1 and "tokenizer.json" in res.stderr and "memory grew" in res.stderr and seconds < QUICK_S,
          f"a load past its memory bound ends with exit 1 naming tokenizer.json ({res.stderr.strip()[-300:]})")
    res, _ = run(FOLDER, {"KVSCOPE_TOKENIZER_LOAD_SECONDS": "soon"})
    check(res.returncode == 2 and "KVSCOPE_TOKENIZER_LOAD_SECONDS" in res.stderr,
          f"a bound that is not a number is a usage error ({res.stderr.strip()[-300:]})")


def main():
    return run_in_temp_folder(BINARY, "kvscope_tokenizer_bounds_", all_checks)


if __name__ == "__main__":
    sys.exit(main())
