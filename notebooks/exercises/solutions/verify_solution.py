"""A solution to notebooks/exercises/my_verify.py, written from scratch with numpy only.

Grade it like your own:

    .venv/bin/specdec grade notebooks/exercises/solutions/verify_solution.py:verify

or, exhaustively, `.venv/bin/pytest -m distribution --verify=<the same spec>`.

It returns a plain tuple (accepted, token), which the contract allows.
"""

from __future__ import annotations

import numpy as np


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    # [V] non-negative weights -> one index, drawn in proportion to them
    return int(rng.choice(len(probs), p=probs / probs.sum()))


def verify(p_target: np.ndarray, q_draft: np.ndarray, draft_tokens, rng: np.random.Generator):
    # p_target [k+1, V], q_draft [k, V], draft_tokens [k] -> (accepted, token)
    p = np.asarray(p_target, dtype=np.float64)
    q = np.asarray(q_draft, dtype=np.float64)
    k = len(draft_tokens)
    for i in range(k):
        x = int(draft_tokens[i])
        # accept with probability min(1, p(x) / q(x)); q(x) > 0 because x was drawn from q
        if rng.random() < min(1.0, p[i, x] / q[i, x]):
            continue
        residual = np.maximum(p[i] - q[i], 0.0)  # the mass q under-covers
        if residual.sum() <= 0.0:  # p == q: a rejection had probability 0; p is the right law
            residual = p[i]
        return i, sample(residual, rng)
    return k, sample(p[k], rng)  # all k accepted: the bonus token from the last row
