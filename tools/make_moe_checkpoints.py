#!/usr/bin/env python3
"""Tiny random Phi-3 and mixture-of-experts checkpoints, written by transformers, with transformers' goldens.

Writes tests/fixtures/hf_moe/<name>/ (a Hugging Face folder), <name>.gguf (the same weights laid out as llama.cpp's
convert_hf_to_gguf.py lays them out, written with gguf-py) and tests/fixtures/hf_moe/golden.json:

  phi3      Phi3ForCausalLM: fused qkv_proj and gate_up_proj, longrope scaling with short and long factors and an
            original context of 32 (so that prompt 0's generation crosses it and the long factors take over in
            the middle of a run, as transformers' longrope_frequency_update switches them), attention factor
            sqrt(1 + ln(256/32) / ln 32) from max_position_embeddings / original_max_position_embeddings;
            GGUF `phi3` (attn_qkv, ffn_up holding gate and up rows, rope_factors_short/long tensors,
            rope.scaling.attn_factor, rope.scaling.original_context_length)
  phi4mini  Phi3ForCausalLM with partial_rotary_factor 0.75 (Phi-4-mini's layout): RoPE turns 12 of each head's 16
            dimensions, with longrope; GGUF rope.dimension_count 12
  qwen3moe  Qwen3MoeForCausalLM: 8 experts, top-2, norm_topk_prob, q/k RMSNorm; GGUF `qwen3moe` (ffn_gate_inp and
            the merged ffn_gate_exps / ffn_up_exps / ffn_down_exps)
  mixtral   MixtralForCausalLM: 4 experts, top-2 (always renormalised), 4 heads / 1 KV head; GGUF `llama` with
            llama.expert_count (q/k rows permuted for adjacent-pair RoPE, merged experts)
  qwen3moe_mxfp4.gguf  the qwen3moe GGUF with its gate and up experts quantized to MXFP4 by gguf-py (as
            llama-quantize's MXFP4_MOE does); its golden is transformers on the folder with those experts
            dequantized by gguf-py, plus one dequantized row (`dequantized_row`)

golden.json, per checkpoint and for each of three prompts: the prompt ids, the last position's logits, 24 greedy
tokens with top-1/top-2 margins from transformers' forward over its DynamicCache, one token per call (as kvscope
runs; generate() gives the same tokens except for Phi-3 once a run crosses original_max_position_embeddings:
Phi3ForCausalLM.prepare_inputs_for_generation then drops the cache and re-encodes every position with the long
factors, which a cache under a compression policy cannot do; those tokens are kept as `generate_ids`); for prompt 0, the eager
attention probabilities of every layer and head over the prompt, and for the MoE checkpoints the experts each
layer's router chose per prompt token (softmax, top-k, transformers' order).
Regenerate (byte-identical with the pinned versions of tools/requirements-golden.txt):
  /tmp/goldenv/bin/python tools/make_moe_checkpoints.py
"""
import json
import math
import shutil
from pathlib import Path

import gguf
import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, MixtralConfig, Phi3Config, Qwen3MoeConfig

from make_synthetic_checkpoints import (LLAMA3_TOKENIZER, QWEN3_TOKENIZER, permute_for_gguf, randomize,
                                        save_tokenizer, shortest, train_tokenizer)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/fixtures/hf_moe"
N_NEW = 24
PROMPTS = [
    "The keeper climbed the stairs.",
    "Ships passing through the rocky strait depended on its beam, and in forty years the keeper had never once "
    "let the lamp go dark; he wrote the weather in his log every night.",
    "Count the steps: one, two, three. Café naïve 日本",
]

COMMON = dict(max_position_embeddings=256, rms_norm_eps=1e-5, hidden_act="silu", tie_word_embeddings=False)
PHI3_PAIRS = 6  # head_dim 12 / 2
CHECKPOINTS = [
    ("phi3", Phi3Config, dict(hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                              num_key_value_heads=2, sliding_window=None, pad_token_id=None,
                              original_max_position_embeddings=32,
                              rope_parameters=dict(rope_type="longrope", rope_theta=10000.0,
                                                   original_max_position_embeddings=32,
                                                   short_factor=[1.0 + 0.15 * i for i in range(PHI3_PAIRS)],
                                                   long_factor=[1.0 + 1.5 * i for i in range(PHI3_PAIRS)])),
     QWEN3_TOKENIZER),
    ("qwen3moe", Qwen3MoeConfig, dict(hidden_size=32, intermediate_size=32, moe_intermediate_size=16,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
                                      use_sliding_window=False, rope_parameters=dict(rope_type="default",
                                                                                     rope_theta=1e6)),
     QWEN3_TOKENIZER),
    ("mixtral", MixtralConfig, dict(hidden_size=32, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
                                    num_key_value_heads=1, num_local_experts=4, num_experts_per_tok=2,
                                    rope_parameters=dict(rope_type="default", rope_theta=1e6)),
     LLAMA3_TOKENIZER),
    # Last, so that the seeds of those above stay. Phi-4-mini's layout: Phi3ForCausalLM rotating 3/4 of each head.
    ("phi4mini", Phi3Config, dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
                                  num_key_value_heads=1, sliding_window=None, pad_token_id=None,
                                  original_max_position_embeddings=32, partial_rotary_factor=0.75,
                                  rope_parameters=dict(rope_type="longrope", rope_theta=10000.0,
                                                       original_max_position_embeddings=32,
                                                       short_factor=[1.0 + 0.1 * i for i in range(6)],
                                                       long_factor=[1.0 + 2.0 * i for i in range(6)])),
     QWEN3_TOKENIZER),
]


