"""H2O (Zhang et al. 2023, Algorithm 1) in numpy: heavy hitters, the tokens that received the most attention so
far, plus the most recent tokens. Keeps exactly what kvscope's built-in `h2o` keeps."""

needs = ["column_sums"]
params = {"recent_ratio": (0.5, 0.0, 1.0, "share of the budget kept for the most recent tokens")}
# Algorithm 1 evicts at every decode step; the prompt is scored in one pass.
protocol = {"decode_evict": True}


def score(obs):
    group = obs.n_heads // obs.n_kv_heads
    sums = obs.column_sums.reshape(obs.n_kv_heads, group, -1)
    # The accumulated attention lives in obs.state, which follows entries through evictions. Adding one query
    # head at a time, in float32, is the built-in's order, so the sums are bit-identical.
    for q in range(group):
        obs.state += sums[:, q, :]
    return obs.state


def recent(budget, params):
    return int(params["recent_ratio"] * budget)
