#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizer_smollm2.json: reference tokenizations for the C++ tokenizers' tests.

The reference is Hugging Face `tokenizers`, built from the vocabulary and merges in the same GGUF file
the C++ code loads, with SmolLM2's tokenizer.json pipeline:

    pre_tokenizer  Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False, use_regex=True)]
    model          BPE (no dropout, no byte fallback, merges applied even to whole-vocabulary words)
    decoder        ByteLevel (bytes joined, then String::from_utf8_lossy: one U+FFFD per maximal
                   ill-formed subpart)
    added tokens   every token_type 3 (control) entry as a special token, not normalized

(transformers' own GGUF import of this file would leave out the Digits step, because it does not know the
"smollm" pre-tokenizer name; when transformers is installed the script still cross-checks its BPE and
added-token handling by giving its tokenizer the same pre-tokenizer.) The chat-template examples are
rendered from the file's tokenizer.chat_template with jinja2, set up as transformers sets it up.

It also records, for the C++ Unicode tables, the character classes the reference actually uses (found by
probing its pre-tokenizers one codepoint at a time), and the splits of the Llama-3 and Qwen2 regexes.

How to run (from the repository root):

    python3 -m venv /tmp/tokenv
    /tmp/tokenv/bin/pip install tokenizers==0.23.3 gguf==0.19.0 numpy jinja2==3.1.6
    /tmp/tokenv/bin/pip install transformers==5.23.0          # optional: the cross-check below
    scripts/fetch_model.sh
    /tmp/tokenv/bin/python tools/make_tokenizer_golden.py   # about 20 s
"""
import argparse
import json
import os
import sys

import gguf
import jinja2
import tokenizers
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TEXTS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure you've heard they'll say it's fine; we'd rather he'd not. She's here.",
    "Don't SHOUT: IT'S LOUD, YOU'RE loud",
    "def f(x):\n    if x > 0:\n        return x * 2\n    return -x\n",
    "int main() {\n\tstd::cout << \"hi\" << std::endl;\n\treturn 0;\n}\n",
    "a    b     c",
    "   leading and trailing   ",
    " ",
    "\n\n\n",
    "\t\t tab mix \t",
    "line1\r\nline2\r\n",
    "12345",
    "Call 555-0123 or +1 (800) 123-4567 by 2024-12-31.",
    "3.14159 and 1,000,000 and 0x1F; room 101 2",
    "你好，世界！今天天气很好。",
    "こんにちは世界、カタカナとひらがな。",
    "안녕하세요 세계",
    "I love 🍕 and 🎉!",
    "Family: 👨‍👩‍👧‍👦, flags 🇫🇷🇯🇵, skin 👍🏽",
    "café naïve résumé Ångström",
    "cafe\u0301 nai\u0308ve",
    "مرحبا بالعالم ١٢٣",
    "नमस्ते दुनिया",
    "Привет мир, Γειά σου κόσμε",
    "",
    "text<|endoftext|>more<|im_end|>",
    "<|im_start|><|im_start",
    "∑ x² ≤ ½ ∞",
    "x²³ ½ Ⅻ ١٢",
    "１２３ fullwidth",
    "a\u00a0b\u3000c\u2003d",
    "https://example.com/path?q=1&r=two#frag",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
    "# Title\n\n- item 1\n- item 2\n\n```python\nprint('hi')\n```",
    "==========  aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "abc日本語def123ghi",
    "\x00\x01\x7f bell\x07",
    "'s 's ''s rock'n'roll ’s",
    "a  \n  b",
    "\u200b\ufeffx",
    "❤️ ☺︎",
    # SmolLM2 has no token for the bytes 04 06 13 14 16 1D C0 C1 F1 F2 F5..FF; the reference drops them.
    "ctrl\x04\x06 gone, plane 5 \U00050000 gone, plane 14 tag \U000E0041 kept",
]

CHATS = [
    ([{"role": "user", "content": "What is 2+2?"}], True),
    ([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Hello."}, {"role": "user", "content": " spaced \n"}], False),
    ([{"role": "user", "content": "Translate: 你好"}, {"role": "assistant", "content": "Hello"}], True),
]

# Texts for the pre-tokenizer regexes of other byte-level models.
SPLIT_TEXTS = TEXTS + ["it'S 'RE x'Ll 'ſ", "a \n\n b\t\n\tc  \n", "123456789 12", "?!\n\nfoo ...\r\n", "'hello 'x"]
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def read_gguf(path):
    reader = gguf.GGUFReader(path)

    def field(name):
        return reader.fields[name]

    def strings(name):
        f = field(name)
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    def ints(name):
        f = field(name)
        return [int(f.parts[i][0]) for i in f.data]

    def scalar(name):
        f = field(name)
        v = f.parts[f.data[0]]
        return bytes(v).decode("utf-8") if f.types[0] == gguf.GGUFValueType.STRING else v[0].item()

    return {
        "model": scalar("tokenizer.ggml.model"),
        "pre": scalar("tokenizer.ggml.pre"),
        "tokens": strings("tokenizer.ggml.tokens"),
        "token_type": ints("tokenizer.ggml.token_type"),
        "merges": strings("tokenizer.ggml.merges"),
        "bos": scalar("tokenizer.ggml.bos_token_id"),
        "eos": scalar("tokenizer.ggml.eos_token_id"),
        "chat_template": scalar("tokenizer.chat_template"),
    }


def smollm_pre_tokenizer():
    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])


def build_reference(meta):
    vocab = {t: i for i, t in enumerate(meta["tokens"])}
    merges = [tuple(m.split(" ", 1)) for m in meta["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=False, byte_fallback=False))
    tok.pre_tokenizer = smollm_pre_tokenizer()
    tok.decoder = decoders.ByteLevel()
    specials = [AddedToken(t, normalized=False, special=True)
                for t, ty in zip(meta["tokens"], meta["token_type"]) if ty == 3]
    tok.add_special_tokens(specials)
    assert tok.get_vocab_size(with_added_tokens=True) == len(meta["tokens"]), "added tokens grew the vocabulary"
    return tok


def cross_check_with_transformers(meta, texts, reference):
    """Builds transformers' GGUF tokenizer (its own BPE/added-token import) and compares ids."""
    try:
        from transformers.integrations.gguf import gguf_tokenizer_mapping as m
    except Exception as e:  # transformers is optional
        print(f"make_tokenizer_golden: skipping transformers cross-check ({e.__class__.__name__})")
        return None
    tokenizer_dict = {"tokenizer_type": meta["model"], "pre_tokenizer_type": meta["pre"], "tokens": meta["tokens"],
                      "token_type": meta["token_type"], "merges": meta["merges"]}
    backend, _ = m.convert_gguf_tokenizer("llama", tokenizer_dict)
    backend.pre_tokenizer = smollm_pre_tokenizer()  # transformers has no mapping for pre = "smollm"
    for t in texts:
        a, b = backend.encode(t, add_special_tokens=False).ids, reference.encode(t, add_special_tokens=False).ids
        if a != b:
            sys.exit(f"make_tokenizer_golden: transformers and tokenizers disagree on {t!r}: {a} vs {b}")
    import transformers
    return transformers.__version__