def greedy_with_cache(model, ids):
    """One forward per token over transformers' DynamicCache, as kvscope runs: longrope switches factors per call."""
    cache = transformers.DynamicCache(config=model.config)
    tokens, margins = [], []
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True).logits[0, -1]
        for step in range(N_NEW):
            top = torch.topk(logits.to(torch.float32), 2)
            tokens.append(int(torch.argmax(logits)))
            margins.append(float(top.values[0] - top.values[1]))
            if step + 1 < N_NEW:
                logits = model(input_ids=torch.tensor([[tokens[-1]]]), past_key_values=cache, use_cache=True,
                               position_ids=torch.tensor([[len(ids) + step]])).logits[0, -1]
    return tokens, margins


def greedy_by_generate(model, ids):
    """generate(), which for Phi-3 drops its cache once at the original context and re-encodes every position."""
    with torch.no_grad():
        # An explicit mask: generate() would otherwise mask every token equal to pad_token_id (Mixtral's BOS).
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=N_NEW, do_sample=False, pad_token_id=0, eos_token_id=None)
    return [int(t) for t in out[0, len(ids):]]


def routing_of(router_logits, top_k):
    """Per layer, per token: the top-k experts of the softmax, most probable first (MixtralTopKRouter)."""
    layers = []
    for logits in router_logits:
        probs = torch.softmax(logits.to(torch.float32), dim=-1)
        layers.append([[int(e) for e in row] for row in torch.topk(probs, top_k, dim=-1).indices])
    return layers


def golden_for(folder, **load):
    """`load`: further from_pretrained arguments (a quantization_config)."""
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager",
                                                 **load).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompts = []
    for index, text in enumerate(PROMPTS):
        ids = tokenizer(text)["input_ids"]
        moe = hasattr(model.config, "num_experts_per_tok")
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids]), output_attentions=True, output_router_logits=moe)
        greedy, margins = greedy_with_cache(model, ids)
        entry = {"text": text, "ids": ids, "final_logits": shortest(out.logits[0, -1].numpy()),
                 "greedy": {"ids": greedy, "margin_top1_top2": shortest(margins)}}
        by_generate = greedy_by_generate(model, ids)
        if by_generate != greedy:  # Phi-3 crossing its original context: see the module docstring
            entry["greedy"]["generate_ids"] = by_generate
        if index == 0:
            # [layer][head][query][key], the causal rows of eager attention.
            entry["attention"] = [[[shortest(row[: q + 1]) for q, row in enumerate(head.numpy())]
                                   for head in layer[0]] for layer in out.attentions]
            if moe:
                entry["routing"] = routing_of(out.router_logits, model.config.num_experts_per_tok)
        prompts.append(entry)
    return {"architecture": model.config.architectures[0], "prompts": prompts}


def add_tokenizer(writer, tok, tok_spec, pre):
    vocab = tok.get_vocab(with_added_tokens=True)
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda item: item[1])]
    special = set(tok_spec["specials"])
    merges = json.loads(tok.to_str())["model"]["merges"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in special else 1 for t in tokens])
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in merges])
    if tok_spec["bos"]:
        writer.add_bos_token_id(vocab[tok_spec["bos"]])
    writer.add_eos_token_id(vocab[tok_spec["eos"]])
    writer.add_add_bos_token(tok_spec["bos"] is not None)


def add_shape(writer, config, head_dim, rope_dims, ffn):
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_dimension_count(rope_dims)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)


