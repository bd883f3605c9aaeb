#!/usr/bin/env python3
"""Tiny random checkpoints of every supported family, written by transformers, with transformers' goldens.

Writes tests/fixtures/hf_synthetic/<name>/ (a Hugging Face folder) and tests/fixtures/hf_synthetic/golden.json.
Each checkpoint has 2-3 layers, odd head counts and GQA groups, and the feature its family adds, so that RoPE
(rotate-half, Llama 3 and linear scaling), biases, q/k norms, tied/untied heads, F32/F16/BF16 storage and the
tokenizer.json pre-tokenizers (Llama 3 and Qwen2 regexes) are each proven against transformers:

  llama3     LlamaForCausalLM, llama3 rope scaling (small original context so it matters), tied, F32,
             Llama-3-style tokenizer (Split regex + ByteLevel, BOS by TemplateProcessing, ignore_merges)
  llama2     LlamaForCausalLM, linear rope scaling, attention_bias (q/k/v/o biases), untied, F16,
             Llama-2-style tokenizer (byte-fallback BPE, Prepend/Replace normalizer; make_metaspace_tokenizers.py)
  mistral    MistralForCausalLM, 5 heads / 1 KV head, untied, F32, Mistral-style tokenizer (the same BPE with a
             Metaspace pre-tokenizer, prepend_scheme "first")
  qwen2      Qwen2ForCausalLM, q/k/v biases, 6 heads / 3 KV heads, tied, BF16, Qwen2-style tokenizer (NFC
             normalizer, Qwen2 split regex, no BOS)
  qwen3      Qwen3ForCausalLM, q/k RMSNorm, head_dim 24 != hidden/heads, 3 heads / 1 KV head, untied, F32

llama3, qwen2 and qwen3 are also written as GGUF files (<name>.gguf) the way llama.cpp's convert_hf_to_gguf.py
lays them out (llama: q/k rows permuted for adjacent-pair RoPE, rope scaling as a rope_freqs tensor; qwen: rows
as in the checkpoint), so that the GGUF `llama`/`qwen2`/`qwen3` paths meet the same golden.

The tokenizers are BPEs trained here with the `tokenizers` library on the project's sample prompts. Each folder's
chat template is its family's (Llama 2 and Llama 3 as Meta ships them, Mistral Instruct, ChatML with Qwen2's
default system prompt, plain ChatML for Qwen3); golden.json has transformers' apply_chat_template renderings
of three conversations (system + user, user only, multi-turn) with their ids.
Regenerate (byte-identical with the pinned versions of tools/requirements-golden.txt):
  /tmp/goldenv/bin/python tools/make_synthetic_checkpoints.py
"""
import json
import shutil
from pathlib import Path

import gguf
import numpy as np
import torch
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import (AutoModelForCausalLM, AutoTokenizer, LlamaConfig, MistralConfig, PreTrainedTokenizerFast,
                          Qwen2Config, Qwen3Config)

from make_metaspace_tokenizers import SPACE, train_metaspace_bpe

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/fixtures/hf_synthetic"
VOCAB = 384
N_NEW = 8

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")

PROMPT = ("The lighthouse keeper counted 12345 steps in 1987; he said: \"I'LL climb them again!\" "
          "Café naïve — 日本語 🙂 and tabs\tand   spaces.\n\nThen the night came, and the lamp turned slowly "
          "over the dark water while the keeper wrote in his log.")
TOKENIZER_STRINGS = ["don't DON'T we'll 1234567 3.14159", "  leading\n\n\ttabs  and trailing  ", "naïve café 日本 🙂👍🏽"]


def corpus():
    texts = [PROMPT] + TOKENIZER_STRINGS
    for path in sorted((ROOT / "sample_data/prompts").glob("*.txt")):
        texts.append(path.read_text())
    return texts


def train_tokenizer(spec):
    if spec["kind"] == "metaspace":
        return train_metaspace_tokenizer(spec["prepend_scheme"])
    return train_byte_level_tokenizer(spec["pattern"], spec["specials"], spec["bos"], spec["nfc"])


