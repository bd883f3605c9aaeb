#!/usr/bin/env python3
"""Generate one golden fixture per kvpress press: which prompt tokens NVIDIA kvpress's own press keeps.

The catalogue of issue 36: for each score-based press that needs no trained weights, the press instance
(PyPI kvpress 0.5.5) compresses the prefill cache of SmolLM2-135M-Instruct (the Q4_1 GGUF kvscope loads,
dequantized to float32 by transformers, eager attention, CPU) on the three prompts of sample_data/prompts at
compression ratios 0.25, 0.5 and 0.75, and this script records, per layer and KV head, the original positions
of the entries it kept, plus the near-tie bands a second implementation may resolve otherwise. Output:
tests/fixtures/kvpress_<press>/golden.json, read by tests/python/test_kvpress_parity.py.

How to run (from the repository root; the venv as in tools/make_kvpress_knorm_golden.py):

    /work/kvpress-venv/bin/python tools/make_kvpress_goldens.py [--press keydiff ...]

The observation machinery (PressObserver on the press's bound score/compress, kept rows recovered from the
keys compress returned by bitwise equality, the cache checked after the forward, the tokenizer conventions)
is tools/make_kvpress_knorm_golden.py's, imported from there; only the choice of presses and the
score-agnostic tie bands are new here. Per case:
  * kept[layer][kv_head]: sorted kept positions (the keys compress returned, matched in its input), which
    must equal scores.topk(n_kept) as kvpress computes it.
  * near_boundary: per (layer, kv_head) whose band holds kept and evicted positions, the positions whose
    score lies within `band_tol` of the midpoint between the n_kept-th and (n_kept+1)-th score, as
    [layer, kv_head, [[position, score, kept 1|0], ...]]. band_tol = NEAR_REL * max(|midpoint|, std of the
    head's scores): scores of any sign and scale (z-scores, softmax probabilities, ranks). Exact ties (LagKV's
    per-partition ranks, RandomPress never) are inside by construction.
  * f64_kept_differs: heads where the same press on the model cast to float64 keeps another set, and
    f64_outside_band: those whose difference is not inside the band (float noise larger than NEAR_REL; a
    parity test must then not expect equality there: they are listed so that it can say so).
Besides the ported files (PRESSES), the presses kvscope has as built-ins (BUILTINS: the golden names `policy` and
its parameters instead of `policy_file`; PyramidKVPress keeps a count per layer, `n_kept_per_layer`) and kvpress's
wrappers (WRAPPERS: AdaKVPress, ChunkKVPress, CriticalKVPress around a press above, kvscope's `selection=`; run with
sdpa attention, see run_wrapper_case; AdaKV's heads keep different counts, `n_kept_per_layer_head`; CriticalAdaKVPress,
kvscope's `selection=criticaladakv`, likewise).
RandomPress draws torch.rand from a torch.Generator seeded with `seed` on every call (so every layer keeps the
same positions: `same_in_every_layer`); examples/policies/random_press.py replays that generator bit-exactly.
LeverageScorePress and CompactorPress draw a Gaussian sketch per layer from torch's global generator without a
seed: here torch.manual_seed(TORCH_SEED) runs right before each forward (`torch_seed` in the case), so layer l's
sketch is the l-th block of torch.randn draws after that seed, which examples/policies/leverage.py replays in
numpy (examples/policies/_torch_cpu_rng.py) (float32 rounding and torch's vectorised log/cos differ by ~1e-6: near ties only). Their float64 run draws
other numbers (randn in float64), so they have no float64 cross-check.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")

import numpy as np
import torch

from make_kvpress_knorm_golden import (PressObserver, check_tokenizer_against_golden, dump, encode, f32,
                                       gguf_add_bos, match_rows, pkg_version)
from reference_model import DEFAULT_MODEL, REPO_ROOT, load_reference, sha256_file

PROMPT_FILES = [
    "sample_data/prompts/lighthouse_story.txt",
    "sample_data/prompts/heat_pump.txt",
    "sample_data/prompts/bakery_notes.txt",
]
RATIOS = [0.25, 0.5, 0.75]
NEAR_REL = 1e-4
SCHEMA_VERSION = 1

# name -> (kvpress class, list of (press kwargs, ratios)), the policy file examples/policies/<policy>.py and the
# file parameters that correspond to the kwargs
PRESSES = {
    "random": ("RandomPress", [({"seed": 0}, RATIOS)], "random_press", {"seed": "seed"}),
    "observed_attention": ("ObservedAttentionPress", [({}, RATIOS)], "observed_attention", {}),
    "keydiff": ("KeyDiffPress", [({}, RATIOS)], "keydiff", {}),
    # the default lag_size 128 needs n_sink + 256 tokens before it scores at all (shorter prompts keep the sinks
    # and the most recent tokens): the sample prompts (154-162 tokens) test that path at one ratio, lag_size 32
    # the scoring at 0.25 and 0.5; at 0.75 lag_size 32 would keep fewer tokens than its always-kept sinks and
    # last partition (all exactly tied: a test of nothing but the tie, and 200 KB of bands), lag_size 16 does not
    "lagkv": ("LagKVPress", [({}, [0.5]), ({"lag_size": 32}, [0.25, 0.5]), ({"lag_size": 16}, [0.75])], "lagkv",
              {"lag_size": "lag_size", "n_sink": "n_sink"}),
    "expected_attention": ("ExpectedAttentionPress", [({}, RATIOS)], "expected_attention", {}),
    "cur": ("CURPress", [({}, RATIOS)], "cur", {}),
    "non_causal_attn": ("NonCausalAttnPress", [({}, RATIOS)], "non_causal_attn", {}),
    # these two draw their Gaussian sketch from torch's global generator, unseeded; the golden seeds it with
    # torch.manual_seed(TORCH_SEED) right before the forward, and the files replay that generator (their `seed`)
    "leverage": ("LeverageScorePress", [({}, RATIOS)], "leverage", {}),
    "compactor": ("CompactorPress", [({}, RATIOS)], "compactor", {}),
    # examples/policies/key_norm.py; tests/fixtures/kvpress_knorm/knorm_golden.json (0.5 and 0.75, its own
    # generator) stays for the C++ test that reads it
    "knorm": ("KnormPress", [({}, RATIOS)], "key_norm", {}),
    # CAPKV: ExpectedAttention's query anchor (averaged RoPE) and a leverage score of the values
    "cap": ("CapPress", [({}, RATIOS)], "cap", {}),
}
SEEDED = {"leverage", "compactor"}

# kvpress presses that are kvscope built-ins: name -> (kvpress class, variants as above, the built-in policy, how
# press kwargs map to its parameters, and the parameters that make it the press where kvscope's defaults differ
# (kvpress's SnapKV window 64 and kernel 5, not the paper's 32 and 7; TOVA's one token set per layer; PyramidKV's
# budget arithmetic). A variant's kwargs are given to both, mapped.
PADDED = {"SnapKVPress", "PyramidKVPress", "TOVAPress"}
SNAPKV_PARAMS = {"window": 64, "kernel": 5, "pooling": "avg", "group_reduce": "mean"}
BUILTINS = {
    "streaming_llm": ("StreamingLLMPress", [({}, RATIOS)], "streaming_llm", {"n_sink": "sinks"}, {"sinks": 4}),
    "snapkv": ("SnapKVPress", [({}, RATIOS), ({"window_size": 16}, RATIOS)], "snapkv",
               {"window_size": "window", "kernel_size": "kernel"}, SNAPKV_PARAMS),
    "tova": ("TOVAPress", [({}, RATIOS)], "tova", {}, {"heads": "layer"}),
    # kvpress's default window 64 makes the pyramid fall back to a uniform round(n (1 - R)) on these prompts at
    # R = 0.25 and 0.75 (its bottom layer would need more than the prompt, or its top less than the window);
    # window 16 builds the pyramid at 0.25 and 0.5
    "pyramidkv": ("PyramidKVPress", [({}, RATIOS), ({"window_size": 16}, RATIOS)], "pyramidkv",
                  {"window_size": "window", "kernel_size": "kernel", "beta": "beta"},
                  {**SNAPKV_PARAMS, "beta": 20, "pyramid_arithmetic": "kvpress"}),
}

# kvpress's wrappers around a scorer press, as kvscope's `selection` parameter of any scored policy: name ->
# (wrapper class, wrapper kwargs, inner press as in PRESSES or BUILTINS, the kvscope spec's extra parameters).
# kvpress runs both with attn_implementation "sdpa" (AdaKVPress refuses eager; ChunkKVPress refuses attention
# weights): SnapKVPress then computes its window attention itself.
WRAPPERS = {
    "adakv_snapkv": ("AdaKVPress", {}, "snapkv", {"selection": "adakv", "alpha_safeguard": 0.2}),
    "adakv_knorm": ("AdaKVPress", {}, "knorm", {"selection": "adakv", "alpha_safeguard": 0.2}),
    "adakv_expected_attention": ("AdaKVPress", {}, "expected_attention", {"selection": "adakv",
                                                                          "alpha_safeguard": 0.2}),
    "chunkkv_snapkv": ("ChunkKVPress", {}, "snapkv", {"selection": "chunkkv", "chunk_length": 20}),
    "chunkkv_knorm": ("ChunkKVPress", {}, "knorm", {"selection": "chunkkv", "chunk_length": 20}),
    # kvscope's snapkv scores by the window's attention summed over its 64 queries, kvpress's SnapKVPress by their
    # mean: CriticalKV adds epsilon before it rescales, so the same ranking needs epsilon x 64
    "criticalkv_snapkv": ("CriticalKVPress", {}, "snapkv", {"selection": "criticalkv", "first_stage_ratio": 0.5,
                                                            "critical_epsilon": 0.0064}),
    "criticalkv_knorm": ("CriticalKVPress", {}, "knorm", {"selection": "criticalkv", "first_stage_ratio": 0.5,
                                                          "critical_epsilon": 0.0001}),
}
# kvpress's CriticalAdaKVPress: AdaKV's head budgets, each head filled by CriticalKV's two stages (stage 1 at
# least the safeguard): kvscope's selection=criticaladakv, with both wrappers' parameters
WRAPPERS.update({
    "criticaladakv_knorm": ("CriticalAdaKVPress", {}, "knorm", {"selection": "criticaladakv", "alpha_safeguard": 0.2,
                                                               "first_stage_ratio": 0.5, "critical_epsilon": 0.0001}),
    "criticaladakv_snapkv": ("CriticalAdaKVPress", {}, "snapkv", {"selection": "criticaladakv", "alpha_safeguard": 0.2,
                                                                 "first_stage_ratio": 0.5,
                                                                 "critical_epsilon": 0.0064}),
})
# At R = 0.75 the budget (38-40) is below SnapKV's window of 64: kvscope keeps the most recent entries of the
# protected window, CriticalKVPress ranks the window's entries (all max + 1) by their |W_o v|, a documented
# difference that a parity case would only restate.
WRAPPER_RATIOS = {"criticalkv_snapkv": [0.25, 0.5], "criticaladakv_snapkv": [0.25, 0.5]}
TORCH_SEED = 0

# kvpress's PerLayerCompressionPress(press, compression_ratios) around a press of PRESSES or BUILTINS: kvscope's
# `allocation=per_layer,layer_ratios=r0/r1/...` with that press's policy. One list of ratios (the model's 30
# layers: the three ratios of the other goldens and their neighbours, so that every layer keeps another count
# than its neighbours), on the three prompts; a case's compression_ratio is the list's mean, as the press's own
# `compression_ratio` property states it (the parity test passes it as --compression-ratio, which per_layer
# does not use).
LAYER_RATIOS = [0.1, 0.25, 0.5, 0.75, 0.9, 0.3] * 5
PER_LAYER = {"per_layer_knorm": "knorm", "per_layer_snapkv": "snapkv"}

# kvpress's ComposedPress([first(R1), then(R2)]) as kvscope's `compose:first=...,then=...,then_ratio=R2` at
# --compression-ratio R1: name -> (first, then, R2, the R1s[, the second press's kwargs]), presses of BUILTINS or
# PRESSES. The second press scores the first's kept keys, in the order the first's scores.topk returned them; an
# attention-based second press (SnapKVPress) recomputes its window attention over them (run with sdpa: with eager
# attention kvpress would hand it the layer's attention weights over every key, whose shape does not fit). kvscope's
# second scores that view (core/policy/compose_subset.h); one that does not read attention (KnormPress) scores every
# entry and ranks the kept ones, the same for a score of each entry alone. SnapKV's window (64) is above the first
# stage's budget at R1 = 0.75 (all max + 1, exact ties): left out, as for criticalkv_snapkv; a second SnapKV's window
# must stay below what it keeps (n_kept above the window: the padded window would otherwise tie), hence window 16 where
# it keeps 38-60 entries.
COMPOSED = {
    "composed_snapkv_knorm": ("snapkv", "knorm", 0.5, [0.25, 0.5]),
    "composed_knorm_snapkv": ("knorm", "snapkv", 0.25, [0.25], {}),
    "composed_knorm_snapkv16": ("knorm", "snapkv", 0.5, [0.5], {"window_size": 16}),
    "composed_snapkv_snapkv16": ("snapkv", "snapkv", 0.5, [0.25], {"window_size": 16}),
}
ATTENTION_PRESSES = {"SnapKVPress"}  # second presses that recompute attention: the golden runs them with sdpa
# Such a press scores the first's keys in their topk order (SnapKV pools neighbours in it, its window is the last
# handed on): two of the first's kept scores within ORDER_NEAR_REL (relative) of each other are float noise apart (on
# these prompts, layer 0's repeated tokens, whose keys differ only by RoPE: KnormPress's norms tie), so the two engines
# may hand them on in either order, and the head is listed in stage_ties ("first press order"). SnapKV's padded window
# ties exactly in both, in torch's order, which kvscope replays.
ORDER_NEAR_REL = 1e-6


# kvpress's BlockPress(press, block_size): one exact forward pass, then each layer's entries scored in blocks (the first
# n_kept kept, each next block_size scored with the kept ones, top n_kept kept). name -> (inner press of PRESSES,
# block_size, the kvscope spec's parameters the parity test holds to kvpress's set, the alternatives it only
# measures). block_size 16: with kvpress's default 128 the sample prompts (154-162 tokens) are one block after the
# first n_kept at every ratio, i.e. the inner press itself.
BLOCK = {
    # KnormPress scores each entry alone: streaming top-k over blocks is the global top-k, i.e. KnormPress, which is
    # kvscope's one-pass key_norm.py; kvscope's block=16 (a real chunked prefill) is measured beside it (block_scoring=16
    # was measured once: the same sets as one pass)
    "block_knorm": ("knorm", 16, {}, [{"block": 16}]),
    # KeyDiffPress scores against the mean key of the entries it is given: the blocks change every score. kvscope's
    # block_scoring=16 scores one exact pass in BlockPress's blocks; its one-pass keydiff.py and block=16 (a real
    # chunked prefill) are measured
    "block_keydiff": ("keydiff", 16, {"block_scoring": 16}, [{}, {"block": 16}]),
    # ExpectedAttentionPress reads the hidden states, which BlockPress gathers per KV head (block_scoring.h), and
    # averages RoPE from the subset's query count
    "block_expected_attention": ("expected_attention", 16, {"block_scoring": 16}, [{}]),
}
# Goldens whose kvscope spec may differ after a near tie at some block (stage_ties, min_exact_share as DecodingPress's).
# At DECODE_NEAR_REL every layer of ExpectedAttention has such a block (30 layers x up to 8 blocks x 3 heads), so the
# share of exact heads is what holds kvscope (measured 86 to 90 of 90 per case)
STAGED_BLOCK = {"block_expected_attention"}
BLOCK_MIN_EXACT_SHARE = 0.9
# Cases of a block golden when not every prompt and ratio: kvscope projects each block's hidden-state rows anew (~0.5 s
# of Python per block and layer set), so ExpectedAttention is held on one prompt at 0.25 (3 blocks; all nine cases
# measured once: 90 of 90 heads exact in seven, 86 + 1 band + 3 stage ties and 87 + 3 in heat_pump's 0.5 and 0.75)
BLOCK_CASES = {"block_expected_attention": ([1], [0.25])}

# kvpress's ChunkPress(press, chunk_length): the prefill's entries cut into chunks of chunk_length, each scored by the
# press alone (its slice of the keys, values and hidden states) and keeping max(1, int(len (1 - R))) of its own:
# kvscope's `selection=chunk,chunk_length=L`. name -> (inner press of PRESSES, chunk_length). KeyDiffPress scores
# against the mean key of what it is given, so every chunk changes the scores; chunk_length 32 (kvpress's default 1024
# is one chunk on the sample prompts, i.e. the press itself).
CHUNK = {"chunk_keydiff": ("keydiff", 32)}
# kvpress's EntropyGatedChunkKVPress(press, chunk_length, low_entropy_chunk_length): kvscope's
# `selection=entropy_chunkkv`. name -> (inner press of PRESSES, chunk_length, low_entropy_chunk_length) (kvpress's
# defaults 10 and 4).
ENTROPY_CHUNKKV = {"entropy_chunkkv_knorm": ("knorm", 10, 4)}
# The gate's steps (chunk means, medians, entropies, top-k within a chunk, the top-up) follow one another, so a tie
# anywhere may change the whole layer: a layer is excused (stage_ties) only where its float32 head-summed scores hold
# a kept and an evicted entry within this (relative to the largest |score|): float32 rounding, i.e. exact ties such
# as layer 0's repeated tokens, whose key norms are equal.
ENTROPY_TIE_REL = 1e-6

# kvpress's DecodingPress(base_press, compression_interval, target_size): the prefill is not compressed; every
# compression_interval decode steps each layer's cache is compressed to target_size by the press, which scores the
# hidden states of the decode steps since the last compression (its buffer). kvscope's decode_evict=true at --budget
# target_size evicts at every decode step (and after the prefill when the prompt is longer than the budget, unless
# prefill_evict=false), decode_interval=N every N-th, on the buffered steps' rows. name -> (inner press of PRESSES,
# the inner press's kwargs (also the file's parameters), [(interval, target, the kvscope spec's parameters held to
# kvpress's set or None, alternatives only measured)]), N_DECODE greedy decode steps. A target is tokens, or
# "prompt" (the prompt's own length) or "prompt+K".
DECODING = {
    "decoding_knorm": ("knorm", {}, [(1, "prompt", {"decode_evict": "true"}, []),
                                     (8, "prompt", {"decode_evict": "true", "decode_interval": 8},
                                      [{"decode_evict": "true"}])]),
    # ExpectedAttentionPress reads the hidden states (its query statistics): the buffer's rows matter at interval 8,
    # and the press averages RoPE from its query count, the buffer's length. n_sink=0: kvpress's default 4 leaves
    # no query of a one-row buffer (interval 1: NaN scores). Target 96 is below every prompt (154-162 tokens):
    # DecodingPress keeps the prefill whole (kvscope's prefill_evict=false; the prefill evicted to 96 instead was
    # measured once, docs/policies.md, and is left out of the parity test: a run that scores its prefill cannot share
    # the other runs' prefill, ~2 s each); prompt+12 is above it: the compressions at steps 1-12 (interval 1) or 8
    # (interval 8) keep everything, and at interval 8 the one at step 8 still empties the buffer, so step 16 scores 8
    # rows, not 16.
    "decoding_expected_attention": ("expected_attention", {"n_sink": 0}, [
        (1, 96, {"decode_evict": "true", "prefill_evict": "false", "n_sink": 0}, []),
        (8, 96, {"decode_evict": "true", "decode_interval": 8, "prefill_evict": "false", "n_sink": 0}, []),
        (1, "prompt+12", {"decode_evict": "true", "prefill_evict": "false", "n_sink": 0}, []),
        (8, "prompt+12", {"decode_evict": "true", "decode_interval": 8, "prefill_evict": "false", "n_sink": 0}, []),
        # hidden_states_buffer_size 3 (kvscope's decode_buffer): at interval 8 every compression scores the last 3
        # buffered rows and its own, 4, not 8
        (8, 96, {"decode_evict": "true", "decode_interval": 8, "prefill_evict": "false", "n_sink": 0,
                 "decode_buffer": 3}, [], {"hidden_states_buffer_size": 3}),
    ]),
    # Attention-based presses (kvscope built-ins, BUILTINS' parameters), run with sdpa attention, kvpress's usual: then
    # no attention weights reach the press, and SnapKVPress recomputes its window's attention from the buffered hidden
    # states (the last window_size rows, re-projected by q_proj and all rotated with the compressing step's own RoPE
    # angles, position_embeddings of that one-token forward) against the whole cache under a causal mask; kvscope's
    # snapkv does the same under decode_interval > 1 (docs/policies.md). SnapKVPress asserts the buffer holds more
    # rows than its window: interval 1 (one row) fails for any window, so only interval 8 with window 4.
    "decoding_snapkv": ("snapkv", {"window_size": 4}, [
        (8, 96, {"decode_evict": "true", "decode_interval": 8, "prefill_evict": "false"}, []),
        (8, "prompt+12", {"decode_evict": "true", "decode_interval": 8, "prefill_evict": "false"}, []),
    ]),
    # TOVAPress scores by the last buffered row alone (its window of one: the compressing step's own query), the
    # attention averaged over every head of the layer, the step's own entry kept (max + 1)
    "decoding_tova": ("tova", {}, [
        (1, 96, {"decode_evict": "true", "prefill_evict": "false"}, []),
        (8, 96, {"decode_evict": "true", "decode_interval": 8, "prefill_evict": "false"}, []),
        (1, "prompt+12", {"decode_evict": "true", "prefill_evict": "false"}, []),
        (8, "prompt+12", {"decode_evict": "true", "decode_interval": 8, "prefill_evict": "false"}, []),
    ]),
}
# kvpress's PrefillDecodingPress(prefilling_press=P(compression_ratio=R), decoding_press=DecodingPress(P, N, T)) with
# T the prefill's own count int(n (1 - R)) (target "prefill"): the prefill compressed to T, then every N decode steps
# back to T. kvscope: the press's policy with decode_evict=true (and decode_interval=N) at --budget T, prefill_evict
# left true. name -> R; its DECODING entry gives the press and the intervals.
PREFILL_DECODING = {"prefill_decoding_knorm": 0.5}
DECODING["prefill_decoding_knorm"] = ("knorm", {}, [(1, "prefill", {"decode_evict": "true"}, []),
                                                    (8, "prefill", {"decode_evict": "true", "decode_interval": 8}, [])])
# DecodingPress goldens run with sdpa attention (the others with eager, as the prefill goldens)
DECODING_SDPA = {"decoding_snapkv", "decoding_tova"}
N_DECODE = 24
# A decode token's key is each engine's own computation over a context that decoding keeps changing, and each of the
# 24 (interval 1) compressions is a new boundary that an entry never returns from: a head whose boundary at any
# compression lies within DECODE_NEAR_REL (relative) is listed in stage_ties. On these prompts every differing head
# is such a head at 1e-3 (at 1e-4, 4 to 8 of 90 are not), but most heads are, so the golden also states the share of
# heads kvscope must keep exactly (MIN_EXACT_SHARE; measured 74 to 88 of 90)
DECODE_NEAR_REL = 1e-3
MIN_EXACT_SHARE = 0.75


@torch.no_grad()
def run_press(model, ids, cls_name, kwargs, ratio, torch_seed=None, layer_ratios=None):
    import kvpress
    from transformers import DynamicCache

    press = getattr(kvpress, cls_name)(compression_ratio=ratio, **kwargs)
    obs = PressObserver(press)  # PerLayerCompressionPress calls the inner press's compress: observed there
    if layer_ratios is not None:
        press = kvpress.PerLayerCompressionPress(press=press, compression_ratios=list(layer_ratios))
    cache = DynamicCache()
    if torch_seed is not None:
        torch.manual_seed(torch_seed)
    with press(model):
        model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
    return obs, cache


@torch.no_grad()
def run_case(model, ids, cls_name, kwargs, ratio, torch_seed=None, layer_ratios=None):
    """One press (or PerLayerCompressionPress around it, with `layer_ratios`) on one prefill."""
    from kvpress.utils import compute_n_kept

    n_layer = model.config.num_hidden_layers
    q_len = len(ids)
    n_kept_ratio = compute_n_kept(q_len, ratio)
    assert n_kept_ratio == max(1, int(q_len * (1 - ratio))) and 0 < n_kept_ratio < q_len
    obs, cache = run_press(model, ids, cls_name, kwargs, ratio, torch_seed, layer_ratios)
    assert sorted(obs.records) == list(range(n_layer)), "press did not run on every layer"
    kept, near, gaps, per_layer = [], [], [], []
    for layer in range(n_layer):
        rec = obs.records[layer]
        k_in, v_in, k_out, v_out, s = (rec[n] for n in ("keys_in", "values_in", "keys_out", "values_out", "scores"))
        n_kv = k_in.shape[1]
        n_kept = k_out.shape[2]  # PyramidKVPress chooses per layer; every other press keeps n_kept_ratio
        per_layer.append(n_kept)
        want = n_kept_ratio if layer_ratios is None else compute_n_kept(q_len, layer_ratios[layer])
        assert (n_kept == want or cls_name == "PyramidKVPress") and s.shape == (1, n_kv, q_len), \
            (k_out.shape, s.shape)
        cl = cache.layers[layer]
        assert torch.equal(cl.keys, k_out) and torch.equal(cl.values, v_out)
        layer_kept = []
        for h in range(n_kv):
            pos = match_rows(k_out[0, h], k_in[0, h])
            assert torch.equal(v_out[0, h], v_in[0, h][pos]), "values gathered elsewhere"
            assert sorted(pos) == sorted(s[0, h].topk(n_kept).indices.tolist())
            sh = s[0, h].double()
            srt = torch.sort(sh, descending=True).values
            gaps.append(float(srt[n_kept - 1] - srt[n_kept]))
            mid = float(srt[n_kept - 1] + srt[n_kept]) / 2
            # SnapKV, PyramidKV and TOVA pad their protected window with max + 1, which would dominate the std
            body = sh[sh != sh.max()] if cls_name in PADDED else sh
            tol = NEAR_REL * max(abs(mid), float(body.std()))
            band = torch.nonzero((sh - mid).abs() <= tol).flatten().tolist()
            kept_set = set(pos)
            if any(p in kept_set for p in band) and any(p not in kept_set for p in band):
                band.sort(key=lambda p: (-float(sh[p]), p))
                near.append([layer, h, [[p, f32(sh[p]), int(p in kept_set)] for p in band]])
            layer_kept.append(sorted(pos))
        kept.append(layer_kept)
    return {
        "compression_ratio": ratio,
        "q_len": q_len,
        "n_kept": n_kept_ratio,
        **({"n_kept_per_layer": per_layer} if any(n != n_kept_ratio for n in per_layer) else {}),
        "kept": kept,
        "n_exact_ties": sum(1 for g in gaps if g == 0.0),
        "near_boundary": near,
    }


@torch.no_grad()
def model_record(args, model_sha, cfg):
    """The golden's "model" field: the GGUF file and the shapes the parity test checks before comparing."""
    return {"file": args.model.name, "sha256": model_sha, "n_layer": cfg.num_hidden_layers,
            "n_head": cfg.num_attention_heads, "n_head_kv": cfg.num_key_value_heads,
            "head_dim": cfg.hidden_size // cfg.num_attention_heads}


def reference_record(args, n_tok_checked, **how):
    """The golden's "reference" field: the versions that made it, and how the model was loaded and pressed."""
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__, "kvpress": pkg_version("kvpress"),
            "numpy": np.__version__, "torch_threads": args.threads,
            "tokenizer_checked_against_golden_prompts": n_tok_checked, **how}