def write_phi3(writer, config, w):
    """convert_hf_to_gguf.py Phi3MiniModel: fused tensors kept, longrope factors as tensors."""
    rope = config.rope_parameters
    head_dim = config.hidden_size // config.num_attention_heads
    rope_dims = int(rope.get("partial_rotary_factor", 1.0) * config.hidden_size) // config.num_attention_heads
    add_shape(writer, config, head_dim, rope_dims, config.intermediate_size)
    writer.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
    writer.add_sliding_window(0)
    scale = config.max_position_embeddings / rope["original_max_position_embeddings"]
    writer.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(rope["original_max_position_embeddings"])))
    writer.add_tensor("token_embd.weight", w["model.embed_tokens.weight"])
    for layer in range(config.num_hidden_layers):
        hf, g = f"model.layers.{layer}.", f"blk.{layer}."
        writer.add_tensor(g + "attn_norm.weight", w[hf + "input_layernorm.weight"])
        writer.add_tensor(g + "attn_qkv.weight", w[hf + "self_attn.qkv_proj.weight"])
        writer.add_tensor(g + "attn_output.weight", w[hf + "self_attn.o_proj.weight"])
        writer.add_tensor(g + "ffn_norm.weight", w[hf + "post_attention_layernorm.weight"])
        writer.add_tensor(g + "ffn_up.weight", w[hf + "mlp.gate_up_proj.weight"])
        writer.add_tensor(g + "ffn_down.weight", w[hf + "mlp.down_proj.weight"])
    writer.add_tensor("rope_factors_long.weight", np.array(rope["long_factor"], dtype=np.float32))
    writer.add_tensor("rope_factors_short.weight", np.array(rope["short_factor"], dtype=np.float32))


def write_moe(writer, config, w, arch, mxfp4=False):
    """convert_hf_to_gguf.py LlamaModel (Mixtral) / Qwen3MoeModel: experts stacked into [n_expert, rows, cols]."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    mixtral = arch == "llama"
    expert_ffn = config.intermediate_size if mixtral else config.moe_intermediate_size
    add_shape(writer, config, head_dim, head_dim, config.intermediate_size)
    if not mixtral:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
        writer.add_expert_feed_forward_length(expert_ffn)
    writer.add_expert_count(config.num_local_experts)
    writer.add_expert_used_count(config.num_experts_per_tok)
    writer.add_tensor("token_embd.weight", w["model.embed_tokens.weight"])
    moe = "block_sparse_moe" if mixtral else "mlp"
    names = {"gate": "w1", "down": "w2", "up": "w3"} if mixtral else {p: f"{p}_proj" for p in ("gate", "up", "down")}
    for layer in range(config.num_hidden_layers):
        hf, g = f"model.layers.{layer}.", f"blk.{layer}."
        q, k = w[hf + "self_attn.q_proj.weight"], w[hf + "self_attn.k_proj.weight"]
        if mixtral:
            q, k = permute_for_gguf(q, config.num_attention_heads), permute_for_gguf(k, config.num_key_value_heads)
        writer.add_tensor(g + "attn_norm.weight", w[hf + "input_layernorm.weight"])
        writer.add_tensor(g + "attn_q.weight", q)
        writer.add_tensor(g + "attn_k.weight", k)
        writer.add_tensor(g + "attn_v.weight", w[hf + "self_attn.v_proj.weight"])
        for norm in ("q", "k"):
            if hf + f"self_attn.{norm}_norm.weight" in w:
                writer.add_tensor(g + f"attn_{norm}_norm.weight", w[hf + f"self_attn.{norm}_norm.weight"])
        writer.add_tensor(g + "attn_output.weight", w[hf + "self_attn.o_proj.weight"])
        writer.add_tensor(g + "ffn_norm.weight", w[hf + "post_attention_layernorm.weight"])
        writer.add_tensor(g + "ffn_gate_inp.weight", w[hf + f"{moe}.gate.weight"])
        for part, hf_name in names.items():
            stacked = np.stack([w[hf + f"{moe}.experts.{e}.{hf_name}.weight"] for e in range(config.num_local_experts)])
            if mxfp4 and stacked.shape[-1] % 32 == 0:  # llama-quantize's MXFP4_MOE: experts whose rows are whole blocks
                mxfp4_type = gguf.GGMLQuantizationType.MXFP4
                writer.add_tensor(g + f"ffn_{part}_exps.weight", gguf.quants.quantize(stacked, mxfp4_type),
                                  raw_dtype=mxfp4_type)
            else:
                writer.add_tensor(g + f"ffn_{part}_exps.weight", stacked)


def write_gguf(folder, path, arch, tok, tok_spec, mxfp4=False):
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    config = model.config
    w = {}
    with __import__("safetensors").safe_open(folder / "model.safetensors", "np") as f:
        for key in f.keys():
            w[key] = f.get_tensor(key).astype(np.float32)
    writer = gguf.GGUFWriter(path, arch)
    writer.add_name(folder.name)
    if arch == "phi3":
        write_phi3(writer, config, w)
    else:
        write_moe(writer, config, w, arch, mxfp4)
    add_tokenizer(writer, tok, tok_spec, "llama-bpe" if arch == "llama" else "qwen2")
    writer.add_tensor("output_norm.weight", w["model.norm.weight"])
    writer.add_tensor("output.weight", w["lm_head.weight"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def mxfp4_reference(folder, path):
    """The folder with the GGUF's MXFP4 experts dequantized by gguf-py: what transformers runs as the reference."""
    from safetensors.numpy import load_file, save_file
    reader = gguf.GGUFReader(path)
    reference = folder.parent / (folder.name + "_mxfp4_reference")
    shutil.rmtree(reference, ignore_errors=True)
    shutil.copytree(folder, reference)
    weights = load_file(folder / "model.safetensors")
    check = None
    for t in reader.tensors:
        if t.tensor_type != gguf.GGMLQuantizationType.MXFP4:
            continue
        values = gguf.quants.dequantize(t.data, t.tensor_type)  # [n_expert, rows, cols]
        layer, part = int(t.name.split(".")[1]), t.name.split(".")[2].split("_")[1]
        for e in range(values.shape[0]):
            weights[f"model.layers.{layer}.mlp.experts.{e}.{part}_proj.weight"] = values[e].astype(np.float32)
        if check is None:
            check = {"tensor": t.name, "expert": 1, "row": 2, "values": shortest(values[1, 2])}
    save_file(weights, reference / "model.safetensors", metadata={"format": "pt"})
    return reference, check


