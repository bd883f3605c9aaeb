#!/usr/bin/env python3
"""A tokenizer.json whose BOS comes from a post-processor nested in a Sequence, as Llama 3.1 and 3.2 write it
(`Sequence[ByteLevel, TemplateProcessing(single: <|begin_of_text|> $A)]`, no add_bos_token in
tokenizer_config.json), and the ids Hugging Face `tokenizers` gives for a few strings with its default
add_special_tokens=True. Built from the synthetic llama3 checkpoint's tokenizer (tests/fixtures/hf_synthetic);
read by tests/e2e/hf_synthetic_test.cpp. Run in a venv with `tokenizers` (any 0.2x):

    python tools/make_post_processor_golden.py
"""
import json
import pathlib

import tokenizers

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCE = ROOT / "tests" / "fixtures" / "hf_synthetic" / "llama3" / "tokenizer.json"
OUT = ROOT / "tests" / "fixtures" / "hf_post_processor"
STRINGS = ["Hello world", " leading space", "The keeper wrote 12345 lines.\nThen he slept.", "Café 🙂", ""]


def main():
    data = json.loads(SOURCE.read_text())
    template = data["post_processor"]
    assert template["type"] == "TemplateProcessing", template
    data["post_processor"] = {
        "type": "Sequence",
        "processors": [{"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
                       template],
    }
    OUT.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, ensure_ascii=False, indent=1)
    (OUT / "tokenizer.json").write_text(text)
    tok = tokenizers.Tokenizer.from_str(text)
    cases = [{"text": s, "ids": tok.encode(s).ids} for s in STRINGS]
    assert all(c["ids"][:1] == [template["special_tokens"]["<|begin_of_text|>"]["ids"][0]] for c in cases)
    golden = {"generator": "tools/make_post_processor_golden.py", "tokenizers": tokenizers.__version__,
              "source": str(SOURCE.relative_to(ROOT)), "cases": cases}
    (OUT / "golden.json").write_text(json.dumps(golden, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {OUT} ({len(cases)} cases, tokenizers {tokenizers.__version__})")


if __name__ == "__main__":
    main()