def run_wrapper_case(model, ids, wrapper_cls, wrapper_kwargs, inner_cls, inner_kwargs, ratio):
    """kvpress's wrapper around the inner press on one prefill: kept positions per (layer, KV head), the inner
    press's scores, and the near-tie band at the wrapper's own boundary (AdaKV: the layer-wide one after the
    safeguard; ChunkKV: between the last kept and the first evicted chunk)."""
    import kvpress
    from kvpress.utils import compute_n_kept
    from transformers import DynamicCache

    inner = getattr(kvpress, inner_cls)(compression_ratio=ratio, **inner_kwargs)
    press = getattr(kvpress, wrapper_cls)(press=inner, **wrapper_kwargs)
    records = {}
    orig_score, orig_compress = inner.score, press.compress

    def score(module, *a):
        s = orig_score(module, *a)
        records.setdefault(module.layer_idx, {})["scores"] = s.detach().clone()  # AdaKV scatters into it
        return s

    def compress(module, hidden_states, keys, values, attentions, kwargs):
        rec = records.setdefault(module.layer_idx, {})
        rec["keys_in"] = keys.detach().clone()
        k_out, v_out = orig_compress(module, hidden_states, keys, values, attentions, kwargs)
        rec["keys_out"] = k_out.detach().clone()
        masked = getattr(module, "masked_key_indices", None)
        rec["masked"] = None if masked is None else [t.tolist() for t in masked]
        if wrapper_cls == "CriticalAdaKVPress":  # its stage 2's |W_o v|_1, to recompute the final scores' bands
            rec["norm"] = kvpress.presses.criticalkv_press.CriticalKVPress.vwl1norm(values, module).detach().clone()
        return k_out, v_out

    inner.score = score
    press.compress = compress
    if wrapper_cls == "CriticalKVPress":  # a ScorerPress itself: its own (rescaled) scores decide
        orig_final = press.score

        def final(module, *a):
            s = orig_final(module, *a)
            records.setdefault(module.layer_idx, {})["final"] = s.detach().clone()
            return s

        press.score = final
    q_len = len(ids)
    n_kept = compute_n_kept(q_len, ratio)
    model.set_attn_implementation("sdpa")
    try:
        with press(model):
            model(input_ids=torch.tensor([ids]), past_key_values=DynamicCache(), use_cache=True)
    finally:
        model.set_attn_implementation("eager")
    n_layer = model.config.num_hidden_layers
    assert sorted(records) == list(range(n_layer)), "press did not run on every layer"
    kept, near, stage_ties = [], [], []

    def stage_tie(layer, h, scores, k, stage):
        """A head whose first-stage boundary (AdaKV's safeguard, CriticalKV's stage 1) is a near tie in kvpress's
        own scores: which of the tied entries that stage takes is torch.topk's order, and the entries it leaves
        compete again in the next stage, so the whole kept set may differ (not only inside a band)."""
        if not 0 < k < scores.numel():
            return
        srt = torch.sort(scores, descending=True).values
        a, b = float(srt[k - 1]), float(srt[k])
        body = scores[scores != scores.max()] if inner_cls in PADDED else scores
        if abs(a - b) <= NEAR_REL * max(abs(a + b) / 2, float(body.std())):
            stage_ties.append([layer, h, stage])

    for layer in range(n_layer):
        rec = records[layer]
        s = rec["scores"][0].double()  # (n_kv, q_len)
        n_kv = s.shape[0]
        # entries an inner SnapKV pads with max + 1 (its window): left out of the std that scales the band
        padded = s == s.max() if inner_cls in PADDED else torch.zeros_like(s, dtype=torch.bool)
        if wrapper_cls == "CriticalAdaKVPress":  # AdaKV's head budgets, then per head CriticalKV's two stages
            _, heads, seqs = rec["masked"]
            pruned = [set() for _ in range(n_kv)]
            for h, j in zip(heads, seqs):
                pruned[h].add(j)
            layer_kept = [sorted(set(range(q_len)) - pruned[h]) for h in range(n_kv)]
            assert sum(len(k) for k in layer_kept) == n_kv * n_kept
            s32 = rec["scores"][0].clone()
            top = torch.finfo(s32.dtype).max
            n_safe = max(1, int(n_kept * press.alpha_safeguard))
            safe = s32.topk(n_safe, dim=-1).indices
            s32.scatter_(-1, safe, top)
            flat = torch.sort(s32.double().flatten(), descending=True).values
            hi, lo = float(flat[n_kv * n_kept - 1]), float(flat[n_kv * n_kept])
            body = s[torch.isfinite(s) & ~padded]
            if hi < top and abs(hi - lo) <= NEAR_REL * max(abs(hi + lo) / 2, float(body.std())):
                for h in range(n_kv):  # the heads' budgets end on a near tie: any head may keep another count
                    stage_ties.append([layer, h, "head budgets"])
            budgets = [len(k) for k in layer_kept]
            for h in range(n_kv):
                stage_tie(layer, h, s[h], n_safe, "safeguard")
                first = int(budgets[h] * press.first_stage_ratio)
                stage_tie(layer, h, s[h], max(first, n_safe), "first stage")
                fin = s32[h].clone()
                fin[fin.topk(first).indices] = top
                fin = ((fin + press.epsilon) * rec["norm"][0, h]).double()
                srt = torch.sort(fin, descending=True).values
                k = budgets[h]
                if k >= q_len:
                    continue
                a, b = float(srt[k - 1]), float(srt[k])
                mid = (a + b) / 2 if math.isfinite(a) and a < top else b
                fbody = fin[torch.isfinite(fin) & (fin < top * 1e-3) & ~padded[h]]
                tol = NEAR_REL * max(abs(mid), float(fbody.std()) if fbody.numel() > 1 else 0.0)
                band = torch.nonzero((fin - mid).abs() <= tol).flatten().tolist()
                kept_set = set(layer_kept[h])
                if any(p in kept_set for p in band) and any(p not in kept_set for p in band):
                    entries = sorted([[p, f32(fin[p]), int(p in kept_set)] for p in band], key=lambda e: (-e[1], e[0]))
                    near.append([layer, h, entries])
            kept.append(layer_kept)
            continue
        if wrapper_cls == "AdaKVPress":
            _, heads, seqs = rec["masked"]
            pruned = [set() for _ in range(n_kv)]
            for h, j in zip(heads, seqs):
                pruned[h].add(j)
            layer_kept = [sorted(set(range(q_len)) - pruned[h]) for h in range(n_kv)]
            assert sum(len(k) for k in layer_kept) == n_kv * n_kept
            n_safe = max(1, int(n_kept * wrapper_kwargs.get("alpha_safeguard", 0.2)))
            joint = s.clone()
            for h in range(n_kv):
                joint[h, s[h].topk(n_safe).indices] = float("inf")
                stage_tie(layer, h, s[h], n_safe, "safeguard")
            flat = torch.sort(joint.flatten(), descending=True).values
            hi, lo = float(flat[n_kv * n_kept - 1]), float(flat[n_kv * n_kept])
            if inner_cls in PADDED and lo == float(s.max()):  # the layer's budget ends inside the padded window
                for h in range(n_kv):
                    stage_ties.append([layer, h, "window"])
            finite = joint[torch.isfinite(joint) & ~padded]
            values, pos_of = joint, None
        elif wrapper_cls == "CriticalKVPress":  # per head at n_kept, on the rescaled scores (stage 1 at finfo.max)
            k_in, k_out = rec["keys_in"], rec["keys_out"]
            layer_kept = [sorted(match_rows(k_out[0, h], k_in[0, h])) for h in range(n_kv)]
            fin = rec["final"][0].double()
            top = torch.finfo(rec["final"].dtype).max
            first = int((1 - ratio) * q_len * press.first_stage_ratio)
            for h in range(n_kv):
                stage_tie(layer, h, s[h], max(1, first), "first stage")
                srt = torch.sort(fin[h], descending=True).values
                hi, lo = float(srt[n_kept - 1]), float(srt[n_kept])
                mid = (hi + lo) / 2 if hi < top else lo
                body = fin[h][(fin[h] < top) & ~padded[h]]
                tol = NEAR_REL * max(abs(mid), float(body.std()) if body.numel() > 1 else 0.0)
                band = torch.nonzero((fin[h] - mid).abs() <= tol).flatten().tolist()
                kept_set = set(layer_kept[h])
                if any(p in kept_set for p in band) and any(p not in kept_set for p in band):
                    entries = sorted([[p, f32(fin[h][p]), int(p in kept_set)] for p in band], key=lambda e: (-e[1], e[0]))
                    near.append([layer, h, entries])
            kept.append(layer_kept)
            continue
        else:  # ChunkKVPress: chunk scores, as it computes them
            k_in, k_out = rec["keys_in"], rec["keys_out"]
            layer_kept = [sorted(match_rows(k_out[0, h], k_in[0, h])) for h in range(n_kv)]
            assert all(k == layer_kept[0] for k in layer_kept), "chunks differ between heads"
            length = press.chunk_length
            summed = s.sum(dim=0)
            bounds = [(b, min(q_len, b + length)) for b in range(0, q_len, length)]
            chunk = torch.tensor([float(summed[b:e].mean()) for b, e in bounds], dtype=torch.float64)
            n_chunks_kept = max(1, int(len(bounds) * (1 - ratio)))
            srt = torch.sort(chunk, descending=True).values
            hi, lo = float(srt[n_chunks_kept - 1]), float(srt[n_chunks_kept])
            finite = chunk[torch.tensor([not bool(padded[:, b:e].any()) for b, e in bounds])]
            pos_of = bounds
            values = chunk
        kept.append(layer_kept)
        mid = (hi + lo) / 2 if math.isfinite(hi) else lo
        tol = NEAR_REL * max(abs(mid), float(finite.std()) if finite.numel() > 1 else 0.0)
        for h in range(n_kv):
            kept_set = set(layer_kept[h])
            if pos_of is None:
                band = torch.nonzero((values[h] - mid).abs() <= tol).flatten().tolist()
                entries = [[p, f32(values[h][p]), int(p in kept_set)] for p in band]
            else:  # a chunk in the band puts all its positions there
                band_chunks = torch.nonzero((values - mid).abs() <= tol).flatten().tolist()
                entries = [[p, f32(values[c]), int(p in kept_set)] for c in band_chunks for p in range(*pos_of[c])]
            if any(e[2] for e in entries) and not all(e[2] for e in entries):
                entries.sort(key=lambda e: (-e[1], e[0]))
                near.append([layer, h, entries])
    per_layer = [len(k[0]) for k in kept]
    return {
        "compression_ratio": ratio,
        "q_len": q_len,
        "n_kept": n_kept,
        **({"n_kept_per_layer": per_layer} if wrapper_cls == "ChunkKVPress" else {}),
        **({"n_kept_per_layer_head": [[len(k) for k in lk] for lk in kept]}
           if wrapper_cls in ("AdaKVPress", "CriticalAdaKVPress") else {}),
        "kept": kept,
        "near_boundary": near,
        "stage_ties": stage_ties,
    }