def byte_token_ids(meta):
    """Id of the single-byte token for each byte that has one, through GPT-2's byte alphabet."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_to_char = {b: chr(c) for b, c in zip(bs, cs)}
    char_to_byte = {c: b for b, c in byte_to_char.items()}
    vocab = {t: i for i, t in enumerate(meta["tokens"])}
    return {b: vocab[byte_to_char[b]] for b in range(256) if byte_to_char[b] in vocab}, char_to_byte


def invalid_decode_cases(meta, reference):
    byte_id, char_to_byte = byte_token_ids(meta)
    a = byte_id[ord("a")]
    cases = [
        ("lone lead byte of a 3-byte sequence", [byte_id[0xE4]]),
        ("truncated 3-byte sequence", [byte_id[0xE4], byte_id[0xBD]]),
        ("truncated 3-byte sequence, then ASCII", [byte_id[0xE4], byte_id[0xBD], a]),
        ("truncated 4-byte sequence, then ASCII", [byte_id[0xF0], byte_id[0x9F], byte_id[0x98], a]),
        ("overlong encoding E0 80 AF", [byte_id[0xE0], byte_id[0x80], byte_id[0xAF]]),
        ("encoded surrogate ED A0 80", [byte_id[0xED], byte_id[0xA0], byte_id[0x80]]),
        ("stray continuation bytes", [byte_id[0x80], byte_id[0xBF], a]),
        ("above U+10FFFF: F4 90 80 80", [byte_id[0xF4], byte_id[0x90], byte_id[0x80], byte_id[0x80]]),
        ("F0 then a non-continuation lead byte", [byte_id[0xF0], byte_id[0xE4], byte_id[0xBD], byte_id[0xA0]]),
    ]
    # Multi-byte vocabulary tokens whose bytes are not valid UTF-8 on their own, alone and in pairs that
    # complete each other.
    partial = []
    for i, t in enumerate(meta["tokens"]):
        if meta["token_type"][i] != 1 or not all(c in char_to_byte for c in t) or len(t) < 2:
            continue
        try:
            bytes(char_to_byte[c] for c in t).decode("utf-8")
        except UnicodeDecodeError:
            partial.append(i)
    for i in partial[:6]:
        cases.append((f"vocabulary token {i} ({meta['tokens'][i]!r}) alone", [i]))
    emoji_ids = reference.encode("🎉🍕", add_special_tokens=False).ids
    cases.append(("emoji split over tokens, first token only", emoji_ids[:1]))
    cases.append(("emoji split over tokens, whole", emoji_ids))
    cases.append(("special tokens are decoded as text", [1, byte_id[ord("h")], 2]))
    return [{"name": n, "ids": ids, "text": reference.decode(ids, skip_special_tokens=False)} for n, ids in cases]


def probe_classes():
    """Codepoint classes the reference's pre-tokenizers use, found by how they split probe strings."""
    dig = pre_tokenizers.Digits(individual_digits=True)
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    classes = {"letter": [], "number": [], "whitespace": [], "digit_split": []}
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        if c != "x" and len(dig.pre_tokenize_str("x" + c + "x")) == 3:
            classes["digit_split"].append(cp)
        if len(bl.pre_tokenize_str("a" + c + "a")) == 1:
            classes["letter"].append(cp)
        elif len(bl.pre_tokenize_str("1" + c + "1")) == 1:
            classes["number"].append(cp)
        elif len(bl.pre_tokenize_str("!" + c + "!")) != 1:
            classes["whitespace"].append(cp)

    def to_ranges(cps):
        out = []
        for cp in cps:
            if out and out[-1][1] == cp - 1:
                out[-1][1] = cp
            else:
                out.append([cp, cp])
        return out

    return {k: to_ranges(v) for k, v in classes.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, ".deps/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/fixtures/tokenizer_smollm2.json"))
    args = ap.parse_args()

    meta = read_gguf(args.model)
    assert meta["model"] == "gpt2" and meta["pre"] == "smollm", (meta["model"], meta["pre"])
    reference = build_reference(meta)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    template = env.from_string(meta["chat_template"])
    chats = []
    for messages, gen in CHATS:
        text = template.render(messages=messages, add_generation_prompt=gen)
        chats.append({"messages": messages, "add_generation_prompt": gen, "text": text})

    texts = TEXTS + [c["text"] for c in chats]
    transformers_version = cross_check_with_transformers(meta, texts, reference)

    byte_id, _ = byte_token_ids(meta)
    encodings = []
    for t in texts:
        ids = reference.encode(t, add_special_tokens=False).ids
        decoded = reference.decode(ids, skip_special_tokens=False)
        if all(b in byte_id for b in t.encode("utf-8")):
            assert decoded == t, f"reference does not round-trip {t!r}"
        encodings.append({"text": t, "ids": ids, "decoded": decoded})

    reference.encode_special_tokens = True  # special-token strings as plain text (parse_special = false)
    plain = [{"text": t, "ids": reference.encode(t, add_special_tokens=False).ids}
             for t in ["text<|endoftext|>more<|im_end|>", chats[0]["text"]]]
    reference.encode_special_tokens = False

    n = len(meta["tokens"])
    sample = sorted(set(list(range(0, 400)) + list(range(400, n, 97)) + [n - 1]))
    token_texts = [{"id": i, "text": reference.decode([i], skip_special_tokens=False)} for i in sample]

    splits = {}
    for name, rx in (("llama3", LLAMA3_SPLIT), ("qwen2", QWEN2_SPLIT)):
        split = pre_tokenizers.Split(Regex(rx), behavior="isolated")
        splits[name] = [{"text": t, "pieces": [p for p, _ in split.pre_tokenize_str(t)]} for t in SPLIT_TEXTS]
    smollm = smollm_pre_tokenizer()
    _, char_to_byte = byte_token_ids(meta)
    splits["smollm"] = [{"text": t, "pieces": [bytes(char_to_byte[c] for c in p).decode("utf-8")
                                               for p, _ in smollm.pre_tokenize_str(t)]} for t in SPLIT_TEXTS]

    fixture = {
        "generator": "tools/make_tokenizer_golden.py",
        "versions": {"python": sys.version.split()[0], "tokenizers": tokenizers.__version__,
                     "gguf": gguf.__version__ if hasattr(gguf, "__version__") else "0.19.0",
                     "jinja2": jinja2.__version__, "transformers_cross_check": transformers_version},
        "model_file": os.path.basename(args.model),
        "vocab_size": n,
        "bos_id": meta["bos"],
        "eos_id": meta["eos"],
        "encodings": encodings,
        "encodings_no_special": plain,
        "invalid_decodes": invalid_decode_cases(meta, reference),
        "token_texts": token_texts,
        "chat": chats,
        "pre_tokenizer_splits": splits,
        "reference_classes": probe_classes(),
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(fixture, f, ensure_ascii=True, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"make_tokenizer_golden: wrote {args.out} ({len(encodings)} encodings, "
          f"{len(fixture['invalid_decodes'])} invalid decodes, {len(token_texts)} token texts)")


if __name__ == "__main__":
    main()
