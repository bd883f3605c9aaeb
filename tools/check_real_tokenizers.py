#!/usr/bin/env python3
"""kvscope's tokenization and chat rendering against independent references, on files of released models.

The files are reference data found in public repositories and kept outside the repository (the project's
rule for fetched data): by default in ../shared/reference_tokenizers next to the checkout, laid out as

  llama.cpp/ggml-vocab-NAME.gguf{,.inp,.out}  llama.cpp's vocabulary-only GGUFs of released models (Llama 2
      "llama-spm", Phi-3, GPT-2, ...) with its tokenizer test corpus (.inp: texts separated by
      "\\n__ggml_vocab_test__\\n") and the ids the models' own Hugging Face tokenizers give them (.out, one line
      per text, add_special_tokens=False), from ggerganov/llama.cpp models/ (commit c392e50)
  chat_templates/*.jinja  chat templates of released models as llama.cpp's models/templates keeps them
  NAME/tokenizer.json  a released tokenizer.json (phi2_chatml: a Phi-2 ChatML fine-tune's, from
      abughalib/phi2local models/tokenizer.json, sha256 1d3b61c4...)

Checks:
  1. kvscope's own GGUF tokenizers (`kvscope tokenize --bare`) give the .out ids for every .inp text.
  2. Hugging Face folders: `kvscope tokenize` on each released tokenizer.json gives what transformers'
     AutoTokenizer gives (prompt and bare) on the same corpus.
  3. Every chat template renders and tokenizes as transformers' apply_chat_template(...,
     add_generation_prompt=True, tokenize=True) for three conversations (system + user, user only, three
     turns), on a synthetic Llama 3 tokenizer folder; a template that raises must raise in both.

Run with the embedded venv's Python (it has transformers):

    .deps/embedded-venv/bin/python tools/check_real_tokenizers.py [--data DIR] [--kvscope build/app/kvscope]

Exit 0: all equal; 1: a difference (printed); 77: no reference data here.
"""
import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