# The parity test's time: goldens whose every case was measured once (--all-cases, docs/policies.md) but that keep
# only these cases, name -> [(prompt index, compression ratio; None: a decoding case's)].
HELD_CASES = {
    "cap": [(1, 0.5)],
    "chunk_keydiff": [(1, 0.5)],
    "entropy_chunkkv_knorm": [(1, 0.5)],
    "prefill_decoding_knorm": [(1, None)],
}
ALL_CASES = False  # --all-cases


def write_golden(name, t0, envelope, prompts, cases):
    """Writes tests/fixtures/kvpress_NAME/golden.json: the schema and generator, then `envelope` (the press, which
    kvscope policy it is held to, the model, the reference and the conventions, in that order), the prompts and
    the cases (those of HELD_CASES for its goldens, unless --all-cases)."""
    if name in HELD_CASES and not ALL_CASES:
        cases = [c for c in cases if (c["prompt"], c["compression_ratio"]) in HELD_CASES[name]]
    out = {"schema_version": SCHEMA_VERSION, "generator": "tools/make_kvpress_goldens.py", **envelope,
           "prompts": prompts, "cases": cases}
    path = REPO_ROOT / "tests" / "fixtures" / f"kvpress_{name}" / "golden.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump(out), encoding="utf-8")
    print(f"wrote {path} ({path.stat().st_size} bytes, {time.perf_counter() - t0:.0f} s)", file=sys.stderr)


