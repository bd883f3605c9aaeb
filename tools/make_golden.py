#!/usr/bin/env python3
"""Generate the golden fixture for kvscope's engine tests from an independent implementation.

The reference is PyTorch + Hugging Face transformers reading the *same* GGUF file that the
C++ engine loads (SmolLM2-135M-Instruct, Q4_1 with a Q8_0 token embedding). transformers
dequantizes every tensor to float32 on load (via gguf-py) and then runs its own Llama code
in float32 on the CPU, which is what kvscope does too (fp32 math on dequantized weights).

How to run (from the repository root):

    python3 -m venv /tmp/goldenv
    /tmp/goldenv/bin/pip install -r tools/requirements-golden.txt
    scripts/fetch_model.sh                       # -> .deps/models/SmolLM2-135M-Instruct.Q4_1.gguf
    /tmp/goldenv/bin/python tools/make_golden.py  # -> tests/fixtures/golden/

Options: --model PATH (GGUF file), --out DIR (fixture directory), --threads N (torch CPU
threads, default 1). Reruns with the same versions and CPU produce byte-identical files.

Pinned versions it was run with (see tools/requirements-golden.txt, recorded in the JSON too):
    Python 3.11.7, torch 2.15.0 (CPU), transformers 5.23.0, accelerate 1.15.0, gguf 0.19.0,
    numpy 2.4.6, tokenizers 0.23.3, sentencepiece 0.2.3.

Outputs (described in detail in tests/fixtures/golden/README.md):
    smollm2_golden.json      metadata, prompts, token ids, greedy continuations, debug vectors
    smollm2_logits_<i>.f32   final-position logits of prompt i: 49152 little-endian float32

Besides producing the fixture, the script cross-checks what transformers did to the weights
against a small numpy dequantizer written here (Q4_1 / Q8_0 block layouts from ggml), checks
the q/k head-dimension permutation, and checks that its KV-cache greedy loop agrees with a
single full (no-cache) forward over the generated sequence. Results go into "checks".
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
import torch

from reference_model import DEFAULT_MODEL, REPO_ROOT, load_reference, sha256_file

DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "golden"
N_NEW_TOKENS = 64
TOPK = 10
SCHEMA_VERSION = 1

# kind "text": tokenized as-is (no BOS for this model). kind "chat": rendered with the model's
# own chat template (which adds the default SmolLM system prompt), add_generation_prompt=True.
PROMPTS = [
    {
        "name": "english_prose",
        "kind": "text",
        "text": (
            "The old lighthouse keeper climbed the narrow spiral stairs every evening at dusk "
            "to light the great lamp. Ships passing through the rocky strait depended on its "
            "beam, and in forty years he had never once"
        ),
    },
    {
        "name": "unicode",
        "kind": "text",
        "text": (
            "Café crème in Zürich, a naïve façade; 日本語のテキストと中文字符。"
            "Emoji: 🙂🚀👍🏽 — «quotes» and ∑ x² ≈ π."
        ),
    },
    {
        "name": "python_code",
        "kind": "text",
        "text": (
            "def fibonacci(n):\n"
            '    """Return the n-th Fibonacci number."""\n'
            "    a, b = 0, 1\n"
            "    for _ in range(n):\n"
            "        a, b = b, a + b\n"
            "    return a\n"
            "\n"
            "\n"
            "def is_prime(k):\n"
            "    if k < 2:\n"
            "        return False\n"
        ),
    },
    {
        "name": "whitespace",
        "kind": "text",
        "text": (
            "   three leading spaces\n\n\n\tone tab\t\ttwo tabs\n"
            "        eight spaces    then four   \r\n  \n\t \t mixed\n end"
        ),
    },
    {
        "name": "digits_math",
        "kind": "text",
        "text": (
            "Compute step by step: 12345 + 67890 = 80235. Then 3.14159 * 2 = 6.28318, "
            "2^10 = 1024, and 7/8 = 0.875. Finally, 999 - 1000 ="
        ),
    },
    {
        "name": "chatml",
        "kind": "chat",
        "messages": [
            {"role": "user", "content": "What is the capital of France? Answer in one sentence."}
        ],
    },
]


# --------------------------------------------------------------------------------------------
# helpers


def f32_list(values) -> list[float]:
    """float32 values as Python floats whose JSON repr is the shortest that round-trips to the
    same float32 (e.g. 0.1 rather than 0.10000000149011612)."""
    arr = np.asarray(values, dtype=np.float32).reshape(-1)
    return [float(np.format_float_positional(v, unique=True, trim="-")) if np.isfinite(v)
            else float(v) for v in arr]


def pkg_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def hf_to_gguf_head_order(v: np.ndarray) -> np.ndarray:
    """Map one q/k head vector (head_dim) from HF rotate-half order to GGUF adjacent-pair
    order. transformers un-permutes q/k rows when loading GGUF (inverse of llama.cpp's
    convert_hf_to_gguf permute), so HF dim j pairs with j+hd/2, while in GGUF order the pair
    is (2j, 2j+1): gguf[2j] = hf[j], gguf[2j+1] = hf[j+hd/2]."""
    half = v.shape[-1] // 2
    out = np.empty_like(v)
    out[..., 0::2] = v[..., :half]
    out[..., 1::2] = v[..., half:]
    return out


def rope_adjacent_pairs(v: np.ndarray, pos: int, theta: float) -> np.ndarray:
    """ggml LLAMA_ROPE_TYPE_NORM: rotate adjacent pairs (2j, 2j+1) by pos * theta^(-2j/d).
    Computed in float64 as an independent check only."""
    d = v.shape[-1]
    j = np.arange(d // 2, dtype=np.float64)
    ang = pos * theta ** (-2.0 * j / d)
    c, s = np.cos(ang), np.sin(ang)
    x0, x1 = v[0::2].astype(np.float64), v[1::2].astype(np.float64)
    out = np.empty(d, dtype=np.float64)
    out[0::2] = x0 * c - x1 * s
    out[1::2] = x0 * s + x1 * c
    return out


# Independent numpy dequantizers for the two quantized formats in this file (ggml layouts).
def dequant_q8_0(raw: np.ndarray, rows: int, cols: int) -> np.ndarray:
    # block_q8_0 { ggml_half d; int8_t qs[32]; }  -> x = d * q
    b = raw.reshape(-1).view(np.uint8).reshape(-1, 34)
    d = b[:, 0:2].copy().view(np.float16).astype(np.float32)
    q = b[:, 2:34].copy().view(np.int8).astype(np.float32)
    return (d * q).reshape(rows, cols)


def dequant_q4_1(raw: np.ndarray, rows: int, cols: int) -> np.ndarray:
    # block_q4_1 { ggml_half d; ggml_half m; uint8_t qs[16]; } -> x = d * q + m,
    # q[i] = qs[i] & 0xF for i < 16, q[i + 16] = qs[i] >> 4.
    b = raw.reshape(-1).view(np.uint8).reshape(-1, 20)
    d = b[:, 0:2].copy().view(np.float16).astype(np.float32)
    m = b[:, 2:4].copy().view(np.float16).astype(np.float32)
    qs = b[:, 4:20]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)
    return (d * q + m).reshape(rows, cols)


# --------------------------------------------------------------------------------------------


def check_weights(model, gguf_path: Path, n_head: int, n_kv_head: int) -> dict:
    """Compare transformers' dequantized weights with our own numpy dequantization."""
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf_path))
    tensors = {t.name: t for t in reader.tensors}
    types = {}
    for t in reader.tensors:
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1

    def raw(name):
        t = tensors[name]
        cols, rows = int(t.shape[0]), int(t.shape[1])  # GGUF ne0 = contiguous (input) dim
        return t, rows, cols

    res = {"gguf_tensor_types": types,
           "gguf_has_output_weight": "output.weight" in tensors}
    layer0 = model.model.layers[0]

    t, r, c = raw("token_embd.weight")
    assert t.tensor_type.name == "Q8_0"
    emb = dequant_q8_0(t.data, r, c)
    hf = model.model.embed_tokens.weight.detach().numpy()
    res["token_embd_q8_0_max_abs_diff"] = float(np.max(np.abs(emb - hf)))
    res["lm_head_tied_to_token_embd"] = bool(
        model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr())

    for gname, hmod, nh in [("blk.0.attn_q.weight", layer0.self_attn.q_proj, n_head),
                            ("blk.0.attn_k.weight", layer0.self_attn.k_proj, n_kv_head)]:
        t, r, c = raw(gname)
        assert t.tensor_type.name == "Q4_1"
        w = dequant_q4_1(t.data, r, c)
        hfw = hmod.weight.detach().numpy()
        hd = r // nh
        # Rows of head h in HF order (j, j+hd/2) == GGUF rows (2j, 2j+1).
        mapped = hf_to_gguf_head_order(hfw.reshape(nh, hd, c).transpose(0, 2, 1))
        mapped = mapped.transpose(0, 2, 1).reshape(r, c)
        res[gname + "_q4_1_max_abs_diff_after_unpermute"] = float(np.max(np.abs(w - mapped)))
        res[gname + "_q4_1_max_abs_diff_without_unpermute"] = float(np.max(np.abs(w - hfw)))

    for gname, hmod in [("blk.0.attn_v.weight", layer0.self_attn.v_proj),
                        ("blk.0.attn_output.weight", layer0.self_attn.o_proj),
                        ("blk.0.ffn_down.weight", layer0.mlp.down_proj),
                        ("blk.29.ffn_gate.weight", model.model.layers[29].mlp.gate_proj)]:
        t, r, c = raw(gname)
        assert t.tensor_type.name == "Q4_1"
        w = dequant_q4_1(t.data, r, c)
        res[gname + "_q4_1_max_abs_diff"] = float(
            np.max(np.abs(w - hmod.weight.detach().numpy())))

    norm = np.asarray(tensors["blk.0.attn_norm.weight"].data, dtype=np.float32)
    res["blk.0.attn_norm_f32_max_abs_diff"] = float(
        np.max(np.abs(norm - layer0.input_layernorm.weight.detach().numpy())))
    return res


