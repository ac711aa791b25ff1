"""A solution to notebooks/exercises/my_eagle_align.py, written from scratch with numpy only.

Grade it like your own:

    .venv/bin/specdec grade notebooks/exercises/solutions/eagle_align_solution.py:catch_up_pairs
"""

from __future__ import annotations

import numpy as np


def catch_up_pairs(context: np.ndarray, features: np.ndarray, cached: int):
    # context [n], features [m, C], cached -> (tokens [r], feats [r, C])
    ready = min(len(context) - 1, len(features))  # a pair needs f(t) AND its next token x(t+1)
    t = np.arange(cached, ready)  # the cache holds t = 0..cached-1 already: never fed twice
    return context[t + 1], features[t]  # x(t + 1), the token f(t) scored, beside f(t)