def write_wrapper_golden(name, model, prompts, args, model_sha, n_tok_checked, t0):
    import transformers
    wrapper_cls, wrapper_kwargs, inner, extra = WRAPPERS[name]
    if inner in BUILTINS:
        inner_cls, _, policy, _, fixed = BUILTINS[inner]
        where = {"policy": policy}
    else:
        (inner_cls, _, stem, _), fixed = PRESSES[inner], {}
        where = {"policy_file": f"examples/policies/{stem}.py"}
    cfg = model.config
    cases = []
    for pi, p in enumerate(prompts):
        for ratio in WRAPPER_RATIOS.get(name, RATIOS):
            c = run_wrapper_case(model, p["ids"], wrapper_cls, wrapper_kwargs, inner_cls, {}, ratio)
            c = {"prompt": pi, "press_kwargs": {"wrapper": wrapper_kwargs, "press": inner_cls},
                 "policy_params": {**fixed, **extra}, **c}
            print(f"{name} {p['prompt_file']} r={ratio}: n_kept {c['n_kept']}, "
                  f"{len(c['near_boundary'])} heads with bands", file=sys.stderr)
            cases.append(c)
    write_golden(name, t0, {
        "press": f"kvpress.{wrapper_cls}(press=kvpress.{inner_cls}(compression_ratio=r), **{wrapper_kwargs})",
        **where,
        "model": model_record(args, model_sha, cfg),
        "reference": reference_record(
            args, n_tok_checked,
            load="as the other goldens, then model.set_attn_implementation('sdpa') for the forward "
                 "(AdaKVPress refuses eager attention, ChunkKVPress attention weights)"),
        "conventions": "As tools/make_kvpress_goldens.py's other goldens. AdaKVPress keeps every key and masks the "
                       "pruned ones (module.masked_key_indices): kept is the complement per head, and heads keep "
                       "different counts (n_kept_per_layer_head) summing to heads x n_kept per layer. ChunkKVPress "
                       "keeps whole chunks, the same positions in every head (n_kept_per_layer). near_boundary: "
                       "positions whose score (AdaKV: the inner press's score, the safeguard's as +inf, at the "
                       "layer-wide boundary; ChunkKV: their chunk's score; CriticalAdaKV, which masks as AdaKV: "
                       "the head's final score (inner score, its first stage as float32 max, plus epsilon, times "
                       "|W_o v|_1) at the head's own budget) lies within band_tol of the boundary. stage_ties: heads "
                       "whose safeguard, first stage or (CriticalAdaKV) layer-wide head budgets end on a near tie.",
    }, prompts, cases)


