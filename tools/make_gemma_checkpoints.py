#!/usr/bin/env python3
"""Tiny random Gemma 2 and Gemma 3 (text) checkpoints, written by transformers, with transformers' goldens.

Writes tests/fixtures/hf_gemma/<name>/ (Hugging Face folders), <name>.gguf (laid out as llama.cpp's
convert_hf_to_gguf.py writes the `gemma2` and `gemma3` architectures: every norm stored as 1 + w, q/k rows as
in the checkpoint, no output.weight) and tests/fixtures/hf_gemma/golden.json. Each checkpoint has a sliding
window (8) shorter than the prompts so that the window matters, and the features its family adds:

  gemma3       Gemma3ForCausalLM, 6 layers = five local : one global, QK-norm, local RoPE base 10000 and linear
               rope scaling (factor 4) on the global layer only, tied, BF16; query_pre_attn_scalar = head_dim,
               as llama.cpp assumes for the GGUF
  gemma2       Gemma2ForCausalLM, 4 layers alternating local / global, attention soft-cap 2 and final soft-cap 5
               (small enough to bite on these logits), tied, F32
  gemma3_qpas  Gemma3ForCausalLM, 2 layers, query_pre_attn_scalar 40 != head_dim 16 and a final soft-cap, F32
               (a Hugging Face folder only: llama.cpp derives that scale from the model size)

All share a Gemma-layout tokenizer.json (byte-fallback BPE trained here: <pad> <eos> <bos> <unk> at 0-3, the 256
byte tokens, the learned pieces, <start_of_turn> <end_of_turn>; normalizer Replace(" ", "▁"), no pre-tokenizer,
BOS by a TemplateProcessing post-processor), written into the GGUF as llama.cpp's SentencePiece vocabulary
(tokenizer.ggml.model "llama", one score per piece, add_space_prefix false).

golden.json, per checkpoint and for each of three prompts: the prompt ids, transformers' final logits, 24 greedy
tokens (no-cache full forward per step) with their top-1/top-2 margins; for prompt 0, transformers' eager
attention weights (soft-cap and sliding window included) of every layer and head for the last three prompt
positions and the first decode position, over all positions. Also a Q5_0 row quantized and dequantized by
gguf-py ("q5_0"), the type llama.cpp gives most matrices of the real Gemma 3 270M GGUF.
Regenerate (byte-identical with the pinned versions of tools/requirements-golden.txt):
  /tmp/goldenv/bin/python tools/make_gemma_checkpoints.py
"""
import json
import shutil
from pathlib import Path

import gguf
import numpy as np
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer, Gemma2Config, Gemma3TextConfig, PreTrainedTokenizerFast

from make_synthetic_checkpoints import PROMPT, corpus, randomize, shortest

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/fixtures/hf_gemma"
SPACE = "\u2581"
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]
TURNS = ["<start_of_turn>", "<end_of_turn>"]
BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]
VOCAB = 512
N_NEW = 24
ATTENTION_ROWS = 3  # last prompt positions whose attention rows are kept, besides the first decode position
PROMPTS = [
    PROMPT,
    "Gemma interleaves local and global attention: the local layers see only the last few tokens, while the "
    "global layers see the whole context. Which of them holds the needle?",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 — count on, and then tell me what came after the seventh number.",
]

COMMON = dict(max_position_embeddings=256, rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh",
              sliding_window=8, pad_token_id=0, eos_token_id=1, bos_token_id=2)
