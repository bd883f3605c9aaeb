#!/usr/bin/env python3
"""A tiny random multimodal Gemma 3 (Gemma3ForConditionalGeneration), written by transformers, with the goldens of
its text part.

Writes tests/fixtures/hf_gemma/gemma3_multimodal/ (config.json with the text model's config nested in
`text_config` and a SigLIP `vision_config`; the text weights under `language_model.model.`, the layout transformers 4
and 5 both save; the vision tower and projector beside them) and tests/fixtures/hf_gemma/golden_multimodal.json: for
the three prompts of make_gemma_checkpoints.py, the ids, the last position's logits and 24 greedy tokens of
Gemma3ForConditionalGeneration on text alone (float32, eager attention, no cache), and for prompt 0 the eager attention
rows of the last prompt positions and the first decode position. The text model is make_gemma_checkpoints.py's
gemma3 (six layers, five local : one global, QK-norm, local RoPE base, linear scaling on the global layer) in
float32, with its tokenizer.
Regenerate (byte-identical with the pinned versions of tools/requirements-golden.txt):
  /tmp/goldenv/bin/python tools/make_gemma3_multimodal_checkpoint.py
"""
import json
import shutil

import torch
import transformers
from transformers import (AutoTokenizer, Gemma3Config, Gemma3ForConditionalGeneration, Gemma3TextConfig,
                          PreTrainedTokenizerFast, SiglipVisionConfig)

from make_gemma_checkpoints import (CHECKPOINTS, COMMON, OUT, PROMPTS, attention_rows, greedy_of,
                                    train_gemma_tokenizer)
from make_synthetic_checkpoints import randomize, shortest


def main():
    torch.set_num_threads(1)
    tok, _ = train_gemma_tokenizer()
    name, _, _, fields, _, _ = CHECKPOINTS[0]
    assert name == "gemma3"
    text = Gemma3TextConfig(**COMMON, **fields, vocab_size=tok.get_vocab_size())
    vision = SiglipVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                                image_size=28, patch_size=14)
    config = Gemma3Config(text_config=text.to_dict(), vision_config=vision.to_dict(), mm_tokens_per_image=4,
                          boi_token_index=2, eoi_token_index=1, image_token_index=3)  # no image in these prompts
    config.architectures = ["Gemma3ForConditionalGeneration"]
    torch.manual_seed(150)
    model = Gemma3ForConditionalGeneration(config)
    randomize(model, 2500)
    folder = OUT / "gemma3_multimodal"
    shutil.rmtree(folder, ignore_errors=True)
    model.save_pretrained(folder)
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>",
                            pad_token="<pad>").save_pretrained(folder)

    model = Gemma3ForConditionalGeneration.from_pretrained(folder, dtype=torch.float32,
                                                           attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompts = []
    for index, prompt in enumerate(PROMPTS):
        ids = tokenizer(prompt)["input_ids"]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0].to(torch.float32).numpy()
        greedy, margins = greedy_of(model, ids)
        entry = {"text": prompt, "ids": ids, "final_logits": shortest(logits[-1]),
                 "greedy": {"ids": greedy, "margin_top1_top2": shortest(margins)}}
        if index == 0:
            positions, maps = attention_rows(model, ids, greedy[0])
            entry["attention"] = {"positions": positions, "rows": maps}
        prompts.append(entry)
    golden = {"schema_version": 1,
              "reference": {"implementation": "transformers Gemma3ForConditionalGeneration on text alone, float32 "
                                              "compute, eager attention, CPU",
                            "versions": {"torch": torch.__version__, "transformers": transformers.__version__}},
              "checkpoints": {"gemma3_multimodal": {"architecture": "Gemma3ForConditionalGeneration",
                                                    "layer_types": list(model.config.text_config.layer_types),
                                                    "sliding_window": model.config.text_config.sliding_window,
                                                    "prompts": prompts}}}
    print("gemma3_multimodal", [len(p["ids"]) for p in prompts], "greedy", prompts[0]["greedy"]["ids"][:8],
          "min margin", min(min(p["greedy"]["margin_top1_top2"]) for p in prompts))
    (OUT / "golden_multimodal.json").write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