def write_per_layer_golden(name, model, prompts, args, model_sha, n_tok_checked, t0):
    """PerLayerCompressionPress(press, LAYER_RATIOS) on the three prompts: kept sets as run_case records them."""
    inner = PER_LAYER[name]
    if inner in BUILTINS:
        cls_name, _, policy, _, fixed = BUILTINS[inner]
        where = {"policy": policy}
    else:
        (cls_name, _, stem, _), fixed = PRESSES[inner], {}
        where = {"policy_file": f"examples/policies/{stem}.py"}
    assert model.config.num_hidden_layers == len(LAYER_RATIOS)
    ratio = sum(LAYER_RATIOS) / len(LAYER_RATIOS)
    ratios_text = "/".join(repr(r) for r in LAYER_RATIOS)
    cases = []
    for pi, p in enumerate(prompts):
        c = run_case(model, p["ids"], cls_name, {}, ratio, layer_ratios=LAYER_RATIOS)
        c = {"prompt": pi, "press_kwargs": {"compression_ratios": ratios_text},
             "policy_params": {**fixed, "allocation": "per_layer", "layer_ratios": ratios_text}, **c}
        print(f"{name} {p['prompt_file']}: n_kept per layer {c.get('n_kept_per_layer')}, "
              f"{len(c['near_boundary'])} heads with bands", file=sys.stderr)
        cases.append(c)
    write_golden(name, t0, {
        "press": f"kvpress.PerLayerCompressionPress(press=kvpress.{cls_name}(), compression_ratios=[...])",
        **where,
        "model": model_record(args, model_sha, model.config),
        "reference": reference_record(
            args, n_tok_checked,
            load="AutoModelForCausalLM.from_pretrained(dir, gguf_file=file, dtype=torch.float32, "
                 "attn_implementation='eager'), CPU"),
        "conventions": "As tools/make_kvpress_goldens.py's other goldens. Layer l keeps compute_n_kept(n, "
                       "compression_ratios[l]) (n_kept_per_layer); compression_ratio is their mean (the press's "
                       "own compression_ratio), which kvscope's per_layer allocation does not use.",
    }, prompts, cases)


def press_of(name):
    """(kvpress class, kvscope policy spec, its fixed parameters) of a press in BUILTINS or PRESSES."""
    if name in BUILTINS:
        cls_name, _, policy, _, fixed = BUILTINS[name]
        return cls_name, policy, fixed
    cls_name, _, stem, _ = PRESSES[name]
    return cls_name, f"python:examples/policies/{stem}.py", {}


@torch.no_grad()
def run_composed_case(model, ids, first_cls, then_cls, r1, r2, then_kwargs=None):
    """ComposedPress([first(r1), then(r2, **then_kwargs)]) on one prefill: kept positions per (layer, KV head), the
    second stage's near-tie band (positions), and the heads whose first stage ends in a near tie (stage_ties)."""
    import kvpress
    from kvpress.utils import compute_n_kept
    from transformers import DynamicCache

    first = getattr(kvpress, first_cls)(compression_ratio=r1)
    then = getattr(kvpress, then_cls)(compression_ratio=r2, **(then_kwargs or {}))
    o1, o2 = PressObserver(first), PressObserver(then)
    cache = DynamicCache()
    attention = then_cls in ATTENTION_PRESSES
    if attention:  # the second press then computes its window attention from the keys it is given
        model.set_attn_implementation("sdpa")
    try:
        with kvpress.ComposedPress([first, then])(model):
            model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
    finally:
        if attention:
            model.set_attn_implementation("eager")
    q_len = len(ids)
    n1 = compute_n_kept(q_len, r1)
    n2 = compute_n_kept(n1, r2)
    kept, near, stage_ties = [], [], []
    for layer in range(model.config.num_hidden_layers):
        a, b = o1.records[layer], o2.records[layer]
        n_kv = a["keys_in"].shape[1]
        assert b["keys_out"].shape[2] == n2 and torch.equal(cache.layers[layer].keys, b["keys_out"])
        layer_kept = []
        for h in range(n_kv):
            pos1 = match_rows(a["keys_out"][0, h], a["keys_in"][0, h])
            assert torch.equal(b["keys_in"][0, h], a["keys_out"][0, h])
            pos = [pos1[i] for i in match_rows(b["keys_out"][0, h], b["keys_in"][0, h])]
            layer_kept.append(sorted(pos))
            if then_cls in ATTENTION_PRESSES:
                first_scores = a["scores"][0, h].double()
                v = torch.sort(first_scores, descending=True).values[:n1]
                close = (v[:-1] - v[1:]).abs() <= ORDER_NEAR_REL * v[:-1].abs()
                close &= v[:-1] != first_scores.max()  # the padded window: exact ties in both engines
                if bool(close.any()):
                    stage_ties.append([layer, h, "first press order"])
            for stage, scores, k, where in (("first", a["scores"][0, h].double(), n1, None),
                                            ("then", b["scores"][0, h].double(), n2, pos1)):
                srt = torch.sort(scores, descending=True).values
                mid = float(srt[k - 1] + srt[k]) / 2
                padded = first_cls in PADDED if stage == "first" else then_cls in PADDED
                body = scores[scores != scores.max()] if padded else scores
                tol = NEAR_REL * max(abs(mid), float(body.std()))
                band = torch.nonzero((scores - mid).abs() <= tol).flatten().tolist()
                kept_idx = set(scores.topk(k).indices.tolist())
                if not (any(i in kept_idx for i in band) and any(i not in kept_idx for i in band)):
                    continue
                if stage == "first":
                    stage_ties.append([layer, h, "first press"])
                else:  # indices into the first press's output, as original positions
                    entries = [[where[i], f32(scores[i]), int(where[i] in set(pos))] for i in band]
                    near.append([layer, h, sorted(entries, key=lambda e: (-e[1], e[0]))])
        kept.append(layer_kept)
    return {"compression_ratio": r1, "q_len": q_len, "n_kept": n2, "kept": kept, "near_boundary": near,
            "stage_ties": stage_ties}


def write_composed_golden(name, model, prompts, args, model_sha, n_tok_checked, t0):
    first, then, r2, r1s, *rest = COMPOSED[name]
    then_kwargs = rest[0] if rest else {}
    (first_cls, first_policy, first_fixed), (then_cls, then_policy, then_fixed) = press_of(first), press_of(then)
    if then_kwargs:  # mapped as the built-in's own variants are (BUILTINS)
        then_fixed = {**then_fixed, **{BUILTINS[then][3][k]: v for k, v in then_kwargs.items()}}
    params = {"first": first_policy, "then": then_policy, "then_ratio": r2,
              **{f"first.{k}": v for k, v in first_fixed.items()}, **{f"then.{k}": v for k, v in then_fixed.items()}}
    then_text = "".join(f", {k}={v}" for k, v in then_kwargs.items())
    cases = []
    for pi, p in enumerate(prompts):
        for r1 in r1s:
            c = run_composed_case(model, p["ids"], first_cls, then_cls, r1, r2, then_kwargs)
            c = {"prompt": pi, "press_kwargs": {"presses": f"{first_cls}({r1}), {then_cls}({r2}{then_text})"},
                 "policy_params": params, **c}
            print(f"{name} {p['prompt_file']} r1={r1} r2={r2}: n_kept {c['n_kept']}, {len(c['near_boundary'])} "
                  f"heads with bands, {len(c['stage_ties'])} first-stage ties", file=sys.stderr)
            cases.append(c)
    write_golden(name, t0, {
        "press": f"kvpress.ComposedPress([kvpress.{first_cls}(compression_ratio=r1), "
                 f"kvpress.{then_cls}(compression_ratio={r2}{then_text})])",
        "policy": "compose",
        "model": model_record(args, model_sha, model.config),
        "reference": reference_record(
            args, n_tok_checked,
            load="AutoModelForCausalLM.from_pretrained(dir, gguf_file=file, dtype=torch.float32, "
                 "attn_implementation='eager'), CPU" + (
                     "; model.set_attn_implementation('sdpa') for the forward (the second press recomputes its "
                     "attention over the first's keys, in their topk order)" if then_cls in ATTENTION_PRESSES else "")),
        "conventions": "As tools/make_kvpress_goldens.py's other goldens. compression_ratio is the first press's "
                       "(kvscope's --compression-ratio); n_kept = compute_n_kept(compute_n_kept(n, r1), r2). "
                       "near_boundary: the second press's band, as original positions; stage_ties: heads whose "
                       "first press ends in a near tie, and (a second press that reads attention, which scores "
                       "the first's keys in their topk order) whose first press's kept scores hold two within "
                       "ORDER_NEAR_REL of each other. A policy_params value python:PATH is relative to the "
                       "repository.",
    }, prompts, cases)


