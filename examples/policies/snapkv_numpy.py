"""SnapKV (Li et al. 2024, Section 4 and Listing 1) in numpy: the last `window` prompt queries score the prefix,
smoothed by 1-D average pooling; the window itself is always kept. Keeps exactly what the built-in `snapkv`
keeps."""
import numpy as np

needs = ["window_sums"]
params = {"window": 32, "kernel": (7, 1, 101, "1-D pooling kernel, odd")}


def score(obs):
    kernel = obs.params["kernel"]
    group = obs.n_heads // obs.n_kv_heads
    sums = obs.window_sums.reshape(obs.n_kv_heads, group, -1)
    # Mean over the KV head's query heads, summed in head order in float32 as the built-in does.
    s = sums[:, 0, :].copy()
    for q in range(1, group):
        s += sums[:, q, :]
    s /= np.float32(group)
    # Average pooling over the prefix with zero padding counted in the divisor (avg_pool1d), summed in float64.
    prefix = s.shape[1] - min(s.shape[1], obs.window)
    half = kernel // 2
    padded = np.pad(s[:, :prefix].astype(np.float64), ((0, 0), (half, half)))
    pooled = np.zeros((s.shape[0], prefix))
    for offset in range(kernel):
        pooled += padded[:, offset:offset + prefix]
    s[:, :prefix] = (pooled / kernel).astype(np.float32)
    return s
