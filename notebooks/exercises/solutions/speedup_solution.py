"""A solution to notebooks/exercises/my_speedup.py, written from scratch with numpy only.

Grade it like your own:

    .venv/bin/specdec grade notebooks/exercises/solutions/speedup_solution.py:plan_k
"""

from __future__ import annotations

import numpy as np


def figures(x, n: int, name: str) -> np.ndarray:
    # a number, or an array of n of them -> [n] float64
    array = np.asarray(x, dtype=np.float64)
    if array.ndim == 0:
        return np.full(n, float(array))
    if array.shape != (n,):
        raise ValueError(f"{name} must be a number or an array of {n}, got shape {array.shape}")
    return array


def plan_k(alpha, c: float, v, k_max: int) -> tuple[int, np.ndarray, np.ndarray]:
    # alpha (a float or [k_max]), c, v (a float or [k_max + 1]), k_max
    #   -> (best_k, expected_tokens [k_max + 1], speedups [k_max + 1])
    if int(k_max) != k_max or k_max < 0:
        raise ValueError(f"k_max must be an int >= 0, got {k_max!r}")
    k = np.arange(int(k_max) + 1)
    rates = figures(alpha, len(k) - 1, "alpha")  # rates[j]: draft j + 1, given 1..j kept
    if not np.all((rates >= 0.0) & (rates <= 1.0)) or not c >= 0.0:
        raise ValueError(f"need rates in [0, 1] and c >= 0, got alpha={alpha!r}, c={c!r}")
    # A, the drafts a round keeps: A >= i when drafts 1..i are all accepted, each given the
    # ones before it, so P(A >= i) is the product of the first i rates. Every round then adds
    # one token of the target's (the correction, or the bonus after k acceptances), and
    # E[A] = sum over i = 1..k of P(A >= i): a round of k drafts yields 1 + that sum.
    reach = np.cumprod(rates)  # [k_max]: P(A >= i), i = 1 .. k_max
    tokens = 1.0 + np.concatenate([[0.0], np.cumsum(reach)])
    # the pass scores k + 1 positions (a row per draft, and the row of the round's last
    # token); a pass over one position (k = 0: plain decoding) is the unit of cost, 1
    if np.ndim(v) == 0:
        passes = np.where(k == 0, 1.0, float(v))
    else:
        passes = figures(v, len(k), "v")
        if passes[0] != 1.0:
            raise ValueError(f"v[0] = v(1) is the unit of cost, 1; got {passes[0]!r}")
    if not np.all(passes > 0):
        raise ValueError(f"v must be > 0 (a figure or k_max + 1 of them), got {v!r}")
    speedups = tokens / (k * c + passes)  # k draft steps and one pass over k + 1 positions
    return int(np.argmax(speedups)), tokens, speedups  # argmax: the first of equal maxima