@torch.no_grad()
def run_block_case(model, ids, inner_cls, block_size, ratio, staged=False):
    """BlockPress(inner(ratio), block_size) on one prefill: kept positions per (layer, KV head), and the near-tie band
    of the inner press's scores of every entry in one go (meaningful for a press that scores each entry alone). With
    `staged`, also the layers where some block's selection has a boundary within DECODE_NEAR_REL (relative) in the
    inner press's own scores of that block: the block's choice is then the numbers', and, through BlockPress's gather of
    the hidden states, it changes every head's later subsets (stage_ties lists every head of such a layer)."""
    import kvpress
    from kvpress.utils import compute_n_kept
    from transformers import DynamicCache

    inner = getattr(kvpress, inner_cls)(compression_ratio=ratio)
    press = kvpress.BlockPress(press=inner, block_size=block_size)
    records = {}
    orig = press.compress

    def compress(module, hidden_states, keys, values, attentions, kwargs):
        k_out, v_out = orig(module, hidden_states, keys, values, attentions, kwargs)
        whole = inner.score(module, hidden_states, keys, values, attentions, kwargs)
        records[module.layer_idx] = (keys.detach().clone(), k_out.detach().clone(), whole.detach().clone())
        return k_out, v_out

    press.compress = compress
    q_len = len(ids)
    n_kept = compute_n_kept(q_len, ratio)
    gaps = {}  # layer -> the smallest relative gap at any block's boundary
    if staged:
        orig_score = inner.score

        def score(module, hidden_states, keys, values, attentions, kwargs):
            s = orig_score(module, hidden_states, keys, values, attentions, kwargs)
            for h in range(s.shape[1]):
                sh = s[0, h].double()
                srt = torch.sort(sh, descending=True).values
                if len(srt) > n_kept:
                    a, b = float(srt[n_kept - 1]), float(srt[n_kept])
                    gap = abs(a - b) / max(abs(a + b) / 2, float(sh.std()))
                    gaps[module.layer_idx] = min(gaps.get(module.layer_idx, math.inf), gap)
            return s

        inner.score = score
    model.set_attn_implementation("sdpa")  # BlockPress refuses attention weights
    try:
        with press(model):
            model(input_ids=torch.tensor([ids]), past_key_values=DynamicCache(), use_cache=True)
    finally:
        model.set_attn_implementation("eager")
    kept, near = [], []
    for layer in range(model.config.num_hidden_layers):
        k_in, k_out, whole = records[layer]
        layer_kept = []
        for h in range(k_in.shape[1]):
            pos = sorted(match_rows(k_out[0, h], k_in[0, h]))
            assert len(pos) == n_kept
            sh = whole[0, h].double()
            srt = torch.sort(sh, descending=True).values
            mid = float(srt[n_kept - 1] + srt[n_kept]) / 2
            tol = NEAR_REL * max(abs(mid), float(sh.std()))
            band = torch.nonzero((sh - mid).abs() <= tol).flatten().tolist()
            kept_set = set(pos)
            if any(p in kept_set for p in band) and any(p not in kept_set for p in band):
                near.append([layer, h, sorted([[p, f32(sh[p]), int(p in kept_set)] for p in band],
                                              key=lambda e: (-e[1], e[0]))])
            layer_kept.append(pos)
        kept.append(layer_kept)
    out = {"compression_ratio": ratio, "q_len": q_len, "n_kept": n_kept, "kept": kept, "near_boundary": near}
    if staged:
        n_kv = model.config.num_key_value_heads
        out["stage_ties"] = [[layer, h, f"a block's boundary at relative gap {gaps[layer]:.1e} in this layer"]
                             for layer in sorted(gaps) if gaps[layer] <= DECODE_NEAR_REL for h in range(n_kv)]
        out["min_exact_share"] = BLOCK_MIN_EXACT_SHARE
    return out


@torch.no_grad()
def run_decoding_case(model, ids, inner_cls, interval, target, n_decode, inner_kwargs=None, press_kwargs=None,
                      attn="eager", prefill_ratio=None):
    """DecodingPress(inner, interval, target, **press_kwargs) over the prefill and n_decode greedy decode steps (as
    kvpress's pipeline decodes: explicit position ids) with attention `attn`: the generated ids, and per (layer, KV
    head) the original positions of the entries in the cache at the end, tracked through every compression (rows
    matched bitwise). With `prefill_ratio`, PrefillDecodingPress(prefilling_press=inner's class(compression_ratio=
    prefill_ratio), decoding_press=that DecodingPress): the prefill compressed too."""
    import kvpress
    from transformers import DynamicCache

    inner = getattr(kvpress, inner_cls)(**(inner_kwargs or {}))
    decoding = kvpress.DecodingPress(base_press=inner, compression_interval=interval, target_size=target,
                                     **(press_kwargs or {}))
    press = decoding
    if prefill_ratio is not None:
        prefilling = getattr(kvpress, inner_cls)(compression_ratio=prefill_ratio, **(inner_kwargs or {}))
        press = kvpress.PrefillDecodingPress(prefilling_press=prefilling, decoding_press=decoding)
    n_layer, n_kv = model.config.num_hidden_layers, model.config.num_key_value_heads
    q_len = len(ids)
    positions = [[list(range(q_len)) for _ in range(n_kv)] for _ in range(n_layer)]
    compressions = [0] * n_layer
    gaps = [[math.inf] * n_kv for _ in range(n_layer)]
    buffered = [[] for _ in range(n_layer)]  # per compression: the hidden-state rows the press was given
    orig = decoding.compress

    def compress(module, hidden_states, keys, values, attentions, kwargs):
        k_out, v_out = orig(module, hidden_states, keys, values, attentions, kwargs)
        layer = module.layer_idx
        buffered[layer].append(hidden_states.shape[1])
        assert k_out.shape[2] == min(target, keys.shape[2]), (k_out.shape, target)
        compressions[layer] += 1
        if keys.shape[2] <= target:  # a target above the cache: kept whole (the buffer is emptied all the same)
            return k_out, v_out
        scores = inner.score(module, hidden_states, keys, values, attentions, kwargs)[0].double()
        for h in range(n_kv):  # the relative gap at this compression's boundary (the press keeps `target`)
            srt = torch.sort(scores[h], descending=True).values
            a, b = float(srt[target - 1]), float(srt[target])
            gap = abs(a - b) / max(abs(a + b) / 2, float(scores[h].std()))
            gaps[layer][h] = min(gaps[layer][h], gap)
        for h in range(n_kv):
            assert len(positions[layer][h]) == keys.shape[2]
            positions[layer][h] = [positions[layer][h][i] for i in match_rows(k_out[0, h], keys[0, h])]
        return k_out, v_out

    decoding.compress = compress
    if prefill_ratio is not None:
        orig_prefill = prefilling.compress

        def compress_prefill(module, hidden_states, keys, values, attentions, kwargs):
            k_out, v_out = orig_prefill(module, hidden_states, keys, values, attentions, kwargs)
            layer, n_kept = module.layer_idx, k_out.shape[2]
            scores = prefilling.score(module, hidden_states, keys, values, attentions, kwargs)[0].double()
            for h in range(n_kv):
                srt = torch.sort(scores[h], descending=True).values
                a, b = float(srt[n_kept - 1]), float(srt[n_kept])
                gaps[layer][h] = min(gaps[layer][h], abs(a - b) / max(abs(a + b) / 2, float(scores[h].std())))
                positions[layer][h] = [positions[layer][h][i] for i in match_rows(k_out[0, h], keys[0, h])]
            return k_out, v_out

        prefilling.compress = compress_prefill
    cache = DynamicCache()
    model.set_attn_implementation(attn)
    try:
        with press(model):
            out = model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
            generated = [int(out.logits[0, -1].argmax())]
            for step in range(n_decode):
                for layer in range(n_layer):
                    for h in range(n_kv):
                        positions[layer][h].append(q_len + step)
                out = model(input_ids=torch.tensor([[generated[-1]]]), past_key_values=cache,
                            position_ids=torch.tensor([[q_len + step]]), use_cache=True)
                generated.append(int(out.logits[0, -1].argmax()))
    finally:
        model.set_attn_implementation("eager")
    assert len(set(compressions)) == 1 and all(b == buffered[0] for b in buffered), (compressions, buffered)
    for layer in range(n_layer):
        assert cache.layers[layer].keys.shape[2] == len(positions[layer][0])
    return {"q_len": q_len, "target_size": target, "compression_interval": interval, "decode_steps": n_decode,
            "compressions": compressions[0], "buffered_rows": buffered[0], "generated_ids": generated,
            "kept": [[sorted(p) for p in layer] for layer in positions], "near_boundary": [],
            "min_exact_share": MIN_EXACT_SHARE,
            # a head whose boundary at some compression is a near tie: which entry leaves there is the numbers', and
            # what leaves never comes back, so the final sets may differ in any position after it
            "stage_ties": [[layer, h, f"compression boundary at relative gap {gaps[layer][h]:.1e}"]
                           for layer in range(n_layer) for h in range(n_kv) if gaps[layer][h] <= DECODE_NEAR_REL]}


