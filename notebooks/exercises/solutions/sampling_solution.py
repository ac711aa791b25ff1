"""A solution to notebooks/exercises/my_sampling.py, written from scratch with numpy only.

Grade it like your own:

    .venv/bin/specdec grade notebooks/exercises/solutions/sampling_solution.py:sampling_distribution
"""

from __future__ import annotations

import numpy as np


def softmax(z: np.ndarray) -> np.ndarray:  # [V] -> [V]
    # exp(z - max z) / sum: the shift changes nothing mathematically and keeps exp <= 1
    e = np.exp(z - z.max())
    return e / e.sum()


def top_k_logits(z: np.ndarray, k: int) -> np.ndarray:  # [V] -> [V]
    # keep z >= the k-th largest (ties at the k-th all survive); -inf gets probability 0
    kth = np.sort(z)[-k]
    return np.where(z >= kth, z, -np.inf)


def top_p_probs(p: np.ndarray, top_p: float) -> np.ndarray:  # [V] -> [V]
    # nucleus: largest first (stable: equal p keep their index order); a token stays while
    # the mass before it is < top_p, so the token that crosses top_p is kept
    order = np.argsort(-p, kind="stable")
    before = np.cumsum(p[order]) - p[order]
    kept = np.zeros_like(p)
    kept[order[before < top_p]] = p[order[before < top_p]]
    return kept / kept.sum()


def sampling_distribution(
    logits: np.ndarray, temperature: float, top_k: int | None = None, top_p: float | None = None
) -> np.ndarray:
    # logits [V] -> probs [V] float64
    z = np.asarray(logits, dtype=np.float64)
    if z.ndim != 1 or len(z) == 0 or not np.all(np.isfinite(z)):
        raise ValueError(f"logits must be a non-empty [V] array of finite numbers, got {z!r}")
    if not temperature >= 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature!r}")
    if temperature == 0:  # greedy: all the mass on the argmax (the lowest index on ties)
        return np.eye(len(z))[np.argmax(z)]
    z = (z - z.max()) / temperature  # shift first: a tiny T cannot overflow
    if top_k and top_k < len(z):
        z = top_k_logits(z, top_k)
    p = softmax(z)
    if top_p is not None and top_p < 1.0:
        p = top_p_probs(p, top_p)
    return p