CHECKPOINTS = [
    ("gemma3", Gemma3TextConfig, "Gemma3ForCausalLM",
     dict(hidden_size=48, intermediate_size=64, num_hidden_layers=6, num_attention_heads=3, num_key_value_heads=1,
          head_dim=16, query_pre_attn_scalar=16, tie_word_embeddings=True,
          rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                           "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e6}}),
     torch.bfloat16, "gemma3"),
    ("gemma2", Gemma2Config, "Gemma2ForCausalLM",
     dict(hidden_size=40, intermediate_size=56, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
          head_dim=12, query_pre_attn_scalar=12, attn_logit_softcapping=2.0, final_logit_softcapping=5.0,
          tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
     torch.float32, "gemma2"),
    ("gemma3_qpas", Gemma3TextConfig, "Gemma3ForCausalLM",
     dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
          head_dim=16, query_pre_attn_scalar=40, final_logit_softcapping=4.0, layer_types=["sliding_attention",
                                                                                        "full_attention"],
          tie_word_embeddings=False),
     torch.float32, None),
]


def train_gemma_tokenizer():
    """Gemma's tokenizer.json layout: byte-fallback BPE, Replace(" ", "▁") normalizer, no pre-tokenizer."""
    trainer_tok = Tokenizer(models.BPE(unk_token="<unk>"))
    trainer_tok.normalizer = normalizers.Replace(" ", SPACE)
    trainer_tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="never", split=True)
    n_learned = VOCAB - len(SPECIALS) - len(BYTE_TOKENS) - len(TURNS)
    trainer = trainers.BpeTrainer(vocab_size=n_learned + len(SPECIALS), special_tokens=SPECIALS, show_progress=False)
    trainer_tok.train_from_iterator(corpus() + PROMPTS, trainer)
    trained = json.loads(trainer_tok.to_str())["model"]
    merges = [tuple(m) for m in trained["merges"]]
    alphabet = sorted(t for t in trained["vocab"] if t not in SPECIALS and len(t) == 1)
    learned = alphabet + [left + right for left, right in merges]
    vocab = {t: i for i, t in enumerate(SPECIALS + BYTE_TOKENS + learned + TURNS)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.add_special_tokens(SPECIALS + TURNS)
    tok.normalizer = normalizers.Replace(" ", SPACE)
    tok.decoder = decoders.Sequence([decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A <bos> $B",
                                                       special_tokens=[("<bos>", vocab["<bos>"])])
    return tok, merges


def greedy_of(model, ids):
    greedy, margins, sequence = [], [], list(ids)
    with torch.no_grad():
        for _ in range(N_NEW):  # no cache: a full forward per step, the simplest reference
            step = model(input_ids=torch.tensor([sequence])).logits[0, -1].to(torch.float32)
            top = torch.topk(step, 2)
            greedy.append(int(torch.argmax(step)))
            margins.append(float(top.values[0] - top.values[1]))
            sequence.append(greedy[-1])
    return greedy, margins


def attention_rows(model, ids, first_new):
    """Eager attention weights [layer][head][row][key] of the last prompt rows and the first decode row."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids + [first_new]]), output_attentions=True)
    rows = list(range(len(ids) - ATTENTION_ROWS, len(ids) + 1))
    return rows, [[[shortest(layer[0, h, r].numpy()) for r in rows] for h in range(layer.shape[1])]
                  for layer in out.attentions]


def golden_for(folder):
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompts = []
    for index, text in enumerate(PROMPTS):
        ids = tokenizer(text)["input_ids"]
        assert len(ids) > 2 * model.config.sliding_window
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0].to(torch.float32).numpy()
        greedy, margins = greedy_of(model, ids)
        entry = {"text": text, "ids": ids, "final_logits": shortest(logits[-1]),
                 "greedy": {"ids": greedy, "margin_top1_top2": shortest(margins)}}
        if index == 0:
            positions, maps = attention_rows(model, ids, greedy[0])
            entry["attention"] = {"positions": positions, "rows": maps}
        prompts.append(entry)
    config = model.config
    return {
        "architecture": config.architectures[0],
        "layer_types": list(config.layer_types),
        "sliding_window": config.sliding_window,
        "prompts": prompts,
    }


def write_gguf(folder, path, arch, tok):
    """convert_hf_to_gguf.py's Gemma2Model / Gemma3Model: norms + 1, tied head left out, SentencePiece vocab."""
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    config = model.config
    weights = {k: v.numpy() for k, v in model.state_dict().items()}
    writer = gguf.GGUFWriter(path, arch)
    writer.add_name(folder.name)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_key_length(config.head_dim)
    writer.add_value_length(config.head_dim)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_sliding_window(config.sliding_window)
    if arch == "gemma2":
        writer.add_attn_logit_softcapping(config.attn_logit_softcapping)
        writer.add_final_logit_softcapping(config.final_logit_softcapping)
        writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    else:
        full = config.rope_parameters["full_attention"]
        writer.add_rope_freq_base(full["rope_theta"])  # the global layers'; llama.cpp fixes the local base
        if full.get("rope_type") == "linear":
            writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            writer.add_rope_scaling_factor(full["factor"])
    vocab = tok.get_vocab(with_added_tokens=True)
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda item: item[1])]
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    # SentencePiece scores: a learned piece formed by an earlier merge ranks higher (llama.cpp merges by score).
    writer.add_token_scores([0.0 if t in SPECIALS + TURNS or t in BYTE_TOKENS else -float(i) for i, t in enumerate(tokens)])
    writer.add_token_types([3 if t in SPECIALS + TURNS else 6 if t in BYTE_TOKENS else 1 for t in tokens])
    writer.add_bos_token_id(vocab["<bos>"])
    writer.add_eos_token_id(vocab["<eos>"])
    writer.add_unk_token_id(vocab["<unk>"])
    writer.add_pad_token_id(vocab["<pad>"])
    writer.add_add_bos_token(True)
    writer.add_add_space_prefix(False)
    norm = lambda name: weights[name] + 1.0  # noqa: E731  (Gemma2Model.modify_tensors: data_torch + 1)
    writer.add_tensor("token_embd.weight", weights["model.embed_tokens.weight"])
    for layer in range(config.num_hidden_layers):
        hf, g = f"model.layers.{layer}.", f"blk.{layer}."
        writer.add_tensor(g + "attn_norm.weight", norm(hf + "input_layernorm.weight"))
        writer.add_tensor(g + "attn_q.weight", weights[hf + "self_attn.q_proj.weight"])
        writer.add_tensor(g + "attn_k.weight", weights[hf + "self_attn.k_proj.weight"])
        writer.add_tensor(g + "attn_v.weight", weights[hf + "self_attn.v_proj.weight"])
        if arch == "gemma3":
            writer.add_tensor(g + "attn_q_norm.weight", norm(hf + "self_attn.q_norm.weight"))
            writer.add_tensor(g + "attn_k_norm.weight", norm(hf + "self_attn.k_norm.weight"))
        writer.add_tensor(g + "attn_output.weight", weights[hf + "self_attn.o_proj.weight"])
        writer.add_tensor(g + "post_attention_norm.weight", norm(hf + "post_attention_layernorm.weight"))
        writer.add_tensor(g + "ffn_norm.weight", norm(hf + "pre_feedforward_layernorm.weight"))
        writer.add_tensor(g + "ffn_gate.weight", weights[hf + "mlp.gate_proj.weight"])
        writer.add_tensor(g + "ffn_up.weight", weights[hf + "mlp.up_proj.weight"])
        writer.add_tensor(g + "ffn_down.weight", weights[hf + "mlp.down_proj.weight"])
        writer.add_tensor(g + "post_ffw_norm.weight", norm(hf + "post_feedforward_layernorm.weight"))
    writer.add_tensor("output_norm.weight", norm("model.norm.weight"))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def q5_0_golden():
    """A Q5_0 row (llama.cpp's type for Gemma 3 270M's 640-wide rows) and gguf-py's dequantization of it."""
    values = np.random.default_rng(7).normal(0.0, 1.0, 96).astype(np.float32)
    packed = gguf.quants.quantize(values.reshape(1, -1), gguf.GGMLQuantizationType.Q5_0)
    return {"bytes_hex": packed.tobytes().hex(),
            "values": shortest(gguf.quants.dequantize(packed, gguf.GGMLQuantizationType.Q5_0).reshape(-1))}


