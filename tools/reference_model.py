"""The default model as the independent reference generators load it (tools/make_golden.py,
tools/make_kvpress_knorm_golden.py): Hugging Face transformers reading the same GGUF file kvscope loads, in
float32 with eager attention on the CPU, deterministic. Imported by those scripts, never by kvscope."""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = REPO_ROOT / ".deps" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_reference(model_path: Path, threads: int):
    """(tokenizer, model) for the checksum-verified GGUF at model_path; exits naming a wrong file."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    model_sha = sha256_file(model_path)
    if model_sha != MODEL_SHA256:
        sys.exit(f"model sha256 {model_sha} != expected {MODEL_SHA256}")
    mdir, mfile = str(model_path.parent), model_path.name
    tok = AutoTokenizer.from_pretrained(mdir, gguf_file=mfile)
    model = AutoModelForCausalLM.from_pretrained(mdir, gguf_file=mfile, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    return tok, model