def encode_prompt(tok, p: dict) -> tuple[str, list[int]]:
    if p["kind"] == "chat":
        text = tok.apply_chat_template(p["messages"], tokenize=False, add_generation_prompt=True)
        enc = tok.apply_chat_template(p["messages"], tokenize=True, add_generation_prompt=True)
        ids_template = list(enc["input_ids"] if hasattr(enc, "keys") else enc)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert ids == ids_template, "chat template tokenization disagrees with plain encode"
    else:
        text = p["text"]
        ids = tok(text, add_special_tokens=False)["input_ids"]
    # This model has add_bos_token = false: the default encode must not add anything.
    assert tok(text)["input_ids"] == ids, "tokenizer added special tokens (BOS?) by default"
    return text, list(ids)


@torch.no_grad()
def greedy(model, ids: list[int], n_new: int):
    """Plain greedy with a KV cache: argmax (first index on ties), EOS ignored and fed back
    like any other token, no repetition penalty. Returns the prompt's forward output and the
    per-step (id, top1 logit, top1 - top2 margin)."""
    out = model(input_ids=torch.tensor([ids]), use_cache=True, output_hidden_states=True)
    prompt_out = out
    past, logits = out.past_key_values, out.logits[0, -1]
    steps = []
    for i in range(n_new):
        nxt = int(torch.argmax(logits))
        top2 = torch.topk(logits, 2).values
        steps.append((nxt, float(logits[nxt]), float(top2[0] - top2[1])))
        if i + 1 == n_new:
            break
        out = model(input_ids=torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
        past, logits = out.past_key_values, out.logits[0, -1]
    return prompt_out, steps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    import transformers

    tok, model = load_reference(args.model, args.threads)
    model_sha = sha256_file(args.model)
    cfg = model.config
    n_head, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
    head_dim = cfg.hidden_size // n_head
    rope_theta = float((getattr(cfg, "rope_parameters", None) or {}).get(
        "rope_theta", getattr(cfg, "rope_theta", 0.0)))
    vocab = cfg.vocab_size

    checks = check_weights(model, args.model, n_head, n_kv)

    # Hooks for debug vectors of prompt 0 (active only during its prompt forward).
    captured: dict[str, torch.Tensor] = {}
    layers = model.model.layers

    def hook(name):
        def fn(_mod, _inp, out):
            if name not in captured:  # keep the prompt forward only, not the decode steps
                captured[name] = (out[0] if isinstance(out, tuple) else out).detach().clone()
        return fn

    args.out.mkdir(parents=True, exist_ok=True)
    prompts_json = []
    debug = None
    for i, p in enumerate(PROMPTS):
        text, ids = encode_prompt(tok, p)
        handles = []
        if i == 0:
            captured.clear()
            handles = [layers[L].register_forward_hook(hook(f"layer{L}"))
                       for L in range(len(layers))]
            handles.append(layers[0].self_attn.k_proj.register_forward_hook(hook("k_proj0")))
            handles.append(layers[0].self_attn.v_proj.register_forward_hook(hook("v_proj0")))
        prompt_out, steps = greedy(model, ids, N_NEW_TOKENS)
        for h in handles:
            h.remove()
        all_logits = prompt_out.logits[0]                      # (n, vocab)
        final = all_logits[-1].numpy().astype("<f4")
        assert final.shape == (vocab,)
        gen_ids = [s[0] for s in steps]

        # Cross-check the cached loop: one no-cache forward over prompt + generated[:-1]
        # must reproduce every greedy choice.
        with torch.no_grad():
            full = model(input_ids=torch.tensor([ids + gen_ids[:-1]]), use_cache=False).logits[0]
        tf_ids = full[len(ids) - 1:].argmax(-1).tolist()
        tf_final_diff = float((full[len(ids) - 1] - all_logits[-1]).abs().max())
        mism = sum(a != b for a, b in zip(tf_ids, gen_ids))

        logits_name = f"smollm2_logits_{i}.f32"
        logits_path = args.out / logits_name
        final.tofile(logits_path)
        top = torch.topk(torch.from_numpy(final.astype(np.float32)), TOPK)

        entry = {
            "index": i,
            "name": p["name"],
            "kind": p["kind"],
            "text": text,
            "n_tokens": len(ids),
            "ids": ids,
            "tokens": tok.convert_ids_to_tokens(ids),
            "final_logits_file": logits_name,
            "final_logits_sha256": sha256_file(logits_path),
            "final_logits_top": {"ids": top.indices.tolist(), "values": f32_list(top.values)},
            "final_logits_argmax": int(np.argmax(final)),
            "greedy": {
                "n_new": N_NEW_TOKENS,
                "ids": gen_ids,
                "text": tok.decode(gen_ids, skip_special_tokens=False),
                "top1_logit": f32_list([s[1] for s in steps]),
                "margin_top1_top2": f32_list([s[2] for s in steps]),
                "eos_positions": [k for k, t in enumerate(gen_ids) if t == cfg.eos_token_id],
            },
            "checks": {
                "greedy_vs_full_forward_mismatches": mism,
                "final_logits_cache_vs_full_max_abs_diff": tf_final_diff,
            },
        }
        if p["kind"] == "chat":
            entry["messages"] = p["messages"]
        if i == 0:
            entry["per_position"] = {
                "argmax_ids": all_logits.argmax(-1).tolist(),
                "max_logit": f32_list(all_logits.max(-1).values),
            }
            last = len(ids) - 1
            hs = prompt_out.hidden_states  # (embeddings, layer 0 .. , final-normed)
            layer0 = captured["layer0"][0, last].numpy()
            assert np.array_equal(layer0, hs[1][0, last].numpy())
            # Post-RoPE keys/values as stored in the cache: (batch, kv_head, pos, head_dim).
            cache = prompt_out.past_key_values
            k_cache = cache.layers[0].keys if hasattr(cache, "layers") else cache.key_cache[0]
            v_cache = cache.layers[0].values if hasattr(cache, "layers") else cache.value_cache[0]
            k_hf = k_cache[0, 0, last].numpy()
            k_pre_hf = captured["k_proj0"][0, last, :head_dim].numpy()
            v0 = v_cache[0, 0, last].numpy()
            assert np.array_equal(v0, captured["v_proj0"][0, last, :head_dim].numpy())
            k_gguf = hf_to_gguf_head_order(k_hf)
            k_pre_gguf = hf_to_gguf_head_order(k_pre_hf)
            rope_check = rope_adjacent_pairs(k_pre_gguf, last, rope_theta)
            checks["rope_adjacent_pairs_vs_hf_rotate_half_max_abs_diff"] = float(
                np.max(np.abs(rope_check - k_gguf)))
            debug = {
                "prompt_index": 0,
                "position": last,
                "hidden_after_layer0_last": f32_list(layer0),
                "hidden_after_layer0_note": (
                    "residual stream output of decoder layer 0 at the last prompt position "
                    "(before any later norm); equals HF hidden_states[1]"),
                "layer0_kvhead0_key_post_rope_hf_order": f32_list(k_hf),
                "layer0_kvhead0_key_post_rope_gguf_order": f32_list(k_gguf),
                "layer0_kvhead0_key_pre_rope_hf_order": f32_list(k_pre_hf),
                "layer0_kvhead0_key_pre_rope_gguf_order": f32_list(k_pre_gguf),
                "layer0_kvhead0_value": f32_list(v0),
                "key_order_note": (
                    "transformers un-permutes q/k rows when loading GGUF and uses rotate-half "
                    "RoPE, so *_hf_order pairs dims (j, j+32). *_gguf_order is the same vector "
                    "re-indexed to GGUF/ggml adjacent-pair order (gguf[2j]=hf[j], "
                    "gguf[2j+1]=hf[j+32]) -- what an engine using the GGUF weights as stored "
                    "with LLAMA_ROPE_TYPE_NORM produces. Values are order-independent."),
                "hidden_last_pos_per_layer": [f32_list(captured[f"layer{L}"][0, last])
                                              for L in range(len(layers))],
                "hidden_final_norm_last": f32_list(hs[-1][0, last]),
                "hidden_per_layer_note": (
                    "hidden_last_pos_per_layer[L] = residual stream after decoder layer L at "
                    "the last prompt position; hidden_final_norm_last = after the final "
                    "RMSNorm (input to the tied lm_head)"),
            }
        prompts_json.append(entry)
        print(f"[{i}] {p['name']}: {len(ids)} tokens, argmax {entry['final_logits_argmax']}, "
              f"greedy/full mismatches {mism}\n    -> {entry['greedy']['text']!r}", flush=True)

    doc = {
        "schema_version": SCHEMA_VERSION,
        "generator": "tools/make_golden.py",
        "model": {
            "file": args.model.name,
            "sha256": model_sha,
            "architecture": "llama",
            "n_layer": cfg.num_hidden_layers,
            "n_embd": cfg.hidden_size,
            "n_ff": cfg.intermediate_size,
            "n_head": n_head,
            "n_head_kv": n_kv,
            "head_dim": head_dim,
            "vocab_size": vocab,
            "rope_theta": rope_theta,
            "rms_norm_eps": cfg.rms_norm_eps,
            "tie_word_embeddings": bool(cfg.tie_word_embeddings),
            "bos_token_id": cfg.bos_token_id,
            "eos_token_id": cfg.eos_token_id,
            "add_bos_token": False,
        },
        "reference": {
            "implementation": "transformers LlamaForCausalLM from GGUF (weights dequantized "
                              "to float32 by gguf-py), eager attention, float32, CPU",
            "python": platform.python_version(),
            "versions": {n: pkg_version(n) for n in
                         ["torch", "transformers", "accelerate", "gguf", "numpy",
                          "tokenizers", "sentencepiece"]},
            "torch_threads": torch.get_num_threads(),
            "transformers_version_check": transformers.__version__,
        },
        "conventions": {
            "logits_files": "raw little-endian float32, vocab_size values, logits of the last "
                            "prompt position (predicting the first new token)",
            "greedy": "argmax with lowest-id tie-break, EOS not special (fed back), no "
                      "repetition penalty, KV-cached; ids are the 64 new tokens only",
            "tokenization": "no BOS/EOS added; chat prompt rendered with the GGUF chat "
                            "template, add_generation_prompt=True; special tokens in the "
                            "rendered text are parsed as single ids",
            "floats": "JSON floats are float32 values printed with the shortest repr that "
                      "round-trips to the same float32",
        },
        "checks": checks,
        "prompts": prompts_json,
        "debug": debug,
    }
    json_path = args.out / "smollm2_golden.json"
    with open(json_path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(json.dumps(checks, indent=1))
    print(f"wrote {json_path} and {len(PROMPTS)} logits files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
