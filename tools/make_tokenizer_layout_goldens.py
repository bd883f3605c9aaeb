#!/usr/bin/env python3
"""Tokenizer folders in the layouts of released models, and the ids transformers gives for hard strings.

Each folder under tests/fixtures/hf_tokenizer_layouts/ is a tokenizer.json (a small BPE trained on this
project's text, from tests/fixtures) with the components, added-token flags and tokenizer_config.json of a
released model family, written after the published files' structure:

  llama2     Llama 2: Prepend/Replace normalizer, byte fallback, `<unk>` normalized, `</s>` rstrip,
             tokenizer_class LlamaTokenizer (which transformers 5 rebuilds with a Metaspace pre-tokenizer)
  phi3       Phi-3-mini: the Llama 2 layout with chat markers (`<|assistant|>`, `<|end|>`, ... rstrip true),
             add_bos_token false, eos `<|endoftext|>`, generation_config eos [endoftext, assistant, end]
  qwen2      Qwen2/2.5: NFC normalizer, Qwen2's Split regex, ByteLevel, tokenizer_class Qwen2Tokenizer
  llama31    Llama 3.1/3.2: ByteLevel, BOS from a TemplateProcessing nested in a Sequence post-processor
  llama3_gguf  what transformers 5 writes for a Llama 3 GGUF: decoder Sequence[ByteFallback, Fuse, Replace,
             ByteLevel], empty normalizer Sequence, add_bos_token true

golden.json, per layout and string: `prompt_ids` (tok(text).input_ids, add_special_tokens=True), `plain_ids`
(add_special_tokens=False), `split_ids` (add_special_tokens=True, split_special_tokens=True), `decoded`
(tok.decode(prompt_ids)), `raw_ids` (the bare `tokenizers` library on tokenizer.json, add_special_tokens=True:
where it differs from prompt_ids, transformers' own rules made the difference); per layout `bos_id`, `eos_id`,
`len`. Read by tests/e2e/tokenizer_layouts_test.cpp.

Run with the embedded venv's Python (transformers and tokenizers pinned in scripts/requirements-embedded.txt):

    .deps/embedded-venv/bin/python tools/make_tokenizer_layout_goldens.py
"""
import copy
import json
import os
import pathlib
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

import tokenizers
import transformers

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
OUT = FIXTURES / "hf_tokenizer_layouts"

STRINGS = [
    "Hello world",
    " leading space",
    "two  spaces   and\ttab\n\nnew lines",
    "Café naïve résumé",
    "Cafe\u0301 nai\u0308ve",  # decomposed (NFD) accents, as macOS writes them
    "<s>Hello</s> world",
    "a <|im_start|>user\nhi<|im_end|>\n",
    "<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>   four<|end|>",
    "x <|endoftext|> y <unk> z",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "Numbers 12345 and 3.14159, year 2024.",
    "emoji 🙂🚀 and CJK 日本語 中文",
    "ǅemal ﬁne ＡＢＣ",  # compatibility characters NFC keeps and NFKC would change
    "",
]


def read(path):
    return json.loads(pathlib.Path(path).read_text())