def train_metaspace_tokenizer(prepend_scheme):
    """Llama 2's layout (legacy Prepend/Replace normalizer), or Mistral's Metaspace pre-tokenizer instead."""
    tok = train_metaspace_bpe(corpus(), vocab_size=META_VOCAB)
    if prepend_scheme is not None:
        tok.normalizer = None
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme=prepend_scheme, split=False)
    return tok


def train_byte_level_tokenizer(pattern, specials, bos, nfc):
    tok = Tokenizer(models.BPE(ignore_merges=bos is not None))
    if nfc:  # as Qwen2's tokenizer.json
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    if bos is None:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    else:
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                           special_tokens=[(bos, tok.token_to_id(bos))])
    return tok


def save_tokenizer(tok, folder, bos, eos, unk, chat_template):
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos, unk_token=unk)
    fast.chat_template = chat_template
    fast.save_pretrained(folder)


# Meta-Llama-3-8B-Instruct's template.
LLAMA3_TEMPLATE = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
                   "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
                   "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
                   "{{ content }}{% endfor %}{% if add_generation_prompt %}"
                   "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
# Llama-2-7b-chat-hf's template.
LLAMA2_TEMPLATE = ("{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message "
                   "= messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false "
                   "%}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 "
                   "== 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
                   "{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + "
                   "system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = "
                   "message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + "
                   "content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() "
                   "+ ' ' + eos_token }}{% endif %}{% endfor %}")
# Mistral-7B-Instruct-v0.1's template, with an optional system message before the first user message.
MISTRAL_TEMPLATE = ("{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}"
                    "{%- set loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}{%- endif %}"
                    "{{- bos_token }}{%- for message in loop_messages %}{%- if (message['role'] == 'user') != "
                    "(loop.index0 % 2 == 0) %}{{- raise_exception('Conversation roles must alternate') }}{%- endif %}"
                    "{%- if message['role'] == 'user' %}{%- if loop.first and system_message is defined %}"
                    "{{- '[INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}{%- else %}"
                    "{{- '[INST] ' + message['content'] + ' [/INST]' }}{%- endif %}{%- elif message['role'] == "
                    "'assistant' %}{{- message['content'] + eos_token }}{%- endif %}{%- endfor %}")
# Qwen2-Instruct's ChatML: a default system prompt when the conversation has none.
QWEN2_TEMPLATE = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                  "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
                  "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
                  "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
CHATML_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                   "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

