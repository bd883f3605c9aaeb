"""A merging policy: keep the entries the last prompt query attends to most (TOVA-like) and, instead of
dropping the rest, fold each evicted entry into the kept key it is most similar to (cosine), averaging the two
with equal weight; a kept entry that absorbs several is their mean."""
import numpy as np

needs = ["last_row"]
params = {"recent": 8}


def score(obs):
    group = obs.n_heads // obs.n_kv_heads
    return obs.last_row.reshape(obs.n_kv_heads, group, -1).mean(axis=1)


def merge(ctx):
    kept = ctx.kept
    evicted = np.setdiff1d(np.arange(len(ctx.keys)), kept)
    if len(evicted) == 0:
        return None
    unit = ctx.keys / np.maximum(np.linalg.norm(ctx.keys, axis=1, keepdims=True), 1e-12)
    nearest = kept[np.argmax(unit[evicted] @ unit[kept].T, axis=1)]
    groups = []
    for target in np.unique(nearest):
        sources = evicted[nearest == target]
        weight = 1.0 / (len(sources) + 1)
        groups.append((int(target), [int(s) for s in sources], [weight] * (len(sources) + 1)))
    return groups