def added(content, id_, special=True, **flags):
    token = {"id": id_, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": special}
    token.update(flags)
    return token


def llama2():
    tok = read(FIXTURES / "hf_metaspace" / "tokenizer.json")
    tok["added_tokens"] = [added("<unk>", 0, normalized=True), added("<s>", 1), added("</s>", 2, rstrip=True)]
    config = {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
              "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "legacy": False,
              "clean_up_tokenization_spaces": False, "model_max_length": 4096}
    return tok, config, None


def phi3():
    tok, _, _ = llama2()
    base = len(tok["model"]["vocab"])
    markers = ["<|endoftext|>", "<|assistant|>", "<|system|>", "<|end|>", "<|user|>"]
    for offset, content in enumerate(markers):
        special = True
        tok["added_tokens"].append(added(content, base + offset, special=special,
                                         rstrip=content != "<|endoftext|>"))
    config = {"tokenizer_class": "LlamaTokenizer", "add_bos_token": False, "add_eos_token": False,
              "bos_token": "<s>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
              "unk_token": "<unk>", "legacy": False, "clean_up_tokenization_spaces": False}
    generation = {"bos_token_id": 1, "eos_token_id": [base, base + 1, base + 3]}
    return tok, config, generation


def qwen2():
    tok = read(FIXTURES / "hf_synthetic" / "qwen2" / "tokenizer.json")
    assert tok["normalizer"]["type"] == "NFC", tok["normalizer"]
    config = {"tokenizer_class": "Qwen2Tokenizer", "bos_token": None, "eos_token": "<|im_end|>",
              "pad_token": "<|endoftext|>", "unk_token": None, "errors": "replace",
              "clean_up_tokenization_spaces": False, "split_special_tokens": False}
    return tok, config, {"eos_token_id": [2, 0]}


def llama31():
    tok = read(FIXTURES / "hf_synthetic" / "llama3" / "tokenizer.json")
    template = tok["post_processor"]
    assert template["type"] == "TemplateProcessing", template
    tok["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}, template]}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
              "eos_token": "<|eot_id|>", "clean_up_tokenization_spaces": True,
              "model_input_names": ["input_ids", "attention_mask"]}
    return tok, config, {"bos_token_id": 0, "eos_token_id": [1, 4]}


def llama3_gguf():
    tok = read(FIXTURES / "hf_synthetic" / "llama3" / "tokenizer.json")
    tok["normalizer"] = {"type": "Sequence", "normalizers": []}
    tok["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                            "use_regex": True}
    tok["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True}]}
    tok["post_processor"] = None
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": True, "add_eos_token": False,
              "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "legacy": False,
              "clean_up_tokenization_spaces": True}
    return tok, config, None


LAYOUTS = {"llama2": llama2, "phi3": phi3, "qwen2": qwen2, "llama31": llama31, "llama3_gguf": llama3_gguf}


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    golden = {"generator": "tools/make_tokenizer_layout_goldens.py", "transformers": transformers.__version__,
              "tokenizers": tokenizers.__version__, "layouts": {}}
    differs = {}
    for name, make in LAYOUTS.items():
        tok_json, config, generation = make()
        folder = OUT / name
        folder.mkdir(parents=True)
        (folder / "tokenizer.json").write_text(json.dumps(tok_json, ensure_ascii=False, indent=1))
        (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")
        if generation:
            (folder / "generation_config.json").write_text(json.dumps(generation, indent=1) + "\n")
        tok = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        raw = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
        cases = []
        for text in STRINGS:
            prompt_ids = tok(text, add_special_tokens=True)["input_ids"]
            cases.append({
                "text": text,
                "prompt_ids": prompt_ids,
                "plain_ids": tok(text, add_special_tokens=False)["input_ids"],
                "split_ids": tok(text, add_special_tokens=True, split_special_tokens=True)["input_ids"],
                "decoded": tok.decode(prompt_ids),
                "raw_ids": raw.encode(text, add_special_tokens=True).ids,
            })
        differs[name] = sum(c["raw_ids"] != c["prompt_ids"] for c in cases)
        golden["layouts"][name] = {
            "class": type(tok).__name__, "len": len(tok),
            "bos_id": -1 if tok.bos_token_id is None else tok.bos_token_id,
            "eos_id": -1 if tok.eos_token_id is None else tok.eos_token_id,
            "generation_eos": (generation or {}).get("eos_token_id"),
            "cases": cases,
        }
    (OUT / "golden.json").write_text(json.dumps(golden, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {OUT}: {', '.join(f'{k} ({v} strings where bare tokenizers differs)' for k, v in differs.items())}")


if __name__ == "__main__":
    main()
