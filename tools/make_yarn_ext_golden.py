#!/usr/bin/env python3
"""YaRN's partial ramp (llama.cpp's yarn_ext_factor) with llama.cpp itself as the reference.

transformers has no partial ramp (its YaRN always blends the whole ramp), so the reference is llama.cpp, run through
llama-cpp-python (.deps/bench-venv, bench/requirements.txt), on GGUFs of the tests/fixtures/hf_yarn checkpoint
(tools/make_yarn_checkpoint.py: qwen2, factor 4 over an original context of 64, betas 4 / 2) that carry
qwen2.rope.scaling.yarn_ext_factor 0.5 and 0.

Writes tests/fixtures/hf_yarn/qwen2_yarn_ext050.gguf, qwen2_yarn_ext000.gguf and golden_llamacpp.json (the prompt
ids of golden.json, 148 tokens past the original context, and llama.cpp's logits of the last position for each
file), read by tests/e2e/hf_synthetic_test.cpp.

What llama.cpp reads decides the files' keys:
- yarn_ext_factor, yarn_attn_factor and the betas are read from a file only for a few architectures (qwen2 is not
  one; golden_llamacpp.json records whether this llama.cpp read the file's yarn_ext_factor), and llama-cpp-python
  always passes its own betas and yarn_attn_factor. So the file's values are also given to llama.cpp as the context
  parameters yarn_ext_factor, yarn_beta_fast and yarn_beta_slow.
- whenever ext_factor != 0, llama.cpp replaces yarn_attn_factor by YaRN's own 0.1 ln(factor) + 1 (its context's
  constructor), where kvscope and transformers take a given attention factor. So the files carry no
  yarn_attn_factor; the magnitude is tested through attn_factor (1.1), which llama.cpp reads for every architecture
  and multiplies in, with ext_factor 0 as without YaRN's own.
- the KV cache is F32 (type_k, type_v), so that llama.cpp's logits are float32 throughout.

Regenerate (one command; the script runs itself again under .deps/bench-venv/bin/python for llama.cpp's part):
  /tmp/goldenv/bin/python tools/make_yarn_ext_golden.py
"""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/fixtures/hf_yarn"
BENCH_PYTHON = ROOT / ".deps/bench-venv/bin/python"
EXT_FACTORS = {"qwen2_yarn_ext050.gguf": 0.5, "qwen2_yarn_ext000.gguf": 0.0}
ATTN_FACTOR = 1.1


def write_ggufs():
    import gguf
    from tokenizers import Tokenizer

    from make_synthetic_checkpoints import QWEN2_TOKENIZER, write_gguf

    folder = OUT / "qwen2_yarn"
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    for name, ext in EXT_FACTORS.items():
        def rope_keys(writer, rope, ext=ext):
            writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
            writer.add_rope_scaling_factor(rope["factor"])
            writer.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
            writer.add_rope_scaling_yarn_beta_fast(rope["beta_fast"])
            writer.add_rope_scaling_yarn_beta_slow(rope["beta_slow"])
            writer.add_rope_scaling_yarn_ext_factor(ext)
            writer.add_rope_scaling_attn_factors(ATTN_FACTOR)

        write_gguf(folder, OUT / name, "qwen2", tok, QWEN2_TOKENIZER, rope_keys=rope_keys)


def llama_cpp_logits(path, ids, **context):
    from llama_cpp import Llama

    llm = Llama(model_path=str(path), n_ctx=256, n_batch=256, n_threads=1, logits_all=True, verbose=False,
                type_k=0, type_v=0, **context)  # 0: GGML_TYPE_F32
    llm.eval(ids)
    logits = [float(v) for v in llm.scores[len(ids) - 1]]
    llm.close()
    return logits


def write_golden():
    import llama_cpp

    prompt = json.loads((OUT / "golden.json").read_text())
    ids = prompt["checkpoints"]["qwen2_yarn"]["prompt_ids"]
    yarn = prompt["yarn"]
    golden = {"schema_version": 1, "prompt_ids": ids, "attn_factor": ATTN_FACTOR,
              "reference": {"implementation": "llama.cpp through llama-cpp-python, CPU, F32 KV cache, one thread",
                            "versions": {"llama_cpp_python": llama_cpp.__version__}},
              "files": {}}
    for name, ext in EXT_FACTORS.items():
        path = OUT / name
        given = llama_cpp_logits(path, ids, yarn_ext_factor=ext, yarn_beta_fast=yarn["beta_fast"],
                                 yarn_beta_slow=yarn["beta_slow"])
        from_file = llama_cpp_logits(path, ids, yarn_beta_fast=yarn["beta_fast"], yarn_beta_slow=yarn["beta_slow"])
        golden["files"][name] = {"yarn_ext_factor": ext, "final_logits": given,
                                 "llama_cpp_reads_the_files_ext_factor": from_file == given}
        print(name, "logits range", min(given), max(given), "llama.cpp read the file's ext_factor:", from_file == given)
    (OUT / "golden_llamacpp.json").write_text(json.dumps(golden, indent=1) + "\n")


def main():
    if "--llama-cpp" in sys.argv:
        write_golden()
        return
    write_ggufs()
    subprocess.run([str(BENCH_PYTHON), __file__, "--llama-cpp"], check=True)


if __name__ == "__main__":
    main()
