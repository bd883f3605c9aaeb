#!/usr/bin/env python3
"""Converts a llama-architecture GGUF file into a Hugging Face folder (LlamaForCausalLM), without torch.

Used by the build to recreate the SmolLM2 Hugging Face test folders from the default GGUF on a clean
clone (tests/fixtures/hf_golden/README.md). Needs only numpy and gguf (scripts/requirements.txt).

What it writes, the way Hugging Face's own files look:
  config.json, generation_config.json     LlamaForCausalLM hyper-parameters from the GGUF metadata
  model.safetensors                       or, with --shards N, model-0000i-of-0000N.safetensors plus
                                          model.safetensors.index.json
  tokenizer.json, tokenizer_config.json   byte-level BPE from the GGUF vocabulary and merges

Weights are dequantised with gguf-py to float32, then stored as F32, or as BF16 rounded to nearest even.
llama.cpp's converter permutes the rows of q and k so that RoPE rotates adjacent pairs; this script
undoes that permutation (Hugging Face pairs dimension i with i + head_dim/2). The safetensors files
are written here by hand from the format's definition (8-byte little-endian header length, JSON header,
data), which is all the format is; transformers reads them back in tools/make_hf_golden.py.
"""
import argparse
import json
import struct
from pathlib import Path

import gguf
import numpy as np


