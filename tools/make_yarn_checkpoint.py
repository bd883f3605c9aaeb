#!/usr/bin/env python3
"""A tiny random Qwen2 checkpoint with YaRN rope scaling, written by transformers, with transformers' goldens.

Writes tests/fixtures/hf_yarn/qwen2_yarn/ (a Hugging Face folder), qwen2_yarn.gguf (the same weights with the
rope scaling as llama.cpp's convert_hf_to_gguf.py writes it for every architecture: qwen2.rope.scaling.type
"yarn", .factor, .original_context_length, .yarn_attn_factor, .yarn_beta_fast, .yarn_beta_slow) and
tests/fixtures/hf_yarn/golden.json, read by tests/e2e/hf_synthetic_test.cpp.

YaRN here: factor 4 over an original context of 64 (max_position_embeddings 256), so the shared prompt of
make_synthetic_checkpoints.py (past 64 tokens) runs beyond the original context; head_dim 32 with base 10000 and
betas 4 / 2 (not the defaults 32 / 1) so that the ramp's ends move with the betas; attention_factor 1.25 (not the
default 0.1 ln 4 + 1), so that every key the GGUF carries changes the logits.

golden.json: the prompt ids, the last position's logits and 8 greedy tokens (a full forward per step), as
make_synthetic_checkpoints.py's goldens. Reference: float32 compute, eager attention, CPU.
Regenerate (byte-identical with the pinned versions of tools/requirements-golden.txt):
  /tmp/goldenv/bin/python tools/make_yarn_checkpoint.py
"""
import json
import shutil
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, Qwen2Config

from make_synthetic_checkpoints import (PROMPT, QWEN2_TOKENIZER, golden_for, randomize, save_tokenizer,
                                        train_tokenizer, write_gguf)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/fixtures/hf_yarn"
YARN = dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=64, beta_fast=4.0,
            beta_slow=2.0, attention_factor=1.25)
FIELDS = dict(hidden_size=64, intermediate_size=80, num_hidden_layers=2, num_attention_heads=2,
              num_key_value_heads=1, tie_word_embeddings=True, use_sliding_window=False, max_position_embeddings=256,
              rms_norm_eps=1e-5, hidden_act="silu", rope_parameters=YARN)


def main():
    torch.set_num_threads(1)
    OUT.mkdir(parents=True, exist_ok=True)  # README.md there is written by hand
    folder = OUT / "qwen2_yarn"
    shutil.rmtree(folder, ignore_errors=True)
    tok = train_tokenizer(QWEN2_TOKENIZER)
    config = Qwen2Config(**FIELDS, vocab_size=tok.get_vocab_size(), bos_token_id=None,
                         eos_token_id=tok.token_to_id(QWEN2_TOKENIZER["eos"]))
    config.architectures = ["Qwen2ForCausalLM"]
    torch.manual_seed(39)
    model = AutoModelForCausalLM.from_config(config)
    randomize(model, 3900)
    model.to(torch.float32).save_pretrained(folder)
    save_tokenizer(tok, folder, QWEN2_TOKENIZER["bos"], QWEN2_TOKENIZER["eos"], QWEN2_TOKENIZER["unk"],
                   QWEN2_TOKENIZER["template"])
    g = golden_for(folder, "qwen2_yarn")
    assert len(g["prompt_ids"]) > YARN["original_max_position_embeddings"], "the prompt must pass the original context"
    write_gguf(folder, OUT / "qwen2_yarn.gguf", "qwen2", tok, QWEN2_TOKENIZER)
    golden = {"schema_version": 1, "prompt": PROMPT, "yarn": YARN,
              "reference": {"implementation": "transformers AutoModelForCausalLM, float32 compute, eager attention, CPU",
                            "versions": {"torch": torch.__version__, "transformers": transformers.__version__}},
              "checkpoints": {"qwen2_yarn": {k: g[k] for k in ("architecture", "prompt_ids", "final_logits", "greedy")}}}
    golden["checkpoints"]["qwen2_yarn"]["gguf"] = "qwen2_yarn.gguf"
    print("prompt", len(g["prompt_ids"]), "tokens; logits range", min(g["final_logits"]), max(g["final_logits"]),
          "greedy", g["greedy"]["ids"], "min margin", min(g["greedy"]["margin_top1_top2"]))
    (OUT / "golden.json").write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