GGUF_ARCH = {"phi3": "phi3", "phi4mini": "phi3", "qwen3moe": "qwen3moe", "mixtral": "llama"}


def main():
    torch.set_num_threads(1)
    OUT.mkdir(parents=True, exist_ok=True)  # README.md there is written by hand
    golden = {"schema_version": 1,
              "reference": {"implementation": "transformers AutoModelForCausalLM, float32 compute, eager attention, "
                                              "CPU; greedy one token per forward over a DynamicCache",
                            "versions": {"torch": torch.__version__, "transformers": transformers.__version__}},
              "checkpoints": {}}
    tokenizers = {}
    for seed, (name, config_class, fields, tok_spec) in enumerate(CHECKPOINTS):
        folder = OUT / name
        shutil.rmtree(folder, ignore_errors=True)
        (OUT / f"{name}.gguf").unlink(missing_ok=True)
        key = tok_spec["pattern"]
        tokenizers.setdefault(key, train_tokenizer(tok_spec))
        tok = tokenizers[key]
        bos_id = tok.token_to_id(tok_spec["bos"]) if tok_spec["bos"] else None
        config = config_class(**COMMON, **fields, vocab_size=tok.get_vocab_size(), bos_token_id=bos_id,
                              eos_token_id=tok.token_to_id(tok_spec["eos"]))
        config.architectures = [config_class.__name__.replace("Config", "ForCausalLM")]
        torch.manual_seed(100 + seed)
        model = AutoModelForCausalLM.from_config(config)
        randomize(model, 2000 + seed)
        model.save_pretrained(folder)
        save_tokenizer(tok, folder, tok_spec["bos"], tok_spec["eos"], tok_spec["unk"], tok_spec["template"])
        golden["checkpoints"][name] = golden_for(folder)
        write_gguf(folder, OUT / f"{name}.gguf", GGUF_ARCH[name], tok, tok_spec)
        golden["checkpoints"][name]["gguf"] = f"{name}.gguf"
        if name == "qwen3moe":  # its gate and up experts as MXFP4 (down's 16-value rows are not whole blocks)
            write_gguf(folder, OUT / "qwen3moe_mxfp4.gguf", "qwen3moe", tok, tok_spec, mxfp4=True)
            reference, check = mxfp4_reference(folder, OUT / "qwen3moe_mxfp4.gguf")
            golden["checkpoints"]["qwen3moe_mxfp4"] = golden_for(reference)
            golden["checkpoints"]["qwen3moe_mxfp4"].update(gguf="qwen3moe_mxfp4.gguf", dequantized_row=check)
            shutil.rmtree(reference)
        g = golden["checkpoints"][name]
        print(name, [len(p["ids"]) for p in g["prompts"]], "greedy", g["prompts"][0]["greedy"]["ids"][:8],
              "min margin", min(min(p["greedy"]["margin_top1_top2"]) for p in g["prompts"]))
    (OUT / "golden.json").write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