LLAMA3_TOKENIZER = dict(kind="byte_level", nfc=False, pattern=LLAMA3_PATTERN, bos="<|begin_of_text|>",
                        eos="<|eot_id|>", unk=None, template=LLAMA3_TEMPLATE,
                        specials=["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                                  "<|eot_id|>"])
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QWEN2_TOKENIZER = dict(kind="byte_level", nfc=True, pattern=QWEN2_PATTERN, bos=None, eos="<|im_end|>", unk=None,
                       template=QWEN2_TEMPLATE, specials=QWEN_SPECIALS)
QWEN3_TOKENIZER = dict(QWEN2_TOKENIZER, template=CHATML_TEMPLATE)
META_VOCAB = 512
LLAMA2_TOKENIZER = dict(kind="metaspace", prepend_scheme=None, bos="<s>", eos="</s>", unk="<unk>",
                        template=LLAMA2_TEMPLATE, specials=["<unk>", "<s>", "</s>"])
MISTRAL_TOKENIZER = dict(LLAMA2_TOKENIZER, prepend_scheme="first", template=MISTRAL_TEMPLATE)
CHATS = [
    [{"role": "system", "content": "You answer in one short sentence."},
     {"role": "user", "content": "Where is the lighthouse?"}],
    [{"role": "user", "content": "  Hello there!\n"}],
    [{"role": "user", "content": "Count to 3."}, {"role": "assistant", "content": " 1, 2, 3. "},
     {"role": "user", "content": "And back, café 日本?"}],
]

COMMON = dict(max_position_embeddings=256, rms_norm_eps=1e-5, hidden_act="silu")
CHECKPOINTS = [
    ("llama3", LlamaConfig, dict(hidden_size=70, intermediate_size=96, num_hidden_layers=2, num_attention_heads=5,
                                 num_key_value_heads=5, head_dim=14, tie_word_embeddings=True,
                                 rope_parameters=dict(rope_type="llama3", rope_theta=500.0, factor=8.0,
                                                      low_freq_factor=1.0, high_freq_factor=4.0,
                                                      original_max_position_embeddings=32)),
     torch.float32, LLAMA3_TOKENIZER),
    ("llama2", LlamaConfig, dict(hidden_size=64, intermediate_size=80, num_hidden_layers=3, num_attention_heads=4,
                                 num_key_value_heads=2, attention_bias=True, tie_word_embeddings=False,
                                 rope_parameters=dict(rope_type="linear", rope_theta=10000.0, factor=4.0)),
     torch.float16, LLAMA2_TOKENIZER),
    ("mistral", MistralConfig, dict(hidden_size=80, intermediate_size=112, num_hidden_layers=2, num_attention_heads=5,
                                    num_key_value_heads=1, head_dim=16, sliding_window=200, tie_word_embeddings=False,
                                    rope_parameters=dict(rope_type="default", rope_theta=1e6)),
     torch.float32, MISTRAL_TOKENIZER),
    ("qwen2", Qwen2Config, dict(hidden_size=72, intermediate_size=88, num_hidden_layers=2, num_attention_heads=6,
                                num_key_value_heads=3, tie_word_embeddings=True, use_sliding_window=False,
                                rope_parameters=dict(rope_type="default", rope_theta=1e6)),
     torch.bfloat16, QWEN2_TOKENIZER),
    ("qwen3", Qwen3Config, dict(hidden_size=48, intermediate_size=64, num_hidden_layers=3, num_attention_heads=3,
                                num_key_value_heads=1, head_dim=24, tie_word_embeddings=False, attention_bias=False,
                                use_sliding_window=False, rope_parameters=dict(rope_type="default", rope_theta=1e6)),
     torch.float32, QWEN3_TOKENIZER),
]


def randomize(model, seed):
    """Weights with unit-scale spread (the default init is so small that every logit would be ~0)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=generator))
            elif name.endswith("bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=generator))
            else:
                p.copy_(torch.randn(p.shape, generator=generator) / (p.shape[-1] ** 0.5) * 1.5)


def shortest(values):
    return [float(np.format_float_positional(np.float32(v), unique=True, trim="-")) for v in values]


def golden_for(folder, name):
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids = tokenizer(PROMPT)["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].to(torch.float32).numpy()
    greedy, margins, sequence = [], [], list(ids)
    with torch.no_grad():
        for _ in range(N_NEW):  # no cache: a full forward per step, the simplest reference
            step = model(input_ids=torch.tensor([sequence])).logits[0, -1].to(torch.float32)
            top = torch.topk(step, 2)
            greedy.append(int(torch.argmax(step)))
            margins.append(float(top.values[0] - top.values[1]))
            sequence.append(greedy[-1])
    chats = []
    for chat in CHATS:
        text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        chat_ids = tokenizer.apply_chat_template(chat, tokenize=True, add_generation_prompt=True,
                                                 return_dict=True)["input_ids"]
        assert chat_ids == tokenizer(text, add_special_tokens=False)["input_ids"]
        chats.append({"messages": chat, "text": text, "ids": chat_ids})
    raw = tokenizer.backend_tokenizer
    for t in [PROMPT] + TOKENIZER_STRINGS:  # transformers' wrapper adds nothing to the tokenizer.json pipeline
        assert tokenizer(t, add_special_tokens=False)["input_ids"] == raw.encode(t, add_special_tokens=False).ids
    return {
        "architecture": model.config.architectures[0],
        "prompt_ids": ids,
        "final_logits": shortest(logits[-1]),
        "argmax_per_position": [int(i) for i in logits.argmax(axis=1)],
        "greedy": {"ids": greedy, "margin_top1_top2": shortest(margins)},
        "tokenizer": [{"text": t, "ids": tokenizer(t)["input_ids"], "decoded": tokenizer.decode(tokenizer(t)["input_ids"])}
                      for t in TOKENIZER_STRINGS],
        "chats": chats,
    }


def permute_for_gguf(w, n_heads):
    """llama.cpp convert_hf_to_gguf LlamaModel.permute: rotate-half rows -> adjacent-pair rows."""
    return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(config):
    """llama.cpp convert_hf_to_gguf LlamaModel.generate_extra_tensors: one frequency divisor per rotated pair."""
    rope = config.rope_parameters
    dim = config.head_dim
    freqs = 1.0 / (rope["rope_theta"] ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    low_wavelen = rope["original_max_position_embeddings"] / rope["low_freq_factor"]
    high_wavelen = rope["original_max_position_embeddings"] / rope["high_freq_factor"]
    factors = []
    for freq in freqs:
        wavelen = 2 * np.pi / freq
        if wavelen < high_wavelen:
            factors.append(1.0)
        elif wavelen > low_wavelen:
            factors.append(rope["factor"])
        else:
            smooth = (rope["original_max_position_embeddings"] / wavelen - rope["low_freq_factor"]) / (
                rope["high_freq_factor"] - rope["low_freq_factor"])
            factors.append(1.0 / ((1 - smooth) / rope["factor"] + smooth))
    return np.array(factors, dtype=np.float32)


def write_rope_scaling_keys(writer, rope):
    """convert_hf_to_gguf.py TextModel.set_gguf_parameters: linear and YaRN as {arch}.rope.scaling.* keys (YaRN's
    attention_factor as yarn_attn_factor, its betas when the config gives them); llama3 goes to rope_freqs."""
    if rope.get("rope_type") == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(rope["factor"])
    elif rope.get("rope_type") == "yarn":
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(rope["factor"])
        writer.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
        if rope.get("attention_factor") is not None:
            writer.add_rope_scaling_yarn_attn_factor(rope["attention_factor"])
        if rope.get("beta_fast") is not None:
            writer.add_rope_scaling_yarn_beta_fast(rope["beta_fast"])
        if rope.get("beta_slow") is not None:
            writer.add_rope_scaling_yarn_beta_slow(rope["beta_slow"])


def write_gguf(folder, path, arch, tok, tok_spec, rope_keys=write_rope_scaling_keys):
    """`rope_keys(writer, rope_parameters)` writes the rope scaling keys (tools/make_yarn_ext_golden.py's own)."""
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    config = model.config
    weights = {k: v.numpy() for k, v in model.state_dict().items()}
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    writer = gguf.GGUFWriter(path, arch)
    writer.add_name(folder.name)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    vocab = tok.get_vocab(with_added_tokens=True)
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda item: item[1])]
    special = set(tok_spec["specials"])
    merges = json.loads(tok.to_str())["model"]["merges"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("llama-bpe" if arch == "llama" else "qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in special else 1 for t in tokens])
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in merges])
    if tok_spec["bos"]:
        writer.add_bos_token_id(vocab[tok_spec["bos"]])
    writer.add_eos_token_id(vocab[tok_spec["eos"]])
    writer.add_add_bos_token(tok_spec["bos"] is not None)
    writer.add_tensor("token_embd.weight", weights["model.embed_tokens.weight"])
    for layer in range(config.num_hidden_layers):
        hf, g = f"model.layers.{layer}.", f"blk.{layer}."
        q, k = weights[hf + "self_attn.q_proj.weight"], weights[hf + "self_attn.k_proj.weight"]
        if arch == "llama":
            q, k = permute_for_gguf(q, config.num_attention_heads), permute_for_gguf(k, config.num_key_value_heads)
        writer.add_tensor(g + "attn_norm.weight", weights[hf + "input_layernorm.weight"])
        writer.add_tensor(g + "attn_q.weight", q)
        writer.add_tensor(g + "attn_k.weight", k)
        writer.add_tensor(g + "attn_v.weight", weights[hf + "self_attn.v_proj.weight"])
        for proj in ("q", "k", "v"):
            if hf + f"self_attn.{proj}_proj.bias" in weights:
                writer.add_tensor(g + f"attn_{proj}.bias", weights[hf + f"self_attn.{proj}_proj.bias"])
        for norm in ("q", "k"):
            if hf + f"self_attn.{norm}_norm.weight" in weights:
                writer.add_tensor(g + f"attn_{norm}_norm.weight", weights[hf + f"self_attn.{norm}_norm.weight"])
        writer.add_tensor(g + "attn_output.weight", weights[hf + "self_attn.o_proj.weight"])
        writer.add_tensor(g + "ffn_norm.weight", weights[hf + "post_attention_layernorm.weight"])
        writer.add_tensor(g + "ffn_gate.weight", weights[hf + "mlp.gate_proj.weight"])
        writer.add_tensor(g + "ffn_up.weight", weights[hf + "mlp.up_proj.weight"])
        writer.add_tensor(g + "ffn_down.weight", weights[hf + "mlp.down_proj.weight"])
    writer.add_tensor("output_norm.weight", weights["model.norm.weight"])
    if not config.tie_word_embeddings:
        writer.add_tensor("output.weight", weights["lm_head.weight"])
    if config.rope_parameters.get("rope_type") == "llama3":
        writer.add_tensor("rope_freqs.weight", llama3_rope_factors(config))
    rope_keys(writer, config.rope_parameters)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


GGUF_ARCH = {"llama3": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}


def main():
    torch.set_num_threads(1)
    OUT.mkdir(parents=True, exist_ok=True)  # README.md there is written by hand
    for name, *_ in CHECKPOINTS:
        shutil.rmtree(OUT / name, ignore_errors=True)
        (OUT / f"{name}.gguf").unlink(missing_ok=True)
    tokenizers_by_kind = {}
    golden = {"schema_version": 1, "prompt": PROMPT,
              "reference": {"implementation": "transformers AutoModelForCausalLM, float32 compute, eager attention, CPU",
                            "versions": {"torch": torch.__version__, "transformers": transformers.__version__}},
              "checkpoints": {}}
    for seed, (name, config_class, fields, dtype, tok_spec) in enumerate(CHECKPOINTS):
        folder = OUT / name
        key = tok_spec.get("pattern") or f"metaspace-{tok_spec['prepend_scheme']}"
        if key not in tokenizers_by_kind:
            tokenizers_by_kind[key] = train_tokenizer(tok_spec)
        tok = tokenizers_by_kind[key]
        bos_id = tok.token_to_id(tok_spec["bos"]) if tok_spec["bos"] else None
        config = config_class(**COMMON, **fields, vocab_size=tok.get_vocab_size(), bos_token_id=bos_id,
                              eos_token_id=tok.token_to_id(tok_spec["eos"]))
        config.architectures = [config_class.__name__.replace("Config", "ForCausalLM")]
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
        randomize(model, 1000 + seed)
        model.to(dtype).save_pretrained(folder)
        save_tokenizer(tok, folder, tok_spec["bos"], tok_spec["eos"], tok_spec["unk"], tok_spec["template"])
        golden["checkpoints"][name] = golden_for(folder, name)
        if name in GGUF_ARCH:
            write_gguf(folder, OUT / f"{name}.gguf", GGUF_ARCH[name], tok, tok_spec)
            golden["checkpoints"][name]["gguf"] = f"{name}.gguf"
        golden["checkpoints"][name]["storage_dtype"] = str(dtype).replace("torch.", "")
        print(name, "logits range", min(golden["checkpoints"][name]["final_logits"]),
              max(golden["checkpoints"][name]["final_logits"]), "greedy", golden["checkpoints"][name]["greedy"]["ids"])
    (OUT / "golden.json").write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
