"""A solution to notebooks/exercises/my_lookup.py, written from scratch with numpy only.

Grade it like your own:

    .venv/bin/specdec grade notebooks/exercises/solutions/lookup_solution.py:propose_lookup
"""

from __future__ import annotations

import numpy as np


def latest_end(context: np.ndarray, n: int) -> int | None:
    # context [T] -> the largest e <= T - 1 with context[e-n:e] == context[T-n:], or None.
    # e = T would be the last n tokens themselves (nothing follows them): never a match.
    # The occurrence may overlap the last n tokens (e > T - n is allowed).
    T = len(context)
    suffix = context[T - n :]
    for e in range(T - 1, n - 1, -1):  # newest first: the first hit is the most recent
        if np.array_equal(context[e - n : e], suffix):
            return e
    return None


def propose_lookup(context, k: int, n_vocab: int, max_ngram: int = 3):
    # context [T] -> (draft_tokens [m] int64, q_rows [m, V] float64), 0 <= m <= k
    context = np.asarray(context, dtype=np.int64)
    if k < 0 or max_ngram < 1:
        raise ValueError(f"need k >= 0 and max_ngram >= 1, got k={k}, max_ngram={max_ngram}")
    if k > 0:
        for n in range(min(max_ngram, len(context) - 1), 0, -1):  # longest match first
            e = latest_end(context, n)
            if e is not None:
                drafts = context[e : e + k].copy()  # what followed; fewer if the text ends
                # q = one-hot: a copied token is chosen, not drawn, so its law is a point mass
                return drafts, np.eye(n_vocab)[drafts]
    return np.zeros(0, dtype=np.int64), np.zeros((0, n_vocab))
