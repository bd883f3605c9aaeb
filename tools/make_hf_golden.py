#!/usr/bin/env python3
"""Golden outputs of transformers on the SmolLM2 Hugging Face folders that tools/gguf_to_hf_folder.py makes.

Writes tests/fixtures/hf_golden/ (README.md there describes every field). Independent of kvscope: the
folders are read by transformers' own safetensors/tokenizers loaders, and before anything is recorded the
script proves the converter right against transformers' own GGUF import of the same file:
  - every tensor of the f32 folder equals transformers' float32 dequantisation of the GGUF (max |diff| 0),
    the q/k rows included (so the un-permutation to rotate-half order is right);
  - every tensor of the bf16 folder equals torch's .to(torch.bfloat16) of that float32 tensor;
  - the folder's tokenizer gives the same ids as transformers' tokenizer built from the GGUF.

  python3 -m venv /tmp/goldenv && /tmp/goldenv/bin/pip install -r tools/requirements-golden.txt
  .deps/venv/bin/python tools/gguf_to_hf_folder.py --gguf GGUF --out /tmp/hf/f32 --dtype f32 --shards 3
  .deps/venv/bin/python tools/gguf_to_hf_folder.py --gguf GGUF --out /tmp/hf/bf16 --dtype bf16
  /tmp/goldenv/bin/python tools/make_hf_golden.py --gguf GGUF --f32 /tmp/hf/f32 --bf16 /tmp/hf/bf16
"""
import argparse
import hashlib
import json
import platform
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parent.parent
N_NEW = 32

PROMPTS = [
    {"name": "english_prose", "kind": "text",
     "text": "The old lighthouse keeper climbed the narrow spiral stairs every evening at dusk, carrying"},
    {"name": "digits_math", "kind": "text",
     "text": "Compute step by step: 12345 + 67890 = 80235. Then 3.14159 * 2 = 6.28318, 2^10 = "},
    {"name": "chatml", "kind": "chat",
     "messages": [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]},
]
# Extra strings whose tokenization alone is recorded (no logits): Unicode, whitespace, special tokens.
TOKENIZER_STRINGS = [
    "Café crème in Zürich, a naïve façade; 日本語のテキストと中文字符。Emoji: 🙂🚀👍🏽 — «quotes» and ∑",
    "   three leading spaces\n\n\n\tone tab\t\ttwo tabs\n        eight spaces    then four    ",
    "<|im_start|>user\nhi<|im_end|>\n<|endoftext|> don't I'LL 1234567",
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def shortest(x):
    return [float(np.format_float_positional(np.float32(v), unique=True, trim="-")) for v in np.asarray(x).ravel()]


def check_weights(gguf_model, folder_model, bf16):
    reference = gguf_model.state_dict()
    worst = 0.0
    for name, tensor in folder_model.state_dict().items():
        expected = reference[name]
        if bf16:
            expected = expected.to(torch.bfloat16)
        diff = (tensor.to(torch.float64) - expected.to(torch.float64)).abs().max().item()
        worst = max(worst, diff)
        assert diff == 0.0, f"{name}: folder differs from transformers' GGUF import by {diff}"
    return worst


def greedy(model, ids):
    """Greedy continuation with a KV cache; argmax ties go to the lowest id (torch.argmax does)."""
    out, margins, top1 = [], [], []
    past = None
    inputs = torch.tensor([ids])
    with torch.no_grad():
        for _ in range(N_NEW):
            result = model(input_ids=inputs, past_key_values=past, use_cache=True)
            past = result.past_key_values
            logits = result.logits[0, -1].to(torch.float32)
            top = torch.topk(logits, 2)
            token = int(torch.argmax(logits))
            out.append(token)
            top1.append(float(top.values[0]))
            margins.append(float(top.values[0] - top.values[1]))
            inputs = torch.tensor([[token]])
    return out, top1, margins


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gguf", type=Path, default=ROOT / ".deps/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    parser.add_argument("--f32", type=Path, required=True)
    parser.add_argument("--bf16", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=ROOT / "tests/fixtures/hf_golden")
    args = parser.parse_args()
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)

    gguf_model = AutoModelForCausalLM.from_pretrained(args.gguf.parent, gguf_file=args.gguf.name,
                                                      dtype=torch.float32, attn_implementation="eager").eval()
    gguf_tokenizer = AutoTokenizer.from_pretrained(args.gguf.parent, gguf_file=args.gguf.name)

    golden = {"schema_version": 1, "gguf": {"file": args.gguf.name, "sha256": sha256(args.gguf)},
              "reference": {"implementation": "transformers AutoModelForCausalLM on the folder, float32 compute, "
                                              "eager attention, CPU, 1 thread",
                            "python": platform.python_version(),
                            "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                                         "numpy": np.__version__}},
              "folders": {}}
    for label, folder, bf16 in (("f32", args.f32, False), ("bf16", args.bf16, True)):
        # float32 compute for both: kvscope converts BF16 weights to float32 and computes in float32.
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
        tokenizer = AutoTokenizer.from_pretrained(folder)
        worst = check_weights(gguf_model, model, bf16)
        files = sorted(p.name for p in folder.iterdir() if p.suffix == ".safetensors")
        entry = {"weight_files": {name: sha256(folder / name) for name in files},
                 "checks": {"max_abs_diff_vs_transformers_gguf_import": worst}, "prompts": [], "tokenizer": []}
        for index, prompt in enumerate(PROMPTS):
            record = dict(prompt)
            if prompt["kind"] == "chat":
                record["text"] = tokenizer.apply_chat_template(prompt["messages"], tokenize=False,
                                                               add_generation_prompt=True)
            ids = tokenizer(record["text"])["input_ids"]
            assert ids == gguf_tokenizer(record["text"], add_special_tokens=False)["input_ids"], prompt["name"]
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([ids])).logits[0, -1].to(torch.float32).numpy()
            logits_file = f"{label}_logits_{index}.f32"
            logits.astype("<f4").tofile(args.out / logits_file)
            new, top1, margins = greedy(model, ids)
            record.update({"ids": ids, "final_logits_file": logits_file,
                           "final_logits_argmax": int(np.argmax(logits)),
                           "greedy": {"n_new": N_NEW, "ids": new, "text": tokenizer.decode(new),
                                      "top1_logit": shortest(top1), "margin_top1_top2": shortest(margins)}})
            entry["prompts"].append(record)
        for text in TOKENIZER_STRINGS:
            ids = tokenizer(text)["input_ids"]
            entry["tokenizer"].append({"text": text, "ids": ids, "decoded": tokenizer.decode(ids)})
        golden["folders"][label] = entry
        print(label, "weights equal the GGUF import; greedy:", [p["greedy"]["text"][:40] for p in entry["prompts"]])
    (args.out / "smollm2_hf_golden.json").write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