ROOT = pathlib.Path(__file__).resolve().parent.parent
SEPARATOR = "\n__ggml_vocab_test__\n"
CONVERSATIONS = {
    "system+user": [{"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "Where is the key?"}],
    "user": [{"role": "user", "content": "Hello there, how are you?"}],
    "three turns": [{"role": "user", "content": "Name a colour."},
                    {"role": "assistant", "content": "Blue."},
                    {"role": "user", "content": "Another one, please."}],
}


def kvscope_tokenize(kvscope, model, text=None, extra=()):
    args = [kvscope, "tokenize", "--model", str(model), "--json", *extra]
    if text is not None:
        args += ["--", text]
    run = subprocess.run(args, capture_output=True, text=True)
    if run.returncode != 0:
        return {"error": run.stderr.strip()}
    return json.loads(run.stdout)


def corpus(inp_path):
    """The texts and their line numbers in the .out file; the empty text is left out (a prompt is never empty)."""
    texts = inp_path.read_text(encoding="utf-8").split(SEPARATOR)
    if texts and texts[-1].endswith("\n__ggml_vocab_test__"):
        texts[-1] = texts[-1][: -len("\n__ggml_vocab_test__")]
    return [(i, t) for i, t in enumerate(texts) if t]


def check_gguf_vocabularies(kvscope, data, failures):
    checked = 0
    for gguf in sorted((data / "llama.cpp").glob("ggml-vocab-*.gguf")):
        inp, out = pathlib.Path(str(gguf) + ".inp"), pathlib.Path(str(gguf) + ".out")
        if not inp.exists() or not out.exists():
            continue
        texts = corpus(inp)
        lines = out.read_text().split("\n")
        equal = 0
        for line, text in texts:
            want = [int(x) for x in lines[line].split()]
            got = kvscope_tokenize(kvscope, gguf, text, ["--bare"])
            if got.get("ids") == want:
                equal += 1
            else:
                failures.append(f"{gguf.name}: {text!r}: kvscope {got.get('ids', got.get('error'))} != {want}")
        print(f"  {gguf.name}: {equal}/{len(texts)} texts equal to the model's Hugging Face tokenizer")
        checked += 1
    return checked


def check_folders(kvscope, data, texts, failures):
    import transformers
    checked = 0
    for tokenizer_json in sorted(data.glob("*/tokenizer.json")):
        folder = tokenizer_json.parent
        tok = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        equal = 0
        for text in texts:
            for extra, want in (((), tok(text)["input_ids"]),
                                (("--bare",), tok(text, add_special_tokens=False)["input_ids"])):
                got = kvscope_tokenize(kvscope, folder, text, extra)
                if got.get("ids") == want:
                    equal += 1
                else:
                    failures.append(f"{folder.name} {extra}: {text!r}: kvscope {got.get('ids', got.get('error'))} "
                                    f"!= transformers {want}")
        print(f"  {folder.name}: {equal}/{2 * len(texts)} encodes equal to transformers {transformers.__version__}")
        checked += 1
    return checked


def check_chat_templates(kvscope, data, failures):
    import transformers
    templates = sorted((data / "chat_templates").glob("*.jinja"))
    if not templates:
        return 0
    base = ROOT / "tests" / "fixtures" / "hf_synthetic" / "llama3"
    with tempfile.TemporaryDirectory(prefix="kvscope_real_templates_") as tmp:
        folder = pathlib.Path(tmp) / "model"
        shutil.copytree(base, folder)
        (folder / "chat_template.jinja").unlink(missing_ok=True)
        tok = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        for template in templates:
            source = template.read_text(encoding="utf-8")
            equal = 0
            for name, messages in CONVERSATIONS.items():
                try:
                    want = tok.apply_chat_template(messages, chat_template=source, add_generation_prompt=True,
                                                   tokenize=True)
                    if isinstance(want, dict) or hasattr(want, "keys"):
                        want = want["input_ids"]
                    want = list(want)
                except Exception as e:  # the template refuses the conversation
                    want = f"raises {type(e).__name__}"
                messages_file = pathlib.Path(tmp) / "messages.json"
                messages_file.write_text(json.dumps(messages))
                got = kvscope_tokenize(kvscope, folder, None,
                                       ["--messages", str(messages_file), "--chat-template", str(template)])
                got_ids = got.get("ids", "raises")
                if got_ids == want or (isinstance(want, str) and got_ids == "raises"):
                    equal += 1
                else:
                    failures.append(f"{template.name} [{name}]: kvscope {got.get('ids', got.get('error'))} "
                                    f"!= transformers {want}")
            print(f"  {template.name}: {equal}/{len(CONVERSATIONS)} conversations equal (or both refused)")
    return len(templates)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "reference_tokenizers"))
    ap.add_argument("--kvscope", default=os.environ.get("KVSCOPE_BINARY", str(ROOT / "build" / "app" / "kvscope")))
    args = ap.parse_args()
    data = pathlib.Path(args.data)
    if not data.is_dir():
        print(f"check_real_tokenizers: no reference data at {data} (skipped)")
        return 77
    failures = []
    print("GGUF vocabularies (kvscope's own tokenizers) against the models' Hugging Face tokenizers:")
    n_gguf = check_gguf_vocabularies(args.kvscope, data, failures)
    texts = []
    for inp in sorted((data / "llama.cpp").glob("*.inp"))[:1]:
        texts = [t for _, t in corpus(inp)]
    texts += ["<|im_start|>user\nhi<|im_end|>", "<|endoftext|> after", "Cafe\u0301 \u00e9t\u00e9", "\t\tcode();\r\n"]
    print("Hugging Face tokenizer.json files (transformers inside kvscope) against transformers:")
    n_folders = check_folders(args.kvscope, data, texts, failures)
    print("Chat templates of released models against apply_chat_template:")
    n_templates = check_chat_templates(args.kvscope, data, failures)
    print(f"checked {n_gguf} GGUF vocabularies, {n_folders} tokenizer.json files, {n_templates} chat templates: "
          f"{len(failures)} differences")
    for f in failures[:40]:
        print("  DIFF " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
