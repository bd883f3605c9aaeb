#!/usr/bin/env python3
"""A tiny random gpt-oss checkpoint, written by transformers, with transformers' goldens.

Writes tests/fixtures/hf_gptoss/gptoss/ (a Hugging Face folder written by GptOssForCausalLM.save_pretrained),
gptoss.gguf (the same weights laid out as llama.cpp's convert_hf_to_gguf.py GptOssModel lays them out, written with
gguf-py), gptoss_mxfp4.gguf (the same with every expert matrix quantized to MXFP4 by gguf-py, as the released
gpt-oss GGUFs store them), gptoss_mxfp4/ (the folder as the released openai/gpt-oss-* folders ship: every expert
matrix as MXFP4 `_blocks` / `_scales`, quantized here from the folder's experts, the other tensors in BF16, and
config.json's `quantization_config`) and tests/fixtures/hf_gptoss/golden.json.

The checkpoint has everything gpt-oss adds to a Llama layer: a learned sink logit per head (sinks, in every
softmax's denominator), sliding-window layers alternating with global ones (layer_types; window 8, below the
prompts' lengths, where the real model has 128), q/k/v/o biases, YaRN rope scaling with the released model's
parameters (factor 32, original context 4096, beta 32/1, truncate false, base 150000), 4 experts of which the
router (with its bias) picks 2 by their logits and weighs them by a softmax over those 2, expert biases, and the
clamped SwiGLU (up + 1) * gate * sigmoid(alpha * gate) with limit 2 (the released 7 would rarely bite on these
activations) and alpha 1.702. The folder stores the experts as transformers does: gate_up_proj [E, hidden, 2I]
(x @ W, gate and up columns interleaved) and down_proj [E, I, hidden].

golden.json: for each of three prompts the prompt ids, the last position's logits, 24 greedy tokens from
transformers' forward over its DynamicCache, one token per call (as kvscope runs), with top-1/top-2 margins; for
prompt 0 the eager attention probabilities of every layer and head over the prompt (the sink's share left out,
as transformers returns them) and of its first 3 decode queries (`decode_attention`, the greedy tokens fed back),
the sinks, and the experts each layer's router chose per prompt token.
`gptoss_mxfp4`'s golden is transformers on the folder with the GGUF's MXFP4 experts dequantized by gguf-py;
`gptoss_mxfp4_folder`'s is transformers loading gptoss_mxfp4/ itself with Mxfp4Config(dequantize=True), with
`dequantized_rows`: one gate, up and down row of expert 1 as transformers holds them after dequantizing.
Regenerate (byte-identical with the pinned versions of tools/requirements-golden.txt):
  /tmp/goldenv/bin/python tools/make_gptoss_checkpoint.py
"""
import json
import shutil
from pathlib import Path

import gguf
import numpy as np
import torch
import transformers
from safetensors.numpy import load_file, save_file
from safetensors.torch import save_file as save_torch_file
from transformers import AutoModelForCausalLM, GptOssConfig, Mxfp4Config

from make_moe_checkpoints import PROMPTS, add_tokenizer, golden_for
from make_synthetic_checkpoints import QWEN3_TOKENIZER, randomize, save_tokenizer, shortest, train_tokenizer

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/fixtures/hf_gptoss"
YARN = dict(rope_type="yarn", rope_theta=150000.0, factor=32.0, beta_fast=32.0, beta_slow=1.0, truncate=False,
            original_max_position_embeddings=4096)
FIELDS = dict(hidden_size=64, intermediate_size=32, head_dim=16, num_attention_heads=4, num_key_value_heads=2,
              num_hidden_layers=4, num_local_experts=4, num_experts_per_tok=2, sliding_window=8,
              max_position_embeddings=131072, rms_norm_eps=1e-5, swiglu_limit=2.0, swiglu_alpha=1.702,
              attention_bias=True, tie_word_embeddings=False, rope_parameters=YARN)


DECODE_STEPS = 3  # prompt 0's decode rows in the golden; tests/e2e/gptoss_test.cpp traces DECODE_STEPS + 1 tokens


def decode_attention(folder, prompt):
    """Eager attention of a prompt's first DECODE_STEPS decode queries: the prompt and its first greedy tokens in one
    causal forward, rows len(ids) .. len(ids) + DECODE_STEPS - 1, which feeding the tokens back one by one computes
    alike; [layer][head][step][key], each row over the keys 0 .. its position, without the sink's share."""
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    n = len(prompt["ids"])
    ids = prompt["ids"] + prompt["greedy"]["ids"][:DECODE_STEPS]
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_attentions=True)
    return [[[shortest(head[n + d, : n + d + 1]) for d in range(DECODE_STEPS)] for head in layer[0].numpy()]
            for layer in out.attentions]