def main():
    torch.set_num_threads(1)
    OUT.mkdir(parents=True, exist_ok=True)
    tok, _ = train_gemma_tokenizer()
    golden = {"schema_version": 1,
              "reference": {"implementation": "transformers AutoModelForCausalLM, float32 compute, eager attention, CPU",
                            "versions": {"torch": torch.__version__, "transformers": transformers.__version__}},
              "checkpoints": {}, "q5_0": q5_0_golden()}
    for seed, (name, config_class, architecture, fields, dtype, gguf_arch) in enumerate(CHECKPOINTS):
        folder = OUT / name
        shutil.rmtree(folder, ignore_errors=True)
        (OUT / f"{name}.gguf").unlink(missing_ok=True)
        config = config_class(**COMMON, **fields, vocab_size=tok.get_vocab_size())
        config.architectures = [architecture]
        torch.manual_seed(100 + seed)
        model = AutoModelForCausalLM.from_config(config)
        randomize(model, 2000 + seed)
        model.to(dtype).save_pretrained(folder)
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>",
                                       pad_token="<pad>")
        fast.save_pretrained(folder)
        entry = golden_for(folder)
        entry["storage_dtype"] = str(dtype).replace("torch.", "")
        if gguf_arch:
            write_gguf(folder, OUT / f"{name}.gguf", gguf_arch, tok)
            entry["gguf"] = f"{name}.gguf"
        golden["checkpoints"][name] = entry
        print(name, entry["layer_types"], "greedy", entry["prompts"][0]["greedy"]["ids"][:8],
              "logits range", min(entry["prompts"][0]["final_logits"]), max(entry["prompts"][0]["final_logits"]))
    (OUT / "golden.json").write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
