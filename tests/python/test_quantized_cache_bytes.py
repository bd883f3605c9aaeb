"""The bytes `generate --json` reports for a KV cache in each storage type equal a closed form (issue 37, proof
"bytes"): `cache.entry_bytes` is the kept entries (read from the same record, per layer and KV head) times the
bytes of one key row plus one value row, each computed here from the format's definition (f32: 4 bytes a value;
f16 and bf16: 2; llama.cpp's blocks of 32 values: q8_0 a half scale and 32 int8, q4_0 a half scale and 32 nibbles, q4_1 a
half scale, a half minimum and 32 nibbles); `cache.full_cache_bytes` is the same for every token a full cache
would hold; the allocation (`cache.bytes`) is never below the entries. `eval fidelity --cache-type q8_0` reports the
cell's peak as the row sizes' share of the float32 reference's. The model's shape is read from its GGUF
header with the gguf package, not from kvscope.

Run by ctest with the project venv; KVSCOPE_BINARY points at the kvscope executable. Exits 77 (skipped) without
the default model.
"""
import json
import os
import subprocess
import sys

from gguf import GGUFReader

from checks import check, run_in_temp_folder

BINARY = os.environ.get("KVSCOPE_BINARY", "")
MODEL = os.path.join(os.environ.get("KVSCOPE_SOURCE_DIR", "."), ".deps", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
PROMPT = ("The lighthouse keeper climbed the stair at dusk, wound the clock, trimmed the wick and wrote in the log "
          "that the wind had turned to the north-east.")
NEW_TOKENS = 4

BLOCK = 32
HALF = 2


def row_bytes(cache_type, head_dim):
    """Bytes of one stored row of head_dim values, from the format's definition."""
    if cache_type == "f32":
        return 4 * head_dim
    if cache_type in ("f16", "bf16"):
        return HALF * head_dim
    blocks = head_dim // BLOCK
    payload = {"q8_0": BLOCK, "q4_0": BLOCK // 2, "q4_1": BLOCK // 2}[cache_type]  # int8 or two nibbles a byte
    scales = {"q8_0": HALF, "q4_0": HALF, "q4_1": 2 * HALF}[cache_type]            # d (and m for q4_1)
    return blocks * (payload + scales)


def model_shape():
    reader = GGUFReader(MODEL)

    def field(name):
        f = reader.fields[name]
        return int(f.parts[f.data[0]][0])

    heads = field("llama.attention.head_count")
    head_dim = field("llama.attention.key_length") if "llama.attention.key_length" in reader.fields else \
        field("llama.embedding_length") // heads
    return field("llama.block_count"), field("llama.attention.head_count_kv"), head_dim


def all_checks(root):
    layers, kv_heads, head_dim = model_shape()
    per_token = {}
    for key_type, value_type in (("f32", "f32"), ("f16", "f16"), ("bf16", "bf16"), ("q8_0", "q8_0"), ("q4_0", "q4_0"),
                                 ("q4_1", "q4_1"), ("q8_0", "q4_0"), ("f16", "q4_1")):
        for policy in ("full", "snapkv"):
            args = ["generate", "--json", "--prompt", PROMPT, "--max-new-tokens", str(NEW_TOKENS), "--ignore-eos",
                    "--policy", policy, "--cache-type-k", key_type, "--cache-type-v", value_type]
            if policy != "full":
                args += ["--budget", "40%"]
            res = subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=600)
            label = f"{policy}, keys {key_type}, values {value_type}"
            check(res.returncode == 0, f"{label}: generate exits 0 ({res.stderr.strip()[-300:]})")
            if res.returncode != 0:
                continue
            cache = json.loads(res.stdout)["cache"]
            record = json.loads(res.stdout)
            name = key_type if key_type == value_type else f"k={key_type},v={value_type}"
            check(cache["type"] == name and cache["type_k"] == key_type and cache["type_v"] == value_type,
                  f"{label}: the record names the types ({cache['type']}, {cache['type_k']}, {cache['type_v']})")
            entry = row_bytes(key_type, head_dim) + row_bytes(value_type, head_dim)
            kept = sum(sum(heads) for heads in cache["kept"])
            check(len(cache["kept"]) == layers and all(len(h) == kv_heads for h in cache["kept"]),
                  f"{label}: kept counts per layer and KV head")
            check(cache["entry_bytes"] == kept * entry,
                  f"{label}: entry_bytes {cache['entry_bytes']} == {kept} kept entries x {entry} bytes")
            tokens = len(record["prompt_tokens"]) + len(record["generated_tokens"]) - 1  # the last token is not cached
            check(cache["full_cache_bytes"] == tokens * layers * kv_heads * entry,
                  f"{label}: full_cache_bytes {cache['full_cache_bytes']} == {tokens} tokens x {layers} layers x "
                  f"{kv_heads} KV heads x {entry} bytes")
            check(cache["bytes"] >= cache["entry_bytes"] and sum(cache["layer_bytes"]) == cache["bytes"],
                  f"{label}: the allocation {cache['bytes']} holds the entries and is the sum of its layers")
            if policy == "full":
                check(kept == tokens * layers * kv_heads, f"{label}: the full cache keeps every token")
                per_token[name] = layers * kv_heads * entry
            else:
                check(kept < tokens * layers * kv_heads, f"{label}: snapkv at 40 % evicts ({kept} kept)")
    # eval: the cell's cache in q8_0 against the float32 full-cache reference. Both grow by the same rule over the
    # same tokens, so their allocations hold the same number of entries and differ by the row sizes alone.
    res = subprocess.run([BINARY, "eval", "fidelity", "--prompt", PROMPT, "--policy", "full", "--max-new-tokens",
                          str(NEW_TOKENS), "--cache-type", "q8_0", "--json"], capture_output=True, text=True,
                         timeout=600)
    check(res.returncode == 0, f"eval fidelity --cache-type q8_0 exits 0 ({res.stderr.strip()[-300:]})")
    if res.returncode == 0:
        record = json.loads(res.stdout)
        metrics = record["metrics"]
        q8, f32 = 2 * row_bytes("q8_0", head_dim), 2 * row_bytes("f32", head_dim)
        check(record["cache_type"] == "q8_0", f"eval names the cell's cache type ({record['cache_type']})")
        check(metrics["cache_peak_bytes"] * f32 == metrics["full_cache_peak_bytes"] * q8,
              f"eval: the q8_0 cell's peak {metrics['cache_peak_bytes']} is {q8}/{f32} of the f32 reference's "
              f"{metrics['full_cache_peak_bytes']}")
        check(abs(metrics["memory_saved"] - (1 - q8 / f32)) < 1e-9,
              f"eval: memory_saved {metrics['memory_saved']} == 1 - {q8}/{f32}")
        check(metrics["top1_agreement"] >= 0.75, f"eval: q8_0 keeps the full cache's top-1 ({metrics['top1_agreement']})")
    # KIVI: no fixed row size; a full cache's bytes per (layer, KV head) follow the append rule's closed form
    # (kernels/cpu/kivi_part.h; test_kivi_cache.py checks the rule itself against numpy).
    for spec, bits, group, residual in (("kivi2:group=8,residual=8", 2, 8, 8), ("kivi4:group=32,residual=16", 4, 32, 16),
                                        ("kivi2", 2, 32, 128)):
        res = subprocess.run([BINARY, "generate", "--json", "--prompt", PROMPT, "--max-new-tokens", str(NEW_TOKENS),
                              "--ignore-eos", "--cache-type", spec], capture_output=True, text=True, timeout=600)
        check(res.returncode == 0, f"{spec}: generate exits 0 ({res.stderr.strip()[-300:]})")
        if res.returncode != 0:
            continue
        record = json.loads(res.stdout)
        cache = record["cache"]
        tokens = len(record["prompt_tokens"]) + len(record["generated_tokens"]) - 1
        codes, full = head_dim * bits // 8, 4 * head_dim
        key_residual = tokens if tokens < residual + group else residual + (tokens - residual) % group
        keys = (tokens - key_residual) // group * (2 * HALF * head_dim + group * codes) + key_residual * full
        value_residual = min(tokens, residual)
        values = (tokens - value_residual) * (2 * HALF * head_dim // group + codes) + value_residual * full
        expected = layers * kv_heads * (keys + values)
        check(cache["type"] == ("kivi2" if spec == "kivi2" else spec), f"{spec}: the record names the type ({cache['type']})")
        check(cache["entry_bytes"] == expected and cache["full_cache_bytes"] == expected,
              f"{spec}: entry_bytes {cache['entry_bytes']} and full_cache_bytes {cache['full_cache_bytes']} == "
              f"closed form {expected} ({tokens} tokens: keys {keys}, values {values} bytes per layer and KV head)")
        check(cache["bytes"] >= cache["entry_bytes"], f"{spec}: the allocation holds the entries")
        per_token[spec] = expected / tokens
    for name, size in per_token.items():
        print(f"cache {name}: {size:.1f} bytes per token ({size / per_token['f32']:.4f} of f32)")


if __name__ == "__main__":
    if not os.path.exists(MODEL):
        print(f"default model {MODEL} missing; run make")
        sys.exit(77)
    sys.exit(run_in_temp_folder(BINARY, "kvscope_cache_bytes_", all_checks))
