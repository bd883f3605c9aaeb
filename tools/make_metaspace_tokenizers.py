#!/usr/bin/env python3
"""SentencePiece-style (Metaspace, byte-fallback) tokenizer.json files as Llama 2 and Mistral ship them, with goldens.

The reference is Hugging Face `tokenizers`. A BPE with `byte_fallback` is trained on the committed
tests/fixtures/hf_metaspace/training_text.txt, laid out as transformers' LlamaConverter lays out Llama 2's
tokenizer.json (<unk> <s> </s> at ids 0-2, the 256 byte tokens <0x00>..<0xFF> at 3-258, then the learned
pieces; BOS by a TemplateProcessing post-processor), and then re-assembled in the variants these families use:

  llama2_legacy       normalizer Sequence[Prepend("▁"), Replace(" ", "▁")], no pre-tokenizer (Llama 2, Mistral v0.1)
  metaspace_first     no normalizer, Metaspace(prepend_scheme "first", split false) (transformers' legacy=false,
                      Mistral v0.3)
  metaspace_always_split  Metaspace(prepend_scheme "always", split true)
  metaspace_never     Metaspace(prepend_scheme "never", split false), decoder without Strip
  no_byte_fallback    llama2_legacy with byte_fallback false: characters outside the vocabulary become <unk>
                      (consecutive ones fused, fuse_unk)

Every variant decodes with Sequence[Replace("▁", " "), ByteFallback, Fuse, Strip(" ", 1, 0)] (Strip left out
for metaspace_never). Writes tests/fixtures/hf_metaspace/tokenizer.json (llama2_legacy) and golden.json: per
variant the tokenizer.json fields that differ from it, and for every hard string the ids (no BOS) and their
decoding; plus id sequences decoded on their own (lone and broken byte tokens, special tokens).

make_synthetic_checkpoints.py imports train_metaspace_bpe() for the Llama 2 and Mistral checkpoints.
Regenerate (byte-identical with the pinned tools/requirements-golden.txt; torch is not needed here):
  /tmp/goldenv/bin/python tools/make_metaspace_tokenizers.py
"""
import json
from pathlib import Path

import tokenizers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/fixtures/hf_metaspace"
SPACE = "\u2581"
SPECIALS = ["<unk>", "<s>", "</s>"]
BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]

HARD_STRINGS = [
    "", " ", "  ", "Hello", " Hello", "  leading spaces", "trailing spaces  ", "multiple   inner    spaces",
    "new\nline\n\nand\r\nCRLF\n", "\ttab\tseparated\t", "digits 12345 3.14159 0x1F 2024-12-31",
    "日本語のテキスト", "中文 字符", "한국어 문장", "emoji 🙂👍🏽 👨‍👩‍👧", "naïve café Ñandú Åström", "decomposed e\u0301 and a\u0308",
    "<s>inside</s> text", "a<s>b</s>c", "<unk> stays special", "[INST] question [/INST]", "<0x41> is text",
    "▁already▁metaspace", "The lighthouse keeper counted the steps.", "don't DON'T we'll",
]
DECODE_IDS = [[], [1], [1, 2], [3 + 0xE6], [3 + 0xE6, 3 + 0x97, 3 + 0xA5], [3 + 0xE6, 3 + 0x97], [3 + 0x41, 3 + 0x20],
              [0], [0, 0]]


def train_metaspace_bpe(texts, vocab_size):
    """A Llama-2-layout byte-fallback BPE (see the module docstring), trained on `texts`."""
    trainer_tok = Tokenizer(models.BPE(unk_token="<unk>"))
    trainer_tok.normalizer = normalizers.Sequence([normalizers.Prepend(SPACE), normalizers.Replace(" ", SPACE)])
    # sentencepiece never merges across a word start; splitting at "▁" for training does the same.
    trainer_tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="never", split=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(BYTE_TOKENS), special_tokens=SPECIALS,
                                  show_progress=False)
    trainer_tok.train_from_iterator(texts, trainer)
    trained = json.loads(trainer_tok.to_str())["model"]
    merges = [tuple(m) for m in trained["merges"]]
    # The trainer numbers its alphabet in hash order; sorting it (and then listing pieces in merge order) makes
    # the file the same on every run.
    alphabet = sorted(t for t in trained["vocab"] if t not in SPECIALS and len(t) == 1)
    learned = alphabet + [left + right for left, right in merges]
    vocab = {t: i for i, t in enumerate(SPECIALS + BYTE_TOKENS + learned)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.add_special_tokens(SPECIALS)
    tok.normalizer = normalizers.Sequence([normalizers.Prepend(SPACE), normalizers.Replace(" ", SPACE)])
    tok.decoder = decoders.Sequence([decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 1)])
    return tok


def metaspace_pre_tokenizer(prepend_scheme, split):
    return json.loads(pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme=prepend_scheme, split=split)
                      .__getstate__())


def decoder_without_strip():
    return json.loads(decoders.Sequence([decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()])
                      .__getstate__())


def variants():
    """name -> the tokenizer.json fields that differ from llama2_legacy ("model.*" for the model's own keys)."""
    return {
        "llama2_legacy": {},
        "metaspace_first": {"normalizer": None, "pre_tokenizer": metaspace_pre_tokenizer("first", False)},
        "metaspace_always_split": {"normalizer": None, "pre_tokenizer": metaspace_pre_tokenizer("always", True)},
        "metaspace_never": {"normalizer": None, "pre_tokenizer": metaspace_pre_tokenizer("never", False),
                            "decoder": decoder_without_strip()},
        "no_byte_fallback": {"model.byte_fallback": False},
    }


def apply_fields(base_json, fields):
    out = json.loads(json.dumps(base_json))
    for key, value in fields.items():
        if key.startswith("model."):
            out["model"][key[len("model."):]] = value
        else:
            out[key] = value
    return out


def training_texts():
    return (OUT / "training_text.txt").read_text(encoding="utf-8").split("\n\n")


def main():
    base = train_metaspace_bpe(training_texts(), vocab_size=1500)
    base_json = json.loads(base.to_str())
    (OUT / "tokenizer.json").write_text(base.to_str(pretty=True) + "\n", encoding="utf-8")
    golden = {"schema_version": 1,
              "reference": {"implementation": "Hugging Face tokenizers: Tokenizer.encode(add_special_tokens=False), "
                                              "Tokenizer.decode(skip_special_tokens=False)",
                            "versions": {"tokenizers": tokenizers.__version__}},
              "bos_with_special_tokens": base.encode("Hello", add_special_tokens=True).ids,
              "variants": {}}
    for name, fields in variants().items():
        tok = Tokenizer.from_str(json.dumps(apply_fields(base_json, fields)))
        strings = []
        for text in HARD_STRINGS:
            ids = tok.encode(text, add_special_tokens=False).ids
            strings.append({"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)})
        decodes = [{"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)} for ids in DECODE_IDS]
        golden["variants"][name] = {"fields": fields, "strings": strings, "decode_only": decodes}
        print(name, "example", strings[9]["ids"][:12])
    (OUT / "golden.json").write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