@torch.no_grad()
def run_chunk_case(model, ids, inner_cls, chunk_length, ratio):
    """ChunkPress(inner(ratio), chunk_length) on one prefill: kept positions per (layer, KV head), and per head the
    near-tie band at each chunk's own boundary (positions of the whole prompt)."""
    import kvpress
    from transformers import DynamicCache

    inner = getattr(kvpress, inner_cls)(compression_ratio=ratio)
    press = kvpress.ChunkPress(press=inner, chunk_length=chunk_length)
    chunk_scores, records = {}, {}
    orig_score, orig_compress = inner.score, press.compress

    def score(module, *a):
        s = orig_score(module, *a)
        chunk_scores.setdefault(module.layer_idx, []).append(s.detach().clone())
        return s

    def compress(module, hidden_states, keys, values, attentions, kwargs):
        k_out, v_out = orig_compress(module, hidden_states, keys, values, attentions, kwargs)
        records[module.layer_idx] = (keys.detach().clone(), k_out.detach().clone())
        return k_out, v_out

    inner.score, press.compress = score, compress
    model.set_attn_implementation("sdpa")  # ChunkPress refuses attention weights
    try:
        with press(model):
            model(input_ids=torch.tensor([ids]), past_key_values=DynamicCache(), use_cache=True)
    finally:
        model.set_attn_implementation("eager")
    q_len = len(ids)
    kept, near, totals = [], [], set()
    for layer in range(model.config.num_hidden_layers):
        k_in, k_out = records[layer]
        layer_kept = [sorted(match_rows(k_out[0, h], k_in[0, h])) for h in range(k_in.shape[1])]
        starts = list(range(0, q_len, chunk_length))
        assert len(chunk_scores[layer]) == len(starts), "one score call per chunk"
        for h, pos in enumerate(layer_kept):
            kept_set, entries = set(pos), []
            for start, s in zip(starts, chunk_scores[layer]):
                sh = s[0, h].double()
                m = sh.numel()
                n_kept = max(1, int(m * (1 - ratio)))
                assert sum(1 for p in pos if start <= p < start + m) == n_kept
                if n_kept >= m:
                    continue
                srt = torch.sort(sh, descending=True).values
                mid = float(srt[n_kept - 1] + srt[n_kept]) / 2
                tol = NEAR_REL * max(abs(mid), float(sh.std()))
                band = [start + i for i in torch.nonzero((sh - mid).abs() <= tol).flatten().tolist()]
                if any(p in kept_set for p in band) and any(p not in kept_set for p in band):
                    entries += [[p, f32(sh[p - start]), int(p in kept_set)] for p in band]
            if entries:
                near.append([layer, h, sorted(entries, key=lambda e: (-e[1], e[0]))])
            totals.add(len(pos))
        kept.append(layer_kept)
    assert len(totals) == 1, totals
    return {"compression_ratio": ratio, "q_len": q_len, "n_kept": totals.pop(), "kept": kept, "near_boundary": near}


@torch.no_grad()
def run_entropy_chunkkv_case(model, ids, inner_cls, chunk_length, low_length, ratio):
    """EntropyGatedChunkKVPress(inner(ratio), chunk_length, low_length) on one prefill: kept positions per (layer, KV
    head), the same in every head, and the layers whose head-summed scores (float32, as the press sums them) hold
    a near tie between a kept and an evicted entry (stage_ties: the gate's steps then pick by torch's order)."""
    import kvpress
    from transformers import DynamicCache

    inner = getattr(kvpress, inner_cls)(compression_ratio=ratio)
    press = kvpress.EntropyGatedChunkKVPress(press=inner, chunk_length=chunk_length,
                                             low_entropy_chunk_length=low_length)
    records = {}
    orig_score, orig_compress = inner.score, press.compress

    def score(module, *a):
        s = orig_score(module, *a)
        records.setdefault(module.layer_idx, {})["scores"] = s.detach().clone()
        return s

    def compress(module, hidden_states, keys, values, attentions, kwargs):
        k_out, v_out = orig_compress(module, hidden_states, keys, values, attentions, kwargs)
        records.setdefault(module.layer_idx, {}).update(keys_in=keys.detach().clone(), keys_out=k_out.detach().clone())
        return k_out, v_out

    inner.score, press.compress = score, compress
    model.set_attn_implementation("sdpa")  # the press refuses attention weights
    try:
        with press(model):
            model(input_ids=torch.tensor([ids]), past_key_values=DynamicCache(), use_cache=True)
    finally:
        model.set_attn_implementation("eager")
    q_len = len(ids)
    n_kept = max(1, int(q_len * (1 - ratio)))
    kept, stage_ties = [], []
    for layer in range(model.config.num_hidden_layers):
        rec = records[layer]
        k_in, k_out = rec["keys_in"], rec["keys_out"]
        layer_kept = [sorted(match_rows(k_out[0, h], k_in[0, h])) for h in range(k_in.shape[1])]
        assert all(k == layer_kept[0] for k in layer_kept) and len(layer_kept[0]) == n_kept
        summed = rec["scores"].sum(dim=1)[0].float().double()
        kept_set = set(layer_kept[0])
        tol = ENTROPY_TIE_REL * float(summed.abs().max())
        ins = summed[sorted(kept_set)]
        outs = summed[[p for p in range(q_len) if p not in kept_set]]
        if bool(((ins[:, None] - outs[None, :]).abs() <= tol).any()):
            stage_ties += [[layer, h, "near-tied head-summed scores across the kept set's boundary"]
                           for h in range(k_in.shape[1])]
        kept.append(layer_kept)
    return {"compression_ratio": ratio, "q_len": q_len, "n_kept": n_kept, "kept": kept, "near_boundary": [],
            "stage_ties": stage_ties}


def write_entropy_chunkkv_golden(name, model, prompts, args, model_sha, n_tok_checked, t0):
    inner, chunk_length, low_length = ENTROPY_CHUNKKV[name]
    inner_cls, _, stem, _ = PRESSES[inner]
    cases = []
    for pi, p in enumerate(prompts):
        for ratio in RATIOS:
            c = run_entropy_chunkkv_case(model, p["ids"], inner_cls, chunk_length, low_length, ratio)
            c = {"prompt": pi, "press_kwargs": {"chunk_length": chunk_length, "low_entropy_chunk_length": low_length,
                                                "press": inner_cls},
                 "policy_params": {"selection": "entropy_chunkkv", "chunk_length": chunk_length,
                                   "low_entropy_chunk_length": low_length}, **c}
            print(f"{name} {p['prompt_file']} r={ratio}: n_kept {c['n_kept']}, {len(c['stage_ties']) // 3} layers "
                  f"with near ties", file=sys.stderr)
            cases.append(c)
    write_golden(name, t0, {
        "press": f"kvpress.EntropyGatedChunkKVPress(press=kvpress.{inner_cls}(compression_ratio=r), "
                 f"chunk_length={chunk_length}, low_entropy_chunk_length={low_length})",
        "policy_file": f"examples/policies/{stem}.py",
        "model": model_record(args, model_sha, model.config),
        "reference": reference_record(
            args, n_tok_checked,
            load="as the other goldens, then model.set_attn_implementation('sdpa') for the forward (the press "
                 "refuses attention weights)"),
        "conventions": "As tools/make_kvpress_goldens.py's other goldens. Every head keeps the same n_kept entries. "
                       "stage_ties: every head of a layer whose head-summed scores (float32) hold a kept and an evicted "
                       f"entry within {ENTROPY_TIE_REL} x the largest |score| (the gate's steps then follow torch's order).",
    }, prompts, cases)


def write_chunk_golden(name, model, prompts, args, model_sha, n_tok_checked, t0):
    inner, chunk_length = CHUNK[name]
    inner_cls, _, stem, _ = PRESSES[inner]
    cases = []
    for pi, p in enumerate(prompts):
        for ratio in RATIOS:
            c = run_chunk_case(model, p["ids"], inner_cls, chunk_length, ratio)
            c = {"prompt": pi, "press_kwargs": {"chunk_length": chunk_length, "press": inner_cls},
                 "policy_params": {"selection": "chunk", "chunk_length": chunk_length},
                 # the press in one pass, printed beside it: the chunks change KeyDiff's every score
                 "measured_params": [{}], **c}
            print(f"{name} {p['prompt_file']} r={ratio}: n_kept {c['n_kept']}, {len(c['near_boundary'])} heads with "
                  f"bands", file=sys.stderr)
            cases.append(c)
    write_golden(name, t0, {
        "press": f"kvpress.ChunkPress(press=kvpress.{inner_cls}(compression_ratio=r), chunk_length={chunk_length})",
        "policy_file": f"examples/policies/{stem}.py",
        "model": model_record(args, model_sha, model.config),
        "reference": reference_record(
            args, n_tok_checked,
            load="as the other goldens, then model.set_attn_implementation('sdpa') for the forward (ChunkPress "
                 "refuses attention weights)"),
        "conventions": "As tools/make_kvpress_goldens.py's other goldens. n_kept: what every head keeps, the sum over "
                       "the chunks of max(1, int(len (1 - R))). near_boundary: per head, the band of each chunk's own "
                       "scores (the press on that chunk alone) around that chunk's boundary, as prompt positions.",
    }, prompts, cases)


def write_block_golden(name, model, prompts, args, model_sha, n_tok_checked, t0):
    inner, block_size, held, measured = BLOCK[name]
    inner_cls, _, stem, _ = PRESSES[inner]
    cases = []
    only_prompts, ratios = BLOCK_CASES.get(name, (range(len(prompts)), RATIOS))
    for pi, p in enumerate(prompts):
        if pi not in only_prompts:
            continue
        for ratio in ratios:
            c = run_block_case(model, p["ids"], inner_cls, block_size, ratio, staged=name in STAGED_BLOCK)
            c = {"prompt": pi, "press_kwargs": {"block_size": block_size, "press": inner_cls},
                 "policy_params": held if held is not None else {}, "measured_params": measured, **c}
            if held is None:
                c["measured_only"] = True
            print(f"{name} {p['prompt_file']} r={ratio}: n_kept {c['n_kept']}, {len(c['near_boundary'])} heads with "
                  f"bands", file=sys.stderr)
            cases.append(c)
    write_golden(name, t0, {
        "press": f"kvpress.BlockPress(press=kvpress.{inner_cls}(compression_ratio=r), block_size={block_size})",
        "policy_file": f"examples/policies/{stem}.py",
        "model": model_record(args, model_sha, model.config),
        "reference": reference_record(
            args, n_tok_checked,
            load="as the other goldens, then model.set_attn_implementation('sdpa') for the forward (BlockPress "
                 "refuses attention weights)"),
        "conventions": "As tools/make_kvpress_goldens.py's other goldens. near_boundary: the band of the inner "
                       "press's scores of every entry at once. policy_params: the kvscope spec held to kvpress's "
                       "kept sets; measured_params: specs whose agreement the parity test prints without requiring "
                       "it; measured_only: no kvscope spec is held to it.",
    }, prompts, cases)