def write_gguf(folder, path, tok, config, mxfp4):
    """convert_hf_to_gguf.py GptOssModel: gate_up split into ffn_gate_exps / ffn_up_exps [E][I][hidden] (the
    folder's columns ::2 and 1::2, transposed), down transposed to [E][hidden][I], biases split the same way,
    sinks as attn_sinks.weight, the router as ffn_gate_inp with its bias, post_attention_layernorm as
    post_attention_norm; YaRN as rope.scaling.{type,factor,original_context_length}."""
    w = {k: v.astype(np.float32) for k, v in load_file(folder / "model.safetensors").items()}
    writer = gguf.GGUFWriter(path, "gpt-oss")
    writer.add_name(folder.name)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_key_length(config.head_dim)
    writer.add_value_length(config.head_dim)
    writer.add_rope_freq_base(YARN["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    writer.add_expert_count(config.num_local_experts)
    writer.add_expert_used_count(config.num_experts_per_tok)
    writer.add_expert_feed_forward_length(config.intermediate_size)
    writer.add_sliding_window(config.sliding_window)
    writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    writer.add_rope_scaling_factor(YARN["factor"])
    writer.add_rope_scaling_orig_ctx_len(YARN["original_max_position_embeddings"])
    # llama.cpp fixes the SwiGLU's limit at the released 7 and alpha at 1.702; kvscope reads these keys when given.
    writer.add_float32("gpt-oss.swiglu_limit", config.swiglu_limit)
    writer.add_float32("gpt-oss.swiglu_alpha", config.swiglu_alpha)
    writer.add_tensor("token_embd.weight", w["model.embed_tokens.weight"])

    def experts(name, stacked):
        if mxfp4:
            kind = gguf.GGMLQuantizationType.MXFP4
            writer.add_tensor(name, gguf.quants.quantize(stacked, kind), raw_dtype=kind)
        else:
            writer.add_tensor(name, stacked)

    for layer in range(config.num_hidden_layers):
        hf, g = f"model.layers.{layer}.", f"blk.{layer}."
        writer.add_tensor(g + "attn_norm.weight", w[hf + "input_layernorm.weight"])
        for proj, name in (("q", "attn_q"), ("k", "attn_k"), ("v", "attn_v"), ("o", "attn_output")):
            writer.add_tensor(g + name + ".weight", w[hf + f"self_attn.{proj}_proj.weight"])
            writer.add_tensor(g + name + ".bias", w[hf + f"self_attn.{proj}_proj.bias"])
        writer.add_tensor(g + "attn_sinks.weight", w[hf + "self_attn.sinks"])
        writer.add_tensor(g + "post_attention_norm.weight", w[hf + "post_attention_layernorm.weight"])
        writer.add_tensor(g + "ffn_gate_inp.weight", w[hf + "mlp.router.weight"])
        writer.add_tensor(g + "ffn_gate_inp.bias", w[hf + "mlp.router.bias"])
        gate_up = np.ascontiguousarray(w[hf + "mlp.experts.gate_up_proj"].transpose(0, 2, 1))  # [E][2I][hidden]
        gate_up_bias = w[hf + "mlp.experts.gate_up_proj_bias"]
        experts(g + "ffn_gate_exps.weight", np.ascontiguousarray(gate_up[:, ::2, :]))
        experts(g + "ffn_up_exps.weight", np.ascontiguousarray(gate_up[:, 1::2, :]))
        experts(g + "ffn_down_exps.weight", np.ascontiguousarray(w[hf + "mlp.experts.down_proj"].transpose(0, 2, 1)))
        writer.add_tensor(g + "ffn_gate_exps.bias", np.ascontiguousarray(gate_up_bias[:, ::2]))
        writer.add_tensor(g + "ffn_up_exps.bias", np.ascontiguousarray(gate_up_bias[:, 1::2]))
        writer.add_tensor(g + "ffn_down_exps.bias", w[hf + "mlp.experts.down_proj_bias"])
    add_tokenizer(writer, tok, QWEN3_TOKENIZER, "qwen2")
    writer.add_tensor("output_norm.weight", w["model.norm.weight"])
    writer.add_tensor("output.weight", w["lm_head.weight"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def mxfp4_reference(folder, path):
    """The folder with the GGUF's MXFP4 experts dequantized by gguf-py and put back in transformers' layout."""
    reader = gguf.GGUFReader(path)
    reference = folder.parent / (folder.name + "_mxfp4_reference")
    shutil.rmtree(reference, ignore_errors=True)
    shutil.copytree(folder, reference)
    weights = load_file(folder / "model.safetensors")
    parts = {}
    for t in reader.tensors:
        if t.tensor_type == gguf.GGMLQuantizationType.MXFP4:
            parts[t.name] = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)  # [E][rows][cols]
    for name, values in parts.items():
        layer, part = int(name.split(".")[1]), name.split(".")[2]
        hf = f"model.layers.{layer}.mlp.experts."
        if part == "ffn_down_exps":
            weights[hf + "down_proj"] = np.ascontiguousarray(values.transpose(0, 2, 1))
        else:
            gate_up = weights[hf + "gate_up_proj"].copy()  # [E][hidden][2I], gate columns even, up odd
            gate_up[:, :, (0 if part == "ffn_gate_exps" else 1)::2] = values.transpose(0, 2, 1)
            weights[hf + "gate_up_proj"] = gate_up
    save_file(weights, reference / "model.safetensors", metadata={"format": "pt"})
    first = parts["blk.0.ffn_gate_exps.weight"]
    return reference, {"tensor": "blk.0.ffn_gate_exps.weight", "expert": 1, "row": 2, "values": shortest(first[1, 2])}


# The E2M1 (FP4) magnitudes by code; bit 3 of a code is the sign (the OCP microscaling format).
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
# The released folders' quantization_config (openai/gpt-oss-20b's config.json).
MXFP4_CONFIG = {"quant_method": "mxfp4", "modules_to_not_convert": [
    "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}


def quantize_mxfp4(w):
    """w [E][rows][cols] (rows the outputs) -> blocks [E][rows][cols/32][16] and scales [E][rows][cols/32], uint8,
    in the released folders' layout. Each run of 32 values along a row shares one E8M0 exponent, biased by 127, that
    brings its largest magnitude into [4, 8) (OCP's floor(log2(amax)) - emax, emax 2 for E2M1; magnitudes above 6
    saturate); each value becomes the nearest E2M1 code; byte j of a block holds value 2j in its low nibble and
    value 2j + 1 in its high nibble."""
    e, rows, cols = w.shape
    x = w.astype(np.float64).reshape(e, rows, cols // 32, 32)
    amax = np.abs(x).max(axis=-1)
    exponent = np.where(amax > 0, np.floor(np.log2(np.maximum(amax, 1e-30))) - 2, -127)
    scales = np.clip(exponent + 127, 0, 254).astype(np.uint8)
    scaled = x / np.exp2(scales.astype(np.float64) - 127)[..., None]
    magnitude = np.abs(np.abs(scaled)[..., None] - E2M1).argmin(axis=-1)
    codes = (magnitude | np.where(scaled < 0, 8, 0)).astype(np.uint8)
    return np.ascontiguousarray(codes[..., 0::2] | (codes[..., 1::2] << 4)), scales


def dequantize_mxfp4(blocks, scales):
    """The inverse of quantize_mxfp4's packing: [E][rows][cols] float32."""
    codes = np.stack([blocks & 0x0F, blocks >> 4], axis=-1).reshape(*scales.shape, 32)
    values = E2M1[codes & 7] * np.where(codes & 8, -1.0, 1.0) * np.exp2(scales.astype(np.float64) - 127)[..., None]
    return values.reshape(*scales.shape[:2], -1).astype(np.float32)


def write_mxfp4_folder(folder, out):
    """The folder as openai/gpt-oss-* ship: gate_up_proj as gate_up_proj_blocks / _scales over its transpose
    [E][2I][hidden] (rows still gate, up, gate, up, ...), down_proj as down_proj_blocks / _scales over [E][hidden][I],
    every other tensor in BF16, config.json with the released quantization_config. Returns the dequantized experts
    {name: [E][rows][cols]}, what transformers must hold after loading."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(folder, out)
    tensors, dequantized = {}, {}
    for name, value in load_file(folder / "model.safetensors").items():
        if name.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj")):
            blocks, scales = quantize_mxfp4(np.ascontiguousarray(value.transpose(0, 2, 1)))
            tensors[name + "_blocks"] = torch.from_numpy(blocks)
            tensors[name + "_scales"] = torch.from_numpy(scales)
            dequantized[name] = dequantize_mxfp4(blocks, scales)
        else:
            tensors[name] = torch.from_numpy(value).to(torch.bfloat16)
    save_torch_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((folder / "config.json").read_text())
    config.update(dtype="bfloat16", quantization_config=MXFP4_CONFIG)
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return dequantized


def mxfp4_folder_golden(out, dequantized):
    """transformers on the MXFP4 folder (dequantized to float32 at load), after checking that what it dequantized is
    dequantize_mxfp4's reading of the blocks: gate_up_proj [E][hidden][2I] and down_proj [E][I][hidden] are the
    transposes of the blocks' [E][rows][cols]."""
    load = dict(quantization_config=Mxfp4Config(dequantize=True))
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, **load)
    for name, values in dequantized.items():
        held = model.get_parameter(name).detach().numpy()
        assert held.dtype == np.float32 and np.array_equal(held, values.transpose(0, 2, 1)), name
    experts = model.model.layers[0].mlp.experts
    gate_up, down = experts.gate_up_proj.detach().numpy(), experts.down_proj.detach().numpy()
    rows = {"layer": 0, "expert": 1, "row": 2,  # gate row i is gate_up_proj's column 2i, up row i column 2i + 1
            "gate": shortest(gate_up[1, :, 4]), "up": shortest(gate_up[1, :, 5]), "down": shortest(down[1, :, 2])}
    golden = golden_for(out, **load)
    golden.update(folder=out.name, dequantized_rows=rows)
    return golden


def main():
    torch.set_num_threads(1)
    OUT.mkdir(parents=True, exist_ok=True)
    folder = OUT / "gptoss"
    shutil.rmtree(folder, ignore_errors=True)
    tok = train_tokenizer(QWEN3_TOKENIZER)
    config = GptOssConfig(**FIELDS, vocab_size=tok.get_vocab_size(), bos_token_id=None,
                          eos_token_id=tok.token_to_id(QWEN3_TOKENIZER["eos"]), pad_token_id=None)
    config.architectures = ["GptOssForCausalLM"]
    assert config.layer_types == ["sliding_attention", "full_attention"] * 2
    torch.manual_seed(300)
    model = AutoModelForCausalLM.from_config(config)
    randomize(model, 3000)
    with torch.no_grad():  # sinks large enough that their share of each row matters
        generator = torch.Generator().manual_seed(3001)
        for layer in model.model.layers:
            layer.self_attn.sinks.copy_(1.0 + 1.5 * torch.randn(layer.self_attn.sinks.shape, generator=generator))
    model.save_pretrained(folder)
    save_tokenizer(tok, folder, QWEN3_TOKENIZER["bos"], QWEN3_TOKENIZER["eos"], QWEN3_TOKENIZER["unk"],
                   QWEN3_TOKENIZER["template"])
    golden = {"schema_version": 1,
              "reference": {"implementation": "transformers AutoModelForCausalLM, float32 compute, eager attention, "
                                              "CPU; greedy one token per forward over a DynamicCache",
                            "versions": {"torch": torch.__version__, "transformers": transformers.__version__}},
              "checkpoints": {}}
    golden["checkpoints"]["gptoss"] = golden_for(folder)
    golden["checkpoints"]["gptoss"]["gguf"] = "gptoss.gguf"
    first = golden["checkpoints"]["gptoss"]["prompts"][0]
    first["decode_attention"] = decode_attention(folder, first)
    golden["checkpoints"]["gptoss"]["sinks"] = [shortest(layer.self_attn.sinks.detach().numpy())
                                               for layer in model.model.layers]
    write_gguf(folder, OUT / "gptoss.gguf", tok, config, mxfp4=False)
    write_gguf(folder, OUT / "gptoss_mxfp4.gguf", tok, config, mxfp4=True)
    reference, check = mxfp4_reference(folder, OUT / "gptoss_mxfp4.gguf")
    golden["checkpoints"]["gptoss_mxfp4"] = golden_for(reference)
    golden["checkpoints"]["gptoss_mxfp4"].update(gguf="gptoss_mxfp4.gguf", dequantized_row=check)
    shutil.rmtree(reference)
    dequantized = write_mxfp4_folder(folder, OUT / "gptoss_mxfp4")
    golden["checkpoints"]["gptoss_mxfp4_folder"] = mxfp4_folder_golden(OUT / "gptoss_mxfp4", dequantized)
    for name, g in golden["checkpoints"].items():
        print(name, [len(p["ids"]) for p in g["prompts"]], "greedy", g["prompts"][0]["greedy"]["ids"][:8],
              "min margin", min(min(p["greedy"]["margin_top1_top2"]) for p in g["prompts"]))
    (OUT / "golden.json").write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
