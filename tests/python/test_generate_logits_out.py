"""`generate --logits-out FILE.npy` and `--force-tokens` (what bench/cache_type_vs_llamacpp.py compares another
engine with): the file is a float32 .npy array [new tokens, vocab] that numpy reads; under greedy decoding each
step's argmax is the token generated at that step, and the record's log-probabilities are log softmax of those
logits at the generated tokens. With --force-tokens the new tokens are the given ids, the logits are those of the
same contexts (step 0, the prompt's last position, equals the free run's), and a bad list or a file that exists
is refused with the option named.

Run by ctest with the project venv; KVSCOPE_BINARY points at the kvscope executable. Exits 77 (skipped) without
the default model.
"""
import json
import os
import subprocess
import sys

import numpy as np

from checks import check, run_in_temp_folder
from test_quantized_cache_bytes import MODEL

BINARY = os.environ.get("KVSCOPE_BINARY", "")
PROMPT = "The lighthouse keeper climbed the stair at dusk and"
NEW = 6


def generate(*args):
    return subprocess.run([BINARY, "generate", "--json", "--prompt", PROMPT, "--max-new-tokens", str(NEW), "--ignore-eos",
                           *args], capture_output=True, text=True, timeout=600)


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def all_checks(root):
    free_path = os.path.join(root, "free.npy")
    res = generate("--logits-out", free_path)
    check(res.returncode == 0, f"generate --logits-out exits 0 ({res.stderr.strip()[-300:]})")
    if res.returncode != 0:
        return
    record = json.loads(res.stdout)
    logits = np.load(free_path)
    check(logits.dtype == np.float32 and logits.shape[0] == NEW and logits.shape[1] > 1000,
          f"the file is float32 [{NEW}, vocab] (got {logits.dtype} {logits.shape})")
    check(logits.argmax(axis=1).tolist() == record["generated_tokens"],
          f"greedy: each step's argmax {logits.argmax(axis=1).tolist()} is its token {record['generated_tokens']}")
    lp = log_softmax(logits)[np.arange(NEW), record["generated_tokens"]]
    check(np.allclose(lp, record["logprobs"], atol=1e-4),
          f"log softmax of the logits at the tokens {lp.tolist()} == the record's logprobs {record['logprobs']}")

    forced = [record["generated_tokens"][0], 11, 22, 33, 44, 55]
    forced_path = os.path.join(root, "forced.npy")
    res = generate("--force-tokens", ",".join(map(str, forced)), "--logits-out", forced_path)
    check(res.returncode == 0, f"generate --force-tokens exits 0 ({res.stderr.strip()[-300:]})")
    if res.returncode == 0:
        forced_record = json.loads(res.stdout)
        forced_logits = np.load(forced_path)
        check(forced_record["generated_tokens"] == forced, f"the new tokens are the forced ids ({forced_record['generated_tokens']})")
        check(np.array_equal(forced_logits[:2], logits[:2]),
              "steps 0 and 1 (the same contexts as the free run's) have the same logits")
        check(not np.array_equal(forced_logits[2], logits[2]), "step 2 follows the forced token 11, not the free one")
        lp = log_softmax(forced_logits)[np.arange(NEW), forced]
        check(np.allclose(lp, forced_record["logprobs"], atol=1e-4), "the forced tokens' logprobs match the logits")

    res = generate("--logits-out", free_path)
    check(res.returncode != 0 and "--logits-out" in res.stderr and "already exists" in res.stderr,
          f"an existing --logits-out is refused without --force ({res.stderr.strip()[-200:]})")
    res = generate("--logits-out", free_path, "--force")
    check(res.returncode == 0, "--force overwrites it")
    for bad in ("1,,2", "1,-2", "a", "1, 2"):
        res = generate("--force-tokens", bad)
        check(res.returncode != 0 and "--force-tokens" in res.stderr and "is not a token id" in res.stderr,
              f"--force-tokens '{bad}' is refused ({res.stderr.strip()[-200:]})")
    res = generate("--force-tokens", "1,2")
    check(res.returncode != 0 and "2 forced tokens cannot cover" in res.stderr,
          f"too few forced tokens are refused ({res.stderr.strip()[-200:]})")


if __name__ == "__main__":
    if not os.path.exists(MODEL):
        print(f"default model {MODEL} missing; run make")
        sys.exit(77)
    sys.exit(run_in_temp_folder(BINARY, "kvscope_logits_out_", all_checks))
