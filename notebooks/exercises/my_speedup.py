"""Exercise: predict the speedup of speculative decoding and choose the draft length k, then
let the grader check it.

Grade your function from the repository root (about a second):

    .venv/bin/specdec grade notebooks/exercises/my_speedup.py:plan_k

Every check is exact (to a relative 1e-9): your three answers are compared with the
formula's on fixed cases (alpha = 0.8, 0 and 1, measured v, ties, k_max = 0) and on a few
hundred seeded random ones, and the report shows the first wrong answer with a hint.

The model (Leviathan et al., 2023; specdec/costs.py, notebook 08). A round drafts k tokens (k
draft steps, each costing c target steps), then one target pass over k + 1 positions scores
them all, costing v(k+1) target steps. Each draft is accepted with probability alpha,
independently, until the first rejection; the round then emits the accepted drafts plus one
token of the target's (the correction after a rejection, or the bonus when all k are kept):

    E(alpha, k) = 1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha)
                  (alpha = 1: every draft is kept, E = k + 1)
    speedup(k)  = E(alpha, k) / (k c + v(k+1))      tokens per target step's worth of time

k = 0 is plain decoding (one token per pass): it is a candidate, with speedup 1 / v(1).

The contract:

    plan_k(alpha, c, v, k_max) -> (best_k, expected_tokens, speedups)

    alpha            a float in [0, 1]: the per-draft acceptance rate
    c                a float >= 0: one draft step, in target steps
    v                a float > 0, the same v(k+1) for every k (v = 1 is Leviathan's formula),
                     or a [k_max + 1] float64 array of measured costs: v[k] = v(k+1), the
                     pass over k + 1 positions that verifies k drafts (so v[0] = v(1))
    k_max            an int >= 0
    returns          expected_tokens  [k_max + 1] float64, expected_tokens[k] = E(alpha, k)
                     speedups         [k_max + 1] float64, speedups[k] = speedup(k)
                     best_k           an int in 0..k_max: the k with the highest speedup,
                                      the smallest such k on ties (np.argmax's rule)

Things the grader catches (each a small mistake it was tested on):

* the exponent off by one: (1 - alpha^k) / (1 - alpha);
* the bonus token forgotten: counting only the accepted drafts (E - 1);
* the verification pass taken as 1 (k c + 1) instead of v, or v[k] read at the wrong index;
* alpha = 1: the formula is 0 / 0 there (a ZeroDivisionError, or NaN);
* best_k from the wrong array (the tokens per round always grow with k), ties that go to
  the largest k, and k = 0 left out of the candidates.

You may use numpy only; do not import `specdec.costs` (that would grade the project's formula).
A worked solution is in solutions/speedup_solution.py — try first.
"""

from __future__ import annotations

import numpy as np


def plan_k(alpha: float, c: float, v, k_max: int) -> tuple[int, np.ndarray, np.ndarray]:
    # alpha, c, v (a float or [k_max + 1]), k_max -> (best_k, [k_max + 1], [k_max + 1])
    raise NotImplementedError(
        "write plan_k() in notebooks/exercises/my_speedup.py, then grade it with: "
        ".venv/bin/specdec grade notebooks/exercises/my_speedup.py:plan_k"
    )
