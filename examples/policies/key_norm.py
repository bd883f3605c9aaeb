"""Key norm (kvpress's KnormPress): keys with a small L2 norm draw attention, so keep the smallest norms."""


def score(obs):
    return -((obs.keys.astype("float64") ** 2).sum(axis=-1) ** 0.5)