def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def unpermute_rows(w, n_heads):
    """Inverse of llama.cpp convert_hf_to_gguf's permute (rows grouped per head as [2][half] -> [half][2])."""
    rows, cols = w.shape
    head = rows // n_heads
    return w.reshape(n_heads, head // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def to_bf16_bits(x):
    """float32 -> bfloat16 bit patterns, round to nearest even (what torch's .to(torch.bfloat16) does)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def write_safetensors(path, tensors, dtype):
    """tensors: list of (name, float32 array). Writes them in order, 8-byte aligned header as safetensors does."""
    header = {}
    blobs = []
    offset = 0
    for name, array in tensors:
        data = to_bf16_bits(array).tobytes() if dtype == "BF16" else np.ascontiguousarray(array, np.float32).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for blob in blobs:
            out.write(blob)
    return offset


def hf_tensors(reader, n_heads, n_kv_heads, n_layers):
    """(HF name, float32 array [rows][cols]) in the order HF checkpoints list them."""
    by_name = {t.name: t for t in reader.tensors}

    def get(name):
        t = by_name[name]
        return np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)

    out = [("model.embed_tokens.weight", get("token_embd.weight"))]
    for layer in range(n_layers):
        p, q = f"blk.{layer}.", f"model.layers.{layer}."
        out += [
            (q + "input_layernorm.weight", get(p + "attn_norm.weight")),
            (q + "self_attn.q_proj.weight", unpermute_rows(get(p + "attn_q.weight"), n_heads)),
            (q + "self_attn.k_proj.weight", unpermute_rows(get(p + "attn_k.weight"), n_kv_heads)),
            (q + "self_attn.v_proj.weight", get(p + "attn_v.weight")),
            (q + "self_attn.o_proj.weight", get(p + "attn_output.weight")),
            (q + "post_attention_layernorm.weight", get(p + "ffn_norm.weight")),
            (q + "mlp.gate_proj.weight", get(p + "ffn_gate.weight")),
            (q + "mlp.up_proj.weight", get(p + "ffn_up.weight")),
            (q + "mlp.down_proj.weight", get(p + "ffn_down.weight")),
        ]
    out.append(("model.norm.weight", get("output_norm.weight")))
    if "output.weight" in by_name:
        out.append(("lm_head.weight", get("output.weight")))
    return out


def tokenizer_files(reader):
    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type")
    merges = field(reader, "tokenizer.ggml.merges")
    pre = field(reader, "tokenizer.ggml.pre", "default")
    if field(reader, "tokenizer.ggml.model") != "gpt2":
        raise SystemExit("only byte-level BPE (tokenizer.ggml.model gpt2) GGUF vocabularies are converted")
    # Token type 3 is CONTROL in llama.cpp: those become special added tokens, as in the original files.
    added = [{"id": i, "content": tokens[i], "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i in range(len(tokens)) if types[i] == 3]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    if pre == "smollm":  # SmolLM2's own tokenizer.json: every digit alone, then the GPT-2 regex
        pre_tokenizer = {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True},
                                                               byte_level]}
    elif pre in ("default", "gpt2"):
        pre_tokenizer = byte_level
    else:
        raise SystemExit(f"pre-tokenizer {pre!r} is not converted by this script")
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": pre_tokenizer, "post_processor": dict(byte_level, trim_offsets=False),
        "decoder": dict(byte_level),
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": list(merges)},
    }
    bos = tokens[field(reader, "tokenizer.ggml.bos_token_id")]
    # SmolLM2-Instruct's own files end a turn with <|im_end|>; the GGUF's eos id points at <|im_start|>.
    eos = "<|im_end|>" if "<|im_end|>" in tokens else tokens[field(reader, "tokenizer.ggml.eos_token_id")]
    config = {
        "add_prefix_space": False, "bos_token": bos, "eos_token": eos, "pad_token": eos,
        "unk_token": tokens[0], "clean_up_tokenization_spaces": False, "model_max_length": 8192,
        "tokenizer_class": "GPT2Tokenizer", "vocab_size": len(tokens),
        "chat_template": field(reader, "tokenizer.chat_template"),
    }
    return tokenizer, config, tokens.index(bos), tokens.index(eos)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gguf", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    parser.add_argument("--shards", type=int, default=1, help="split the weights over this many files")
    args = parser.parse_args()

    reader = gguf.GGUFReader(args.gguf)
    arch = field(reader, "general.architecture")
    if arch != "llama":
        raise SystemExit(f"{args.gguf}: architecture {arch!r} (this script converts llama only)")
    n_layers = field(reader, "llama.block_count")
    n_heads = field(reader, "llama.attention.head_count")
    n_kv_heads = field(reader, "llama.attention.head_count_kv", n_heads)
    dim = field(reader, "llama.embedding_length")
    tensors = hf_tensors(reader, n_heads, n_kv_heads, n_layers)
    tokenizer, tokenizer_config, bos_id, eos_id = tokenizer_files(reader)
    tied = all(name != "lm_head.weight" for name, _ in tensors)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": dim, "intermediate_size": field(reader, "llama.feed_forward_length"),
        "num_hidden_layers": n_layers, "num_attention_heads": n_heads, "num_key_value_heads": n_kv_heads,
        "head_dim": dim // n_heads, "max_position_embeddings": field(reader, "llama.context_length"),
        "rms_norm_eps": float(field(reader, "llama.attention.layer_norm_rms_epsilon")),
        "rope_theta": float(field(reader, "llama.rope.freq_base", 10000.0)), "rope_scaling": None,
        "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False, "pretraining_tp": 1,
        "initializer_range": 0.02, "tie_word_embeddings": tied, "use_cache": True,
        "vocab_size": len(tokenizer["model"]["vocab"]), "bos_token_id": bos_id, "eos_token_id": eos_id,
        "torch_dtype": "bfloat16" if args.dtype == "bf16" else "float32",
    }

    args.out.mkdir(parents=True, exist_ok=True)
    dtype = "BF16" if args.dtype == "bf16" else "F32"
    if args.shards <= 1:
        write_safetensors(args.out / "model.safetensors", tensors, dtype)
    else:
        per_shard = -(-len(tensors) // args.shards)
        weight_map, total = {}, 0
        for s in range(args.shards):
            name = f"model-{s + 1:05d}-of-{args.shards:05d}.safetensors"
            part = tensors[s * per_shard:(s + 1) * per_shard]
            total += write_safetensors(args.out / name, part, dtype)
            weight_map.update({tensor_name: name for tensor_name, _ in part})
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (args.out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    (args.out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    generation = {"bos_token_id": bos_id, "eos_token_id": eos_id, "pad_token_id": eos_id}
    (args.out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    (args.out / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False) + "\n")
    (args.out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")


if __name__ == "__main__":
    main()
