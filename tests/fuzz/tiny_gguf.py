"""A tiny Llama GGUF for mutation testing: the default model's whole tokenizer (so `kvscope generate` runs
the real tokenizer code on it) with a one-layer, 32-wide network of random F16 weights. Written with the
`gguf` package (gguf-py, pinned in scripts/requirements.txt), independently of kvscope's GGUF code.
About 4 MB, so thousands of mutants are cheap to write.
"""
import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

DIM, FFN, HEADS, KV_HEADS, LAYERS, CONTEXT = 32, 64, 2, 1, 1, 256


def _field_value(field):
    """A reader field as the value GGUFWriter takes (scalars, strings, arrays of either)."""
    kind = field.types[0]
    if kind == GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8")
    if kind == GGUFValueType.ARRAY:
        sub = field.types[1]
        if sub == GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8", errors="surrogateescape") for i in field.data]
        return [field.parts[i].tolist()[0] for i in field.data]
    return field.parts[field.data[0]].tolist()[0]


def make_tiny_gguf(source_model: str, out: str, seed: int = 0) -> int:
    """Writes the tiny model; returns the byte offset where tensor data starts (header, metadata and tensor
    table lie before it)."""
    reader = GGUFReader(source_model)
    writer = GGUFWriter(out, "llama")
    n_vocab = 0
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        kind = field.types[0]
        value = _field_value(field)
        if name == "tokenizer.ggml.tokens":
            n_vocab = len(value)
        if kind == GGUFValueType.ARRAY:
            writer.add_key_value(name, value, kind, sub_type=field.types[1])
        else:
            writer.add_key_value(name, value, kind)
    writer.add_name("kvscope mutation test model")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(DIM)
    writer.add_feed_forward_length(FFN)
    writer.add_block_count(LAYERS)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(DIM // HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    rng = np.random.default_rng(seed)
    head_dim = DIM // HEADS

    def tensor(name, rows, cols):  # GGUF lists dims fastest-first; numpy shape is (rows, cols)
        writer.add_tensor(name, (rng.standard_normal((rows, cols)) * 0.1).astype(np.float16))

    tensor("token_embd.weight", n_vocab, DIM)
    writer.add_tensor("output_norm.weight", np.ones(DIM, dtype=np.float32))
    for layer in range(LAYERS):
        p = f"blk.{layer}."
        writer.add_tensor(p + "attn_norm.weight", np.ones(DIM, dtype=np.float32))
        writer.add_tensor(p + "ffn_norm.weight", np.ones(DIM, dtype=np.float32))
        tensor(p + "attn_q.weight", DIM, DIM)
        tensor(p + "attn_k.weight", KV_HEADS * head_dim, DIM)
        tensor(p + "attn_v.weight", KV_HEADS * head_dim, DIM)
        tensor(p + "attn_output.weight", DIM, DIM)
        tensor(p + "ffn_gate.weight", FFN, DIM)
        tensor(p + "ffn_up.weight", FFN, DIM)
        tensor(p + "ffn_down.weight", DIM, FFN)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return GGUFReader(out).data_offset
