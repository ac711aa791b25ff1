"""A solution to notebooks/exercises/my_speedup.py, written from scratch with numpy only.

Grade it like your own:

    .venv/bin/specdec grade notebooks/exercises/solutions/speedup_solution.py:plan_k
"""

from __future__ import annotations

import numpy as np


def expected_tokens(alpha: float, k: np.ndarray) -> np.ndarray:
    # [n] draft lengths -> [n]: E = 1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha)
    # Why: a round emits A + 1 tokens, A the accepted drafts (the target's one token comes
    # after a rejection as after k acceptances). A >= i exactly when drafts 1..i are all
    # accepted, probability alpha^i (independent drafts), and E[A] = sum_{i=1..k} P(A >= i),
    # so E[A + 1] = sum_{i=0..k} alpha^i, a geometric sum of k + 1 terms.
    if alpha == 1.0:  # every draft kept: k drafts plus the bonus (the formula's 0/0 limit)
        return k + 1.0
    return (1.0 - alpha ** (k + 1.0)) / (1.0 - alpha)


def plan_k(alpha: float, c: float, v, k_max: int) -> tuple[int, np.ndarray, np.ndarray]:
    # alpha, c, v (a float or [k_max + 1]), k_max -> (best_k, [k_max + 1], [k_max + 1])
    if not 0.0 <= alpha <= 1.0 or not c >= 0.0:
        raise ValueError(f"need 0 <= alpha <= 1 and c >= 0, got alpha={alpha!r}, c={c!r}")
    if int(k_max) != k_max or k_max < 0:
        raise ValueError(f"k_max must be an int >= 0, got {k_max!r}")
    k = np.arange(int(k_max) + 1)
    # v(k+1) for every k: one figure for all, or the measured one per k
    verify = np.broadcast_to(np.asarray(v, dtype=np.float64), k.shape)
    if not np.all(verify > 0):
        raise ValueError(f"v must be > 0 (a figure or k_max + 1 of them), got {v!r}")
    tokens = expected_tokens(alpha, k)
    # the pass scores k + 1 positions: a row to judge each of the k drafts, and the row the
    # round's last token comes from (the bonus row after the k-th draft)
    speedups = tokens / (k * c + verify)  # k draft steps and one pass over k + 1 positions
    return int(np.argmax(speedups)), tokens, speedups  # argmax: the first of equal maxima