def write_decoding_golden(name, model, prompts, args, model_sha, n_tok_checked, t0):
    inner, inner_kwargs, intervals = DECODING[name]
    inner_cls, policy, fixed = press_of(inner)
    attn = "sdpa" if name in DECODING_SDPA else "eager"
    # a built-in's parameters that make it the press (BUILTINS), with the inner press's kwargs mapped
    if inner in BUILTINS:
        param_map = BUILTINS[inner][3]
        fixed = {**fixed, **{param_map[k]: v for k, v in inner_kwargs.items() if k in param_map}}
    cases = []
    for pi, p in enumerate(prompts):
        for interval, target_rule, held, measured, *extra in intervals:
            press_kwargs = extra[0] if extra else {}
            prefill_ratio = PREFILL_DECODING.get(name)
            target = target_rule if isinstance(target_rule, int) else \
                max(1, int(len(p["ids"]) * (1 - prefill_ratio))) if target_rule == "prefill" else \
                len(p["ids"]) + int(target_rule[len("prompt"):] or 0)
            c = run_decoding_case(model, p["ids"], inner_cls, interval, target, N_DECODE, inner_kwargs, press_kwargs,
                                  attn, prefill_ratio)
            # the harness's run key: a budget in tokens (the target) instead of a compression ratio
            c = {"prompt": pi, "press_kwargs": {"compression_interval": interval, "target_size": target,
                                                **press_kwargs, **({"press": inner_kwargs} if inner_kwargs else {})},
                 "budget_tokens": target, "policy_params": {**fixed, **held} if held is not None else {},
                 "measured_params": [{**fixed, **m} for m in measured], "compression_ratio": None, **c}
            if held is None:
                c["measured_only"] = True
            print(f"{name} {p['prompt_file']} interval={interval} target={target}: {c['compressions']} compressions "
                  f"(buffered rows {c['buffered_rows']}), {len(c['stage_ties'])} heads with near-tie boundaries, "
                  f"generated {c['generated_ids']}", file=sys.stderr)
            cases.append(c)
    decoding = (f"kvpress.DecodingPress(base_press=kvpress.{inner_cls}("
                f"{'**press_kwargs[press]' if inner_kwargs else ''}), compression_interval=i, target_size="
                f"{'t' if inner_kwargs or name in PREFILL_DECODING else 'n'}, **the other press_kwargs)")
    if name in PREFILL_DECODING:
        decoding = (f"kvpress.PrefillDecodingPress(prefilling_press=kvpress.{inner_cls}(compression_ratio="
                    f"{PREFILL_DECODING[name]}), decoding_press={decoding}) with t = int(n (1 - "
                    f"{PREFILL_DECODING[name]}))")
    write_golden(name, t0, {
        "press": decoding,
        **({"policy": policy} if inner in BUILTINS else {"policy_file": policy[len("python:"):]}),
        "model": model_record(args, model_sha, model.config),
        "reference": reference_record(
            args, n_tok_checked,
            load="AutoModelForCausalLM.from_pretrained(dir, gguf_file=file, dtype=torch.float32, "
                 f"attn_implementation='eager'), CPU; greedy decoding with explicit position ids as kvpress's "
                 f"pipeline decodes{'' if attn == 'eager' else ', model.set_attn_implementation(' + repr(attn) + ') for the run'}"),
        "conventions": "As tools/make_kvpress_goldens.py's other goldens. target_size is a case's own (the "
                       "prompt's length, or tokens below or above it; budget_tokens: kvscope's --budget); "
                       "buffered_rows: the hidden-state rows the press scored at each compression; decode_steps forward passes after the prefill, each "
                       "feeding the previous greedy token (generated_ids: the prefill's token, then each step's); "
                       "kept: the original positions in each (layer, KV head) after the last step. stage_ties: heads "
                       f"with a compression boundary within {DECODE_NEAR_REL} (relative); min_exact_share: the "
                       "share of heads the parity test requires to be exact.",
    }, prompts, cases)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--press", action="append",
                    choices=sorted({**PRESSES, **BUILTINS, **WRAPPERS, **PER_LAYER, **COMPOSED, **BLOCK, **DECODING,
                                    **CHUNK, **ENTROPY_CHUNKKV}),
                    help="only these (default: all)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--all-cases", action="store_true",
                    help="write every case of the goldens in HELD_CASES (to measure them once), not only the held ones")
    args = ap.parse_args()
    global ALL_CASES
    ALL_CASES = args.all_cases

    t0 = time.perf_counter()
    import transformers
    transformers.utils.logging.disable_progress_bar()
    import kvpress

    tok, model = load_reference(args.model, args.threads)
    cfg = model.config
    assert type(model).__name__ == "LlamaForCausalLM" and gguf_add_bos(args.model) is False
    n_tok_checked = check_tokenizer_against_golden(tok)
    model64 = copy.deepcopy(model).double()
    model_sha = sha256_file(args.model)
    prompts = []
    for rel in PROMPT_FILES:
        text = (REPO_ROOT / rel).read_bytes().decode("utf-8")
        prompts.append({"prompt_file": rel, "text": text, "ids": encode(tok, text)})

    everything = list(PRESSES) + list(BUILTINS) + list(WRAPPERS) + list(PER_LAYER) + list(COMPOSED) + list(BLOCK)
    for name in args.press or everything + list(DECODING) + list(CHUNK) + list(ENTROPY_CHUNKKV):
        if name in ENTROPY_CHUNKKV:
            write_entropy_chunkkv_golden(name, model, prompts, args, model_sha, n_tok_checked, t0)
            continue
        if name in CHUNK:
            write_chunk_golden(name, model, prompts, args, model_sha, n_tok_checked, t0)
            continue
        if name in BLOCK:
            write_block_golden(name, model, prompts, args, model_sha, n_tok_checked, t0)
            continue
        if name in DECODING:
            write_decoding_golden(name, model, prompts, args, model_sha, n_tok_checked, t0)
            continue
        if name in COMPOSED:
            write_composed_golden(name, model, prompts, args, model_sha, n_tok_checked, t0)
            continue
        if name in PER_LAYER:
            write_per_layer_golden(name, model, prompts, args, model_sha, n_tok_checked, t0)
            continue
        if name in WRAPPERS:
            write_wrapper_golden(name, model, prompts, args, model_sha, n_tok_checked, t0)
            continue
        if name in BUILTINS:
            cls_name, variants, policy, param_map, fixed = BUILTINS[name]
        else:
            (cls_name, variants, policy, param_map), fixed = PRESSES[name], {}
        cases = []
        for kwargs, ratios in variants:
            for pi, p in enumerate(prompts):
                for ratio in ratios:
                    seed = TORCH_SEED if name in SEEDED else None
                    c = run_case(model, p["ids"], cls_name, kwargs, ratio, seed)
                    params = {**fixed, **{param_map[k]: v for k, v in kwargs.items() if k in param_map}}
                    if name in SEEDED:
                        params["seed"] = seed
                    if name == "compactor":  # kvpress blends with the compression ratio, which no policy is told
                        params["blending"] = ratio
                    c = {"prompt": pi, "press_kwargs": kwargs, **({"torch_seed": seed} if name in SEEDED else {}),
                         "policy_params": params, **c}
                    c["f64_kept_differs"], c["f64_outside_band"] = [], []
                    if name != "random" and name not in SEEDED:  # float64 draws other random numbers
                        c64 = run_case(model64, p["ids"], cls_name, kwargs, ratio)
                        band = {(l, h): {e[0] for e in es} for l, h, es in c["near_boundary"]}
                        for l in range(cfg.num_hidden_layers):
                            for h in range(cfg.num_key_value_heads):
                                diff = set(c["kept"][l][h]) ^ set(c64["kept"][l][h])
                                if diff:
                                    c["f64_kept_differs"].append([l, h])
                                    if not diff <= band.get((l, h), set()):
                                        c["f64_outside_band"].append([l, h])
                    else:  # re-seeded per call: every layer and head keeps the same positions
                        c["same_in_every_layer"] = all(lk == c["kept"][0] for lk in c["kept"])
                    print(f"{name} {kwargs} {p['prompt_file']} r={ratio}: n_kept {c['n_kept']}, "
                          f"{c['n_exact_ties']} exact ties, {len(c['near_boundary'])} heads with bands, "
                          f"f64 differs {len(c['f64_kept_differs'])} (outside band {c['f64_outside_band']})",
                          file=sys.stderr)
                    cases.append(c)
        write_golden(name, t0, {
            "press": f"kvpress.{cls_name}",
            **({"policy": policy} if name in BUILTINS else {"policy_file": f"examples/policies/{policy}.py"}),
            "model": model_record(args, model_sha, cfg),
            "reference": reference_record(
                args, n_tok_checked,
                load="AutoModelForCausalLM.from_pretrained(dir, gguf_file=file, dtype=torch.float32, "
                     "attn_implementation='eager'), CPU",
                press=f"kvpress.{cls_name}(compression_ratio=r, **press_kwargs), applied with `with "
                      f"press(model): model(input_ids, past_key_values=DynamicCache())`"),
            "conventions": "See tools/make_kvpress_goldens.py's docstring and tests/fixtures/kvpress_knorm/README.md "
                           "(text, ids, positions, kept as there). prompts[i] holds text and ids once; a case names "
                           "its prompt by index. near_boundary entries are [position, score, kept] sorted by "
                           f"decreasing score; band_tol = {NEAR_REL} * max(|midpoint|, std of the head's scores).",
        }, prompts, cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
